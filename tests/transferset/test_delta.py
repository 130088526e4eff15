"""The delta formats: file list, the members a splice writes, delta blob
(mirror/transferset/delta/_formats.py)."""

from __future__ import annotations

import gzip
import hashlib
import io
import subprocess
import tarfile
from pathlib import Path

import pytest

from mirror.archive import inspect_archive, tree_hash
from mirror.errors import IntegrityError
from mirror.transferset.delta._formats import (
    DeltaBlobWriter,
    DeltaContent,
    DeltaRecipePart,
    TreeFile,
    archive_ending,
    check_tree,
    file_list_bytes,
    member_header,
    parse_file_list,
    read_delta_blob,
    read_file_list,
)
from mirror.transferset.format import (
    DeltaEntry,
    ManifestItem,
    canonical_json,
    part_names,
)

LONG_DIR = "/".join(f"section-{n:02d}-with-a-rather-long-name" for n in range(6))
TREE = {
    "index.html": b"<html>home</html>\n",
    "guides/page-001/index.html": b"<p>one</p>\n" * 3000,
    "guides/page-002/index.html": b"",
    "assets/logo.png": bytes(range(256)) * 700,
    f"{LONG_DIR}/index.html": b"deep\n",
    "x" * 120 + "/" + "y" * 90 + ".html": b"split into prefix and name\n",
    "z" * 200 + "/" + "w" * 200 + ".html": b"needs a pax path\n",
    "caf\u00e9/menu.html": b"utf-8 path\n",
}


def _entries(tree: dict[str, bytes]) -> list[TreeFile]:
    return [
        TreeFile(path=path, size=len(data), sha256=hashlib.sha256(data).hexdigest())
        for path, data in tree.items()
    ]


def _spliced_members(tree: dict[str, bytes], mtime: int = 1_700_000_000) -> bytes:
    """The members a splice writes anew for `tree` (`member_header`, `archive_ending`), as
    one gzip stream."""
    out, written = bytearray(), set()
    for path, data in tree.items():
        parts = path.split("/")
        for depth in range(1, len(parts)):
            directory = "/".join(parts[:depth])
            if directory not in written:
                written.add(directory)
                out += member_header(directory + "/", 0, mtime, directory=True)
        out += member_header(path, len(data), mtime, directory=False)
        out += data + b"\0" * (-len(data) % 512)
    out += archive_ending(len(out))
    return gzip.compress(bytes(out))


def test_the_members_a_splice_writes_are_a_tar_every_reader_unpacks(tmp_path: Path) -> None:
    path = tmp_path / "bundle.tar.gz"
    path.write_bytes(_spliced_members(TREE))
    with tarfile.open(path, "r:gz") as tar:
        members = {info.name: info for info in tar.getmembers()}
        for name, content in TREE.items():
            info = members[name]
            assert info.isreg() and info.mode == 0o644 and info.mtime == 1_700_000_000
            assert info.uid == 0 and info.gid == 0 and info.uname == "" and info.gname == ""
            extracted = tar.extractfile(info)
            assert extracted is not None and extracted.read() == content
        assert members["guides"].isdir() and members["guides"].mode == 0o755
    subprocess.run(["gzip", "-t", str(path)], check=True)
    out = tmp_path / "out"
    out.mkdir()
    subprocess.run(["tar", "-xzf", str(path), "-C", str(out)], check=True)
    for name, content in TREE.items():
        assert (out / name).read_bytes() == content
    report = inspect_archive(path)
    assert report.tree_sha256 == tree_hash((e.path, e.sha256) for e in _entries(TREE))


def _blob(contents: dict[str, bytes], files: list[TreeFile]) -> bytes:
    out = io.BytesIO()
    writer = DeltaBlobWriter(out)
    for data in contents.values():
        writer.add_content(hashlib.sha256(data).hexdigest(), len(data), [data])
    writer.finish(files)
    return out.getvalue()


def _read(blob: bytes) -> tuple[dict[str, bytes], bytes]:
    contents: dict[str, bytes] = {}
    files = b""
    for member in read_delta_blob(io.BytesIO(blob), label="docs.example.com v2"):
        if isinstance(member, DeltaContent):
            contents[member.sha256] = member.stream.read()
        else:
            files = member.stream.read()
    return contents, files


def test_a_delta_blob_round_trips_and_carries_each_content_once() -> None:
    entries = _entries(TREE)
    carried = {"a": TREE["index.html"], "b": TREE["assets/logo.png"], "c": TREE["index.html"]}
    contents, files = _read(_blob(carried, entries))
    assert contents == {hashlib.sha256(d).hexdigest(): d for d in carried.values()}
    assert len(contents) == 2
    assert parse_file_list(files, label="v2") == entries


def test_a_recipe_travels_after_the_contents_and_before_the_file_list() -> None:
    entries = _entries(TREE)
    out = io.BytesIO()
    writer = DeltaBlobWriter(out)
    writer.add_content(SHA_A, 1, [b"a"])
    writer.add_recipe(io.BytesIO(b'{"format":1,"segments":[]}'), io.BytesIO(b"literal"))
    writer.finish(entries)
    names = []
    for member in read_delta_blob(io.BytesIO(out.getvalue()), label="v2"):
        read = member.stream.read()
        names.append(member.name if isinstance(member, DeltaRecipePart) else type(member).__name__)
        if isinstance(member, DeltaRecipePart) and member.name == "recipe/literals":
            assert read == b"literal"
    assert names == ["DeltaContent", "recipe/segments", "recipe/literals", "DeltaFileList"]


def _tar_gz(members: list[tuple[str, bytes]]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


LIST = file_list_bytes(_entries({"a.html": b"a"}))
SHA_A = hashlib.sha256(b"a").hexdigest()


@pytest.mark.parametrize(
    ("members", "message"),
    [
        ([(f"content/{SHA_A}", b"a")], "has no files.json"),
        ([("files.json", LIST), (f"content/{SHA_A}", b"a")], "goes on after its file list"),
        ([(f"content/{SHA_A}", b"a"), (f"content/{SHA_A}", b"a"), ("files.json", LIST)], "twice"),
        ([("../escape", b"a"), ("files.json", LIST)], "holds '../escape'"),
        ([("content/nothex", b"a"), ("files.json", LIST)], "holds 'content/nothex'"),
        ([("recipe/literals", b"x"), ("files.json", LIST)], "recipe is out of order"),
        ([("recipe/segments", b"{}"), ("files.json", LIST)], "recipe has no literals"),
        (
            [("recipe/segments", b"{}"), ("recipe/literals", b""), ("recipe/literals", b"")],
            "recipe is out of order",
        ),
        (
            [("recipe/segments", b"{}"), ("recipe/literals", b""), (f"content/{SHA_A}", b"a")],
            f"holds 'content/{SHA_A}'",
        ),
    ],
)
def test_a_malformed_delta_blob_is_refused(members: list[tuple[str, bytes]], message: str) -> None:
    with pytest.raises(IntegrityError, match=message):
        _read(_tar_gz(members))


def test_a_delta_blob_that_is_not_gzip_is_refused() -> None:
    with pytest.raises(IntegrityError, match=r"not a readable tar\.gz"):
        _read(b"not a blob at all")


def _list(entries: list[dict[str, object]]) -> bytes:
    import json

    return json.dumps({"format": 1, "files": entries}).encode()


GOOD = {"path": "a.html", "mode": 0o644, "size": 1, "sha256": SHA_A}


@pytest.mark.parametrize(
    ("entries", "message"),
    [
        ([{**GOOD, "path": "../etc/passwd"}], "escapes the root"),
        ([{**GOOD, "path": "/abs.html"}], "absolute path"),
        ([{**GOOD, "path": "a//b.html"}], "not a normalised path"),
        ([{**GOOD, "path": "./a.html"}], "not a normalised path"),
        ([GOOD, GOOD], "duplicates the path"),
        ([GOOD, {**GOOD, "path": "A.html"}], "when letter case is ignored"),
        ([GOOD, {**GOOD, "path": "a.html/b.html"}], "lies below 'a.html'"),
        ([{**GOOD, "mode": 0o755}], "mode 493 is not 0o644"),
        ([{**GOOD, "size": -1}], "not a byte count"),
        ([{**GOOD, "sha256": "ABC"}], "not 64 lowercase hex"),
        ([{**GOOD, "extra": 1}], "exactly path, mode, size and sha256"),
    ],
)
def test_a_bad_file_list_is_refused_naming_the_entry(
    entries: list[dict[str, object]], message: str
) -> None:
    with pytest.raises(IntegrityError, match=message):
        parse_file_list(_list(entries), label="docs.example.com v2")


class _Trickle(io.RawIOBase):
    """A stream giving at most `step` bytes a read: every entry straddles reads."""

    def __init__(self, data: bytes, step: int) -> None:
        self.data, self.step = data, step

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1, /) -> bytes:
        piece, self.data = self.data[: self.step], self.data[self.step :]
        return piece


MANY = {f"d{n % 7}/p\u00e9ge-{n}.html": b"x" * (n % 5) for n in range(300)}


def test_a_file_list_is_written_entry_by_entry_as_its_canonical_json() -> None:
    entries = _entries(MANY)
    document = {"format": 1, "files": [e.as_dict() for e in entries]}
    assert file_list_bytes(entries) == canonical_json(document)
    assert file_list_bytes([]) == canonical_json({"format": 1, "files": []})


@pytest.mark.parametrize("step", [1, 7, 1000, 1 << 20])
def test_a_file_list_is_read_as_it_streams(step: int) -> None:
    entries = _entries(MANY)
    data = file_list_bytes(entries)
    assert list(read_file_list(_Trickle(data, step), label="v2")) == entries
    assert list(read_file_list(_Trickle(file_list_bytes([]), step), label="v2")) == []


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b'{"files":[],"format":2}', "format 2 is not supported"),
        (b'{"files":[],"format":1,"more":1}', "expected format and files"),
        (b'{"files":[],"format":1} x', "not valid strict JSON"),
        (b'{"files":[{"mode":420', "not valid strict JSON"),
        (b'{"files":[' + canonical_json(GOOD) + b";", "not valid strict JSON"),
        (b'{"files":[],"format":1.0}', "float 1.0 is not allowed"),
    ],
)
def test_a_broken_canonical_file_list_is_refused(data: bytes, message: str) -> None:
    with pytest.raises(IntegrityError, match=message):
        list(read_file_list(_Trickle(data, 3), label="docs.example.com v2"))


def test_a_file_list_whose_tree_is_not_the_signed_one_is_refused() -> None:
    entries = _entries(TREE)
    check_tree(entries, tree_hash((e.path, e.sha256) for e in entries), label="v2")
    swapped = [*entries[:2], TreeFile(entries[2].path, entries[3].size, entries[3].sha256)]
    with pytest.raises(IntegrityError, match="the tree of the delta's file list hashes to"):
        check_tree(swapped, tree_hash((e.path, e.sha256) for e in entries[:3]), label="v2")


def _item(**delta: object) -> dict[str, object]:
    sha = "1" * 64
    return {
        "domain": "docs.example.com",
        "version": "2026-11-23",
        "sha256": sha,
        "size": 10,
        "archive_format": "tar.gz",
        "tree_sha256": "2" * 64,
        "exported_at": "2026-11-23T00:00:00Z",
        "parts": [{"name": part_names(sha, 1)[0], "size": 10, "sha256": sha}],
        "delta": {
            "base_version": "2026-11-22",
            "base_tree_sha256": "3" * 64,
            "archive_sha256": "4" * 64,
            "archive_size": 100,
            "file_count": 3,
            "carried_files": 1,
        }
        | delta,
    }


def test_a_tree_archive_item_an_earlier_release_packed_reads_but_is_not_published() -> None:
    """The way this release dropped (docs/delta.md): such a set still reads, so the import
    refuses it naming the remedy; no digest is published for it."""
    from mirror.transferset.delta import publication

    item = ManifestItem.model_validate(_item())
    assert isinstance(item.delta, DeltaEntry)
    assert item.published_sha256 is None and item.published_size is None
    assert (publication(item).refused or "").startswith("its delta is a tree archive")
    with pytest.raises(ValueError, match="a delta against itself"):
        ManifestItem.model_validate(_item(base_version="2026-11-23"))
    with pytest.raises(ValueError, match=r"a delta rebuilds a tar\.gz archive"):
        ManifestItem.model_validate({**_item(), "archive_format": "zip"})


def test_archive_mtime_is_the_signed_export_time_in_utc_seconds() -> None:
    from mirror.transferset.delta._formats import archive_mtime

    assert archive_mtime("2026-11-20T02:00:00Z") == 1_795_140_000
    assert archive_mtime("2026-11-20T03:00:00.9+01:00") == 1_795_140_000
    with pytest.raises(IntegrityError, match="time without a zone"):
        archive_mtime("2026-11-20T02:00:00")
    with pytest.raises(IntegrityError, match="before 1970"):
        archive_mtime("1969-12-31T23:59:59Z")
