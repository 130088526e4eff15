"""mirror.archive on real archives built with tarfile/zipfile: formats, tree hash, refusals."""

from __future__ import annotations

import hashlib
import json
import os
import stat
import subprocess
import sys
import tarfile
import textwrap
import threading
import warnings
import zipfile
from pathlib import Path

import pytest

from mirror.archive import (
    FEED_DEPTH,
    ArchiveFeed,
    ArchiveLimits,
    ArchiveReport,
    detect_format,
    extract_archive,
    file_extension,
    inspect_archive,
    spill,
    tree_hash,
)
from mirror.errors import EXIT_INTEGRITY, IntegrityError, NotFound, OperationFailed
from tests.fixtures.archives import (
    Compression,
    Content,
    Entry,
    Generated,
    gzip_bytes,
    patch_zip_sizes,
    sample_site,
    tar_bytes,
    write_generated_tar,
    write_generated_zip,
    write_tar,
    write_zip,
)
from tests.fixtures.cli import REPO

MiB = 1024 * 1024


def expected_tree_hash(files: dict[str, bytes]) -> str:
    """The documented definition, written out independently of the implementation."""
    records = b"".join(
        path.encode() + b"\0" + hashlib.sha256(data).hexdigest().encode() + b"\n"
        for path, data in sorted(files.items(), key=lambda item: item[0].encode())
    )
    return hashlib.sha256(records).hexdigest()


DEFAULT_LIMITS = ArchiveLimits()


def streamed(path: Path, limits: ArchiveLimits = DEFAULT_LIMITS) -> ArchiveReport:
    """The report of `path` inspected as a download would: fed in uneven blocks."""
    data = path.read_bytes()
    feed = ArchiveFeed(path, len(data), limits)
    try:
        at, step = 0, 1
        while at < len(data):
            feed.feed(data[at : at + step])
            at += step
            step = step * 7 + 1 if step < MiB else 1
        return feed.result(len(data))
    finally:
        feed.close()


def test_a_zip_fed_in_many_blocks_is_taken_to_its_end_and_inspected(tmp_path: Path) -> None:
    """A zip cannot be inspected as it streams: its blocks are only taken, never left to
    fill the queue (the feeder waited forever once FEED_DEPTH blocks were held)."""
    path = write_zip(tmp_path / "big.zip", {f"p{i}.html": bytes([i]) * 4096 for i in range(64)})
    data = path.read_bytes()
    feed = ArchiveFeed(path, len(data))
    fed = threading.Event()

    def feeder() -> None:
        for at in range(0, len(data), 512):  # far more blocks than FEED_DEPTH
            feed.feed(data[at : at + 512])
        fed.set()

    threading.Thread(target=feeder, daemon=True).start()
    assert fed.wait(120), "the feeder waited on a queue nobody takes from"
    assert feed.result(len(data)).tree_sha256 == inspect_archive(path).tree_sha256
    feed.close()


def refused(path: Path, match: str, limits: ArchiveLimits = DEFAULT_LIMITS) -> IntegrityError:
    """`path` is refused with one line matching `match`, path-based and streamed alike."""
    with pytest.raises(IntegrityError, match=match) as caught:
        inspect_archive(path, limits)
    assert caught.value.exit_code == EXIT_INTEGRITY
    assert "\n" not in str(caught.value)
    with pytest.raises(IntegrityError) as streamed_refusal:
        streamed(path, limits)
    assert str(streamed_refusal.value) == str(caught.value)
    return caught.value


# --- format detection -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("compression", "fmt"),
    [("gz", "tar.gz"), ("", "tar"), ("xz", "tar.xz"), ("bz2", "tar.bz2")],
)
def test_detects_tar_formats_by_content(tmp_path: Path, compression: Compression, fmt: str) -> None:
    path = write_tar(tmp_path / "bundle.bin", sample_site(), compression=compression)
    assert detect_format(path) == fmt
    assert inspect_archive(path).format == fmt


def test_a_zip_named_tar_gz_is_a_zip(tmp_path: Path) -> None:
    path = write_zip(tmp_path / "docs-export-2026-11-21.tar.gz", sample_site())
    assert detect_format(path) == "zip"
    assert inspect_archive(path).format == "zip"


def test_a_tar_gz_named_zip_is_a_tar_gz(tmp_path: Path) -> None:
    path = write_tar(tmp_path / "export.zip", sample_site())
    assert detect_format(path) == "tar.gz"


def test_gnu_and_ustar_tars_are_detected(tmp_path: Path) -> None:
    for tar_format in (tarfile.GNU_FORMAT, tarfile.USTAR_FORMAT):
        path = write_tar(
            tmp_path / f"{tar_format}.tar", sample_site(), compression="", tar_format=tar_format
        )
        assert detect_format(path) == "tar"


def test_random_bytes_are_not_an_archive(tmp_path: Path) -> None:
    path = tmp_path / "bundle.tar.gz"
    path.write_bytes(b"\x00\x01garbage" + os.urandom(2000))
    with pytest.raises(IntegrityError) as caught:
        detect_format(path)
    assert caught.value.exit_code == 5
    assert str(caught.value).startswith(
        "bundle.tar.gz is not a tar.gz, tar or zip archive (starts with 00 01 67 61"
    )
    with pytest.raises(IntegrityError):
        inspect_archive(path)


def test_an_html_error_page_is_not_an_archive(tmp_path: Path) -> None:
    path = tmp_path / "bundle.tar.gz"
    path.write_bytes(b"<?xml version='1.0'?><Error><Code>AccessDenied</Code></Error>")
    with pytest.raises(IntegrityError, match=r"not a tar\.gz, tar or zip archive"):
        detect_format(path)


def test_an_empty_file_is_not_an_archive(tmp_path: Path) -> None:
    path = tmp_path / "empty.zip"
    path.touch()
    with pytest.raises(IntegrityError, match="the file is empty"):
        detect_format(path)


def test_zstd_is_named_as_unsupported(tmp_path: Path) -> None:
    path = tmp_path / "bundle.tar.zst"
    path.write_bytes(b"\x28\xb5\x2f\xfd" + bytes(100))
    with pytest.raises(IntegrityError, match="zstd"):
        detect_format(path)


def test_a_missing_archive_is_not_found(tmp_path: Path) -> None:
    with pytest.raises(NotFound):
        inspect_archive(tmp_path / "nope.tar.gz")


def test_file_extension() -> None:
    assert file_extension("tar.gz") == "tar.gz"
    assert file_extension("zip") == "zip"
    assert file_extension("tar") == "tar"
    assert file_extension("tar.xz") == "tar.xz"


# --- report and tree hash -----------------------------------------------------------------


def test_report_of_a_site(tmp_path: Path) -> None:
    files = sample_site()
    report = inspect_archive(write_tar(tmp_path / "site.tar.gz", files))
    assert report == ArchiveReport(
        format="tar.gz",
        file_count=len(files),
        total_bytes=sum(len(data) for data in files.values()),
        tree_sha256=expected_tree_hash(files),
        has_index_html=True,
    )


def test_tree_hash_follows_the_documented_definition() -> None:
    empty = hashlib.sha256(b"").hexdigest()
    hi = hashlib.sha256(b"hi\n").hexdigest()
    records = f"a-b\0{hi}\na/b\0{empty}\n".encode()
    assert tree_hash([("a/b", empty), ("a-b", hi)]) == hashlib.sha256(records).hexdigest()
    assert tree_hash([]) == hashlib.sha256(b"").hexdigest()


def test_empty_archive_has_the_empty_tree_hash(tmp_path: Path) -> None:
    report = inspect_archive(write_zip(tmp_path / "empty.zip", {}))
    assert (report.file_count, report.total_bytes) == (0, 0)
    assert report.tree_sha256 == hashlib.sha256(b"").hexdigest()
    assert not report.has_index_html


def test_tree_hash_is_the_same_across_formats_order_mtimes_and_layout(tmp_path: Path) -> None:
    files = sample_site()
    reversed_files = dict(reversed(list(files.items())))
    with_dirs = [Entry("./", kind="dir", mode=0o700)] + [
        Entry(f"./{name}", data, mode=0o600, mtime=12345) for name, data in files.items()
    ]
    with_dirs.insert(3, Entry("./docs/", kind="dir"))
    archives = [
        write_tar(tmp_path / "a.tar.gz", files),
        write_tar(tmp_path / "b.tar", reversed_files, compression="", mtime=1),
        write_tar(tmp_path / "c.tar.xz", files, compression="xz", mtime=999_999_999),
        write_tar(tmp_path / "d.tar.bz2", with_dirs, compression="bz2"),
        write_tar(tmp_path / "e.tar.gz", files, tar_format=tarfile.GNU_FORMAT),
        write_zip(tmp_path / "f.zip", files),
        write_zip(tmp_path / "g.zip", reversed_files, mtime=(1999, 12, 31, 23, 59, 58)),
        write_zip(tmp_path / "h.zip", files, compression=zipfile.ZIP_STORED),
        write_zip(tmp_path / "i.zip", files, compression=zipfile.ZIP_LZMA),
    ]
    hashes = {path.name: inspect_archive(path).tree_sha256 for path in archives}
    assert set(hashes.values()) == {expected_tree_hash(files)}, hashes


def test_tree_hash_changes_with_one_byte_or_a_rename(tmp_path: Path) -> None:
    files = sample_site()
    changed = dict(files, **{"assets/logo.png": files["assets/logo.png"][:-1] + b"\x00"})
    renamed = dict(files)
    renamed["docs/getting-started.htm"] = renamed.pop("docs/getting-started.html")
    moved = dict(files)
    moved["assets/site2.css"] = moved.pop("assets/site.css")
    added_empty = dict(files, **{"new.txt": b""})
    hashes = [
        inspect_archive(write_tar(tmp_path / f"{n}.tar.gz", variant)).tree_sha256
        for n, variant in enumerate([files, changed, renamed, moved, added_empty])
    ]
    assert len(set(hashes)) == len(hashes)


def test_a_path_cleaned_of_dot_parts_hashes_like_the_clean_path(tmp_path: Path) -> None:
    plain = write_tar(tmp_path / "plain.tar", {"a/b.html": b"x"}, compression="")
    dotted = write_tar(tmp_path / "dotted.tar", {"./a//./c/../b.html": b"x"}, compression="")
    assert inspect_archive(plain).tree_sha256 == inspect_archive(dotted).tree_sha256


def test_utf8_names_in_zip_without_the_utf8_flag(tmp_path: Path) -> None:
    path = tmp_path / "legacy.zip"
    with zipfile.ZipFile(path, "w") as archive:
        info = zipfile.ZipInfo("caf\u00e9.html")
        archive.writestr(info, b"x")
    raw = path.read_bytes()
    flagged = raw.replace(b"\x00\x08", b"\x00\x00")  # clear general-purpose bit 11
    assert flagged != raw
    path.write_bytes(flagged)
    expected = expected_tree_hash({"caf\u00e9.html": b"x"})
    assert inspect_archive(path).tree_sha256 == expected


@pytest.mark.parametrize(
    ("names", "expected"),
    [
        (["index.html", "a/b.html"], True),
        (["site/index.html", "site/a.css", "site/sub/x.html"], True),
        (["site/index.html", "other/a.css"], False),
        (["site/sub/index.html", "site/a.css"], False),
        (["page.html"], False),
        (["index.htm"], False),
    ],
)
def test_has_index_html(tmp_path: Path, names: list[str], expected: bool) -> None:
    path = write_zip(tmp_path / "s.zip", {name: b"<html/>" for name in names})
    assert inspect_archive(path).has_index_html is expected


# --- refusals: names ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "match"),
    [
        ("/etc/passwd", "member '/etc/passwd' has an absolute path"),
        ("C:\\Windows\\evil.dll", "has an absolute path"),
        ("C:evil.html", "has an absolute path"),
        ("\\\\server\\share\\x", "has an absolute path"),
        ("../evil.html", "unsafe archive: member '../evil.html' escapes the root"),
        ("a/../../b", "member 'a/../../b' escapes the root"),
        ("./../x", "escapes the root"),
        ("a\\..\\..\\x", "contains a backslash"),
        ("a/b\nc.html", "contains a control character"),
        ("x/" + "n" * 256, "has a name longer than 255 bytes"),
        ("/".join(["d" * 200] * 6), "has a path longer than 1024 bytes"),
    ],
)
@pytest.mark.parametrize("fmt", ["tar", "zip"])
def test_unsafe_names_are_refused(tmp_path: Path, name: str, match: str, fmt: str) -> None:
    files = {"index.html": b"ok", name: b"evil"}
    path = (
        write_tar(tmp_path / "x.tar.gz", files)
        if fmt == "tar"
        else write_zip(tmp_path / "x.zip", files)
    )
    refused(path, match)


def test_path_length_limit_is_configurable(tmp_path: Path) -> None:
    path = write_tar(tmp_path / "x.tar.gz", {"a/" + "b" * 40: b""})
    refused(path, "longer than 32 bytes", ArchiveLimits(max_path_length=32))
    assert inspect_archive(path, ArchiveLimits(max_path_length=42)).file_count == 1


def test_nul_in_a_pax_name_is_refused(tmp_path: Path) -> None:
    entry = Entry("x.html", b"x", pax={"path": "a\x00b.html"})
    refused(write_tar(tmp_path / "x.tar", [entry], compression=""), "NUL")


def test_empty_and_root_names(tmp_path: Path) -> None:
    refused(write_tar(tmp_path / "a.tar", [Entry("", b"x")], compression=""), "empty path")
    refused(write_tar(tmp_path / "b.tar", [Entry("a/..", b"x")], compression=""), "empty path")
    root_dirs = [Entry(".", kind="dir"), Entry("./", kind="dir"), Entry("x", b"1")]
    assert inspect_archive(write_tar(tmp_path / "c.tar.gz", root_dirs)).file_count == 1


def test_non_utf8_tar_name_is_refused(tmp_path: Path) -> None:
    raw = bytearray(tar_bytes({"abc.html": b"x"}))
    raw = raw.replace(b"abc.html", b"ab\xff.html", 1)
    header = raw[:512]
    header[148:156] = b" " * 8
    header[148:156] = f"{sum(header):06o}\0 ".encode()
    raw[:512] = header
    refused(gzip_bytes(tmp_path / "x.tar.gz", bytes(raw)), "not valid UTF-8")


# --- refusals: member types -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("entry", "match"),
    [
        (
            Entry("link.html", kind="symlink", target="/etc/passwd"),
            "'link.html' is a symbolic link",
        ),
        (Entry("inside.html", kind="symlink", target="index.html"), "is a symbolic link"),
        (Entry("hard.html", kind="hardlink", target="index.html"), "is a hard link"),
        (Entry("dev", kind="chr"), "is a character device"),
        (Entry("disk", kind="blk"), "is a block device"),
        (Entry("pipe", kind="fifo"), "is a FIFO"),
    ],
)
def test_tar_special_members_are_refused(tmp_path: Path, entry: Entry, match: str) -> None:
    path = write_tar(tmp_path / "x.tar.gz", [Entry("index.html", b"ok"), entry])
    error = refused(path, match)
    assert "only regular files and directories are allowed" in str(error)


@pytest.mark.parametrize(
    "records",
    [
        {"GNU.sparse.map": "0,0", "GNU.sparse.realsize": "900"},
        {"GNU.sparse.name": "other.html"},
    ],
    ids=["sparse map", "sparse name"],
)
def test_tar_sparse_members_are_refused(tmp_path: Path, records: dict[str, str]) -> None:
    """tarfile unpacks a GNU sparse member (pax GNU.sparse records) under another name or
    with other content than its stored bytes: what a bundle's tree hash would not say."""
    entry = Entry("page.html", b"<p>page</p>\n" * 70, pax=records)
    path = write_tar(tmp_path / "x.tar.gz", [Entry("index.html", b"ok"), entry])
    refused(path, "GNU sparse")


@pytest.mark.parametrize(
    ("entry", "match"),
    [
        (Entry("link.html", kind="symlink", target="../../etc/passwd"), "is a symbolic link"),
        (Entry("pipe", kind="fifo"), "is a FIFO"),
        (Entry("dev", kind="chr"), "is a character device"),
    ],
)
def test_zip_special_members_are_refused(tmp_path: Path, entry: Entry, match: str) -> None:
    refused(write_zip(tmp_path / "x.zip", [Entry("index.html", b"ok"), entry]), match)


def test_unknown_tar_member_type_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "x.tar"
    with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as tar:
        info = tarfile.TarInfo("volume")
        info.type = b"V"  # GNU volume header
        tar.addfile(info)
    refused(path, "unsupported tar type")


def test_encrypted_zip_member_is_refused(tmp_path: Path) -> None:
    path = write_zip(tmp_path / "x.zip", {"secret.html": b"x"})
    raw = bytearray(path.read_bytes())
    raw[6] |= 0x01
    central = raw.rfind(b"PK\x01\x02")
    raw[central + 8] |= 0x01
    path.write_bytes(bytes(raw))
    refused(path, "is an encrypted file")


# --- refusals: ambiguity ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "names",
    [
        ["a/b.html", "a/b.html"],
        ["a/b.html", "./a/b.html"],
        ["a/b.html", "a//b.html"],
        ["b.html", "x/../b.html"],
    ],
)
def test_duplicate_paths_are_refused(tmp_path: Path, names: list[str]) -> None:
    entries = [Entry(name, str(i).encode()) for i, name in enumerate(names)]
    refused(write_tar(tmp_path / "x.tar.gz", entries), "duplicates the path 'a/b.html'|'b.html'")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # zipfile warns about duplicate names
        refused(write_zip(tmp_path / "x.zip", entries), "duplicates the path")


@pytest.mark.parametrize(
    ("entries", "match"),
    [
        ([Entry("a", b"file"), Entry("a/b.html", b"x")], "lies below 'a', which is a file"),
        ([Entry("a/b.html", b"x"), Entry("a", b"file")], "is a file but 'a' is also a directory"),
        ([Entry("a", kind="dir"), Entry("a", b"file")], "is a file but 'a' is also a directory"),
        ([Entry("a", b"file"), Entry("a", kind="dir")], "duplicates the path 'a'"),
        ([Entry("a", b"file"), Entry("a/b", kind="dir")], "lies below 'a', which is a file"),
    ],
)
def test_file_and_directory_clashes_are_refused(
    tmp_path: Path, entries: list[Entry], match: str
) -> None:
    refused(write_tar(tmp_path / "x.tar.gz", entries), match)


def test_a_directory_listed_twice_is_fine(tmp_path: Path) -> None:
    entries = [Entry("a", kind="dir"), Entry("a/", kind="dir"), Entry("a/x", b"1")]
    assert inspect_archive(write_tar(tmp_path / "x.tar.gz", entries)).file_count == 1


SPILLED_CASES = [
    (
        [Entry(f"p{i}.html", b"x") for i in range(6)] + [Entry("p3.html", b"y")],
        "duplicates the path",
    ),
    ([Entry(f"d/p{i}.html", b"x") for i in range(6)] + [Entry("D/q.html", b"y")], "letter case"),
    (
        [Entry(f"p{i}", b"x") for i in range(6)]
        + [Entry("caf\u00e9", b"1"), Entry("cafe\u0301", b"2")],
        "NFC",
    ),
    ([Entry(f"p{i}", b"x") for i in range(6)] + [Entry("p2/b.html", b"x")], "lies below 'p2'"),
    ([Entry(f"d{i}/x", b"x") for i in range(6)] + [Entry("d4", b"x")], "'d4' is also a directory"),
]


@pytest.mark.parametrize(("entries", "match"), SPILLED_CASES)
def test_the_path_checks_are_the_same_once_their_tables_are_on_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, entries: list[Entry], match: str
) -> None:
    """Past spill.SPILL_AT paths the tables move to a temporary SQLite file: the same
    refusals, the same tree hash and listing."""
    path = write_tar(tmp_path / "x.tar.gz", entries)
    in_memory = str(refused(path, match))
    monkeypatch.setattr(spill, "SPILL_AT", 2)
    assert str(refused(path, match)) == in_memory
    good = write_tar(tmp_path / "ok.tar.gz", {e.name: e.data for e in entries[:-1]})
    spilled = inspect_archive(good)
    monkeypatch.setattr(spill, "SPILL_AT", 10_000)
    kept = inspect_archive(good)
    assert spilled.tree_sha256 == kept.tree_sha256
    assert spilled.digests is not None and kept.digests is not None
    assert list(spilled.digests) == list(kept.digests)
    assert spilled.tree_sha256 == tree_hash((p, h) for p, _, h in kept.digests)


# --- refusals: limits -----------------------------------------------------------------------


def test_too_many_files(tmp_path: Path) -> None:
    files = {f"p{i}.html": b"x" for i in range(5)}
    limits = ArchiveLimits(max_files=4)
    refused(write_tar(tmp_path / "x.tar.gz", files), "past the limit of 4 members", limits)
    refused(write_zip(tmp_path / "x.zip", files), "lists 5 members, over the limit of 4", limits)
    assert inspect_archive(write_zip(tmp_path / "ok.zip", files), ArchiveLimits(max_files=5))


def test_directories_count_as_members(tmp_path: Path) -> None:
    entries = [Entry(f"d{i}", kind="dir") for i in range(5)]
    refused(write_tar(tmp_path / "x.tar", entries, compression=""), "limit of 4", ArchiveLimits(4))


def test_member_too_large(tmp_path: Path) -> None:
    files = {"small.html": b"x" * 1000, "big.bin": b"y" * 1001}
    limits = ArchiveLimits(max_member_bytes=1000)
    refused(write_tar(tmp_path / "x.tar.gz", files), "'big.bin' declares 1001 bytes", limits)
    refused(write_zip(tmp_path / "x.zip", files), "'big.bin' declares 1001 bytes", limits)


def test_total_too_large(tmp_path: Path) -> None:
    files = {f"p{i}.bin": b"z" * 400 for i in range(3)}
    limits = ArchiveLimits(max_total_bytes=1000)
    refused(write_tar(tmp_path / "x.tar.gz", files), "'p2.bin' takes the unpacked total", limits)
    refused(write_zip(tmp_path / "x.zip", files), "'p2.bin' takes the unpacked total", limits)


def test_tar_gz_ratio_bomb_is_stopped_early(tmp_path: Path) -> None:
    path = write_generated_tar(tmp_path / "bomb.tar.gz", [("zeros.bin", 100 * MiB, "zeros")])
    assert path.stat().st_size < 1 * MiB
    error = refused(path, "'zeros.bin' takes the unpacked size past 200 times")
    assert "compression bomb" in str(error)


def test_zip_ratio_bomb_is_stopped(tmp_path: Path) -> None:
    path = write_generated_zip(tmp_path / "bomb.zip", [("zeros.bin", 100 * MiB, "zeros")])
    refused(path, "compression bomb")


def test_many_small_zero_files_add_up_to_a_bomb(tmp_path: Path) -> None:
    members: list[Generated] = [(f"z{i}.bin", 1 * MiB, "zeros") for i in range(80)]
    refused(write_generated_tar(tmp_path / "bomb.tar.gz", members), "compression bomb")


def test_ratio_is_not_enforced_below_64_mib(tmp_path: Path) -> None:
    path = write_generated_tar(tmp_path / "zeros.tar.gz", [("zeros.bin", 60 * MiB, "zeros")])
    assert inspect_archive(path).total_bytes == 60 * MiB


def test_zip_header_claiming_fewer_bytes_is_refused(tmp_path: Path) -> None:
    path = write_zip(tmp_path / "x.zip", {"zeros.bin": bytes(5 * MiB)})
    patch_zip_sizes(path, uncompressed=100)
    refused(path, "corrupt archive: x.zip: Bad CRC-32", ArchiveLimits(max_member_bytes=1 * MiB))


def test_zip_header_claiming_more_bytes_is_refused(tmp_path: Path) -> None:
    path = write_zip(tmp_path / "x.zip", {"page.html": b"<html>" * 100})
    patch_zip_sizes(path, uncompressed=10_000)
    refused(path, "'page.html' holds 600 bytes but its header says 10000")


def test_zip_size_limit_counts_decompressed_bytes(tmp_path: Path) -> None:
    """The header says 100 bytes; the limits are checked on what really comes out."""
    path = write_zip(tmp_path / "x.zip", {"a.bin": os.urandom(3000)})
    patch_zip_sizes(path, uncompressed=100)
    with pytest.raises(IntegrityError):
        inspect_archive(path)


def test_huge_tar_extended_header_is_refused(tmp_path: Path) -> None:
    entry = Entry("x.html", b"x", pax={"comment": "c" * (2 * MiB)})
    refused(write_tar(tmp_path / "x.tar.gz", [entry]), "2097.*-byte extended header")


# --- refusals: damage -------------------------------------------------------------------------


def test_truncated_tar_gz(tmp_path: Path) -> None:
    files = {f"f{i}.bin": os.urandom(20_000) for i in range(10)}
    path = write_tar(tmp_path / "x.tar.gz", files)
    data = path.read_bytes()
    for cut in (len(data) // 2, len(data) - 4, 30):
        path.write_bytes(data[:cut])
        refused(path, "corrupt archive: x.tar.gz")


def test_tar_gz_with_bad_crc(tmp_path: Path) -> None:
    path = write_tar(tmp_path / "x.tar.gz", {"a.html": b"x" * 100})
    data = bytearray(path.read_bytes())
    data[-8] ^= 0xFF
    path.write_bytes(bytes(data))
    refused(path, "corrupt archive: x.tar.gz: CRC check failed")


def test_corrupt_gzip_data(tmp_path: Path) -> None:
    path = write_tar(tmp_path / "x.tar.gz", {f"f{i}.html": b"abc" * 5000 for i in range(5)})
    data = bytearray(path.read_bytes())
    for at in range(40, 60):
        data[at] ^= 0x55
    path.write_bytes(bytes(data))
    refused(path, "corrupt archive")


def test_gzip_of_something_that_is_not_tar(tmp_path: Path) -> None:
    refused(gzip_bytes(tmp_path / "x.tar.gz", b"hello world\n" * 100), "corrupt archive")


def test_plain_tar_truncated_at_a_member_boundary(tmp_path: Path) -> None:
    raw = tar_bytes({"a.html": b"a" * 512, "b.html": b"b" * 512})
    end_of_first = raw.index(b"a" * 512) + 512
    path = tmp_path / "x.tar"
    path.write_bytes(raw[:end_of_first])
    refused(path, "without its end-of-archive marker")
    path.write_bytes(raw[: end_of_first + 700])
    refused(path, "corrupt archive")


def test_plain_tar_truncated_inside_a_member(tmp_path: Path) -> None:
    raw = tar_bytes({"a.html": b"a" * 5000})
    path = tmp_path / "x.tar"
    path.write_bytes(raw[:3000])
    refused(path, "corrupt archive")


def test_data_hidden_after_the_end_of_archive_is_refused(tmp_path: Path) -> None:
    hidden = tar_bytes({"hidden.html": b"surprise"})
    path = gzip_bytes(tmp_path / "x.tar.gz", tar_bytes({"a.html": b"a"}) + hidden)
    refused(path, "data after the tar end-of-archive marker")


def test_zero_padding_after_the_end_of_archive_is_fine(tmp_path: Path) -> None:
    path = gzip_bytes(tmp_path / "x.tar.gz", tar_bytes({"a.html": b"a"}) + bytes(100_000))
    assert inspect_archive(path).file_count == 1


def test_corrupt_zip_data(tmp_path: Path) -> None:
    path = write_zip(tmp_path / "x.zip", {"a.html": b"hello " * 2000})
    data = bytearray(path.read_bytes())
    start = 30 + len("a.html")
    for at in range(start + 10, start + 30):
        data[at] ^= 0xFF
    path.write_bytes(bytes(data))
    refused(path, "corrupt archive: x.zip")


def test_truncated_zip(tmp_path: Path) -> None:
    path = write_zip(tmp_path / "x.zip", sample_site())
    path.write_bytes(path.read_bytes()[:-30])
    refused(path, "corrupt archive: x.zip")


def test_zip_directory_entry_with_content_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "x.zip"
    with zipfile.ZipFile(path, "w") as archive:
        info = zipfile.ZipInfo("dir")
        info.external_attr = (stat.S_IFDIR | 0o755) << 16
        archive.writestr(info, b"payload")
    refused(path, "is a directory entry with content")


# --- extract ---------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["tar.gz", "zip"])
def test_extract_writes_the_files_with_fixed_modes(tmp_path: Path, fmt: str) -> None:
    files = sample_site()
    entries = [Entry(name, data, mode=0o4777) for name, data in files.items()]
    entries.insert(0, Entry("docs", kind="dir", mode=0o700))
    archive = (
        write_tar(tmp_path / "a.tar.gz", entries)
        if fmt == "tar.gz"
        else write_zip(tmp_path / "a.zip", entries)
    )
    dest = tmp_path / "out" / "site"
    report = extract_archive(archive, dest)
    assert report == inspect_archive(archive)
    found = {
        path.relative_to(dest).as_posix(): path.read_bytes()
        for path in dest.rglob("*")
        if path.is_file()
    }
    assert found == files
    for path in [dest, *dest.rglob("*")]:
        mode = stat.S_IMODE(path.stat().st_mode)
        assert mode == (0o755 if path.is_dir() else 0o644), path
    assert sorted(p.name for p in dest.parent.iterdir()) == ["site"]


def test_extract_into_an_existing_empty_directory(tmp_path: Path) -> None:
    dest = tmp_path / "site"
    dest.mkdir()
    extract_archive(write_tar(tmp_path / "a.tar.gz", {"index.html": b"x"}), dest)
    assert (dest / "index.html").read_bytes() == b"x"


def test_extract_refuses_a_non_empty_destination(tmp_path: Path) -> None:
    dest = tmp_path / "site"
    dest.mkdir()
    (dest / "keep.txt").write_text("mine")
    with pytest.raises(OperationFailed, match="not an empty directory"):
        extract_archive(write_tar(tmp_path / "a.tar.gz", {"index.html": b"x"}), dest)
    assert [p.name for p in dest.iterdir()] == ["keep.txt"]


@pytest.mark.parametrize("existing", [False, True])
def test_refused_extract_leaves_nothing_behind(tmp_path: Path, existing: bool) -> None:
    entries = [Entry(f"good{i}.html", b"fine" * 1000) for i in range(20)]
    entries.append(Entry("../evil.html", b"evil"))
    archive = write_tar(tmp_path / "bad.tar.gz", entries)
    parent = tmp_path / "out"
    parent.mkdir()
    dest = parent / "site"
    if existing:
        dest.mkdir()
    with pytest.raises(IntegrityError, match="escapes the root"):
        extract_archive(archive, dest)
    assert [p.name for p in parent.iterdir()] == (["site"] if existing else [])
    if existing:
        assert list(dest.iterdir()) == []
    assert not (tmp_path / "evil.html").exists()


def test_extract_of_a_bomb_leaves_nothing_behind(tmp_path: Path) -> None:
    archive = write_generated_zip(tmp_path / "bomb.zip", [("zeros.bin", 100 * MiB, "zeros")])
    parent = tmp_path / "out"
    with pytest.raises(IntegrityError, match="compression bomb"):
        extract_archive(archive, parent / "site")
    assert list(parent.iterdir()) == []


def test_extract_of_a_truncated_archive_leaves_nothing_behind(tmp_path: Path) -> None:
    archive = write_tar(tmp_path / "x.tar.gz", {f"f{i}": os.urandom(50_000) for i in range(5)})
    archive.write_bytes(archive.read_bytes()[:-5000])
    with pytest.raises(IntegrityError, match="corrupt archive"):
        extract_archive(archive, tmp_path / "out" / "site")
    assert list((tmp_path / "out").iterdir()) == []


# --- inspecting while the bytes arrive (ArchiveFeed) -------------------------------------------


def feed_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "mirror-archive-feed"]


@pytest.mark.parametrize("compression", ["gz", "", "xz", "bz2"])
def test_streamed_inspection_equals_the_path_based_one(
    tmp_path: Path, compression: Compression
) -> None:
    path = write_tar(tmp_path / "site", sample_site(), compression=compression)
    report = streamed(path)
    assert report == inspect_archive(path)
    assert report.tree_sha256 == expected_tree_hash(sample_site())
    assert feed_threads() == []


def test_streamed_tar_gz_needs_no_second_read(tmp_path: Path) -> None:
    path = write_tar(tmp_path / "site.tar.gz", sample_site())
    data = path.read_bytes()
    feed = ArchiveFeed(path, len(data))
    feed.feed(data)
    path.unlink()  # the report comes from the bytes fed, not from the file
    assert feed.result(len(data)).tree_sha256 == expected_tree_hash(sample_site())


def test_a_zip_is_inspected_from_the_finished_file(tmp_path: Path) -> None:
    """Its central directory comes last: the feed only takes the blocks, then reads the file."""
    path = write_zip(tmp_path / "site.zip", sample_site())
    assert streamed(path) == inspect_archive(path)
    data = path.read_bytes()
    feed = ArchiveFeed(path, len(data))
    feed.feed(data)
    path.unlink()
    with pytest.raises(NotFound):
        feed.result(len(data))


def test_a_restart_forgets_the_bytes_fed(tmp_path: Path) -> None:
    path = write_tar(tmp_path / "site.tar.gz", sample_site())
    data = path.read_bytes()
    feed = ArchiveFeed(path, len(data))
    feed.feed(b"\x1f\x8b" + os.urandom(3 * MiB))  # another object's bytes, past the queue
    feed.restart()
    feed.feed(data)
    assert feed.result(len(data)) == inspect_archive(path)
    assert feed_threads() == []


def test_an_unsafe_archive_fed_is_refused_and_the_feeder_never_waits(tmp_path: Path) -> None:
    path = write_tar(tmp_path / "evil.tar", [Entry("../escape.txt", b"x")], compression="")
    data = path.read_bytes() + bytes(FEED_DEPTH * 3 * MiB)  # more than the queue holds
    feed = ArchiveFeed(path, len(data))
    for at in range(0, len(data), MiB):
        feed.feed(data[at : at + MiB])
    with pytest.raises(IntegrityError, match="escapes the root"):
        feed.result(len(data))
    assert feed_threads() == []


def test_a_closed_feed_leaves_no_thread(tmp_path: Path) -> None:
    path = write_tar(tmp_path / "site.tar.gz", sample_site())
    feed = ArchiveFeed(path, path.stat().st_size)
    feed.feed(path.read_bytes()[:100])
    feed.close()
    assert feed_threads() == []


def test_a_size_other_than_announced_is_inspected_from_the_file(tmp_path: Path) -> None:
    """The ratio guard divides by the archive's size: with another size, the file decides."""
    bomb = write_generated_tar(tmp_path / "zeros.tar.gz", [("zeros.bin", 70 * MiB, "zeros")])
    size = bomb.stat().st_size
    feed = ArchiveFeed(bomb, size * 1000)  # announced big enough for the ratio guard
    feed.feed(bomb.read_bytes())
    with pytest.raises(IntegrityError, match="compression bomb"):
        feed.result(size)


# --- memory ------------------------------------------------------------------------------------

# VmHWM, not ru_maxrss: on Linux a child's ru_maxrss starts at the parent's peak.
MEMORY_PROBE = textwrap.dedent(
    """
    import json, re, sys
    from pathlib import Path
    from mirror.archive import ArchiveFeed, ArchiveLimits, inspect_archive

    def peak_kib():
        status = Path("/proc/self/status").read_text()
        return int(re.search(r"VmHWM:\\s+(\\d+) kB", status).group(1))

    def streamed(path, limits):
        feed = ArchiveFeed(path, path.stat().st_size, limits)
        with open(path, "rb") as handle:
            while block := handle.read(1024 * 1024):
                feed.feed(block)
        return feed.result(path.stat().st_size)

    inspect = streamed if sys.argv[3] == "streamed" else inspect_archive
    before = peak_kib()
    report = inspect(Path(sys.argv[1]), ArchiveLimits(max_ratio=float(sys.argv[2])))
    print(json.dumps({"growth_kib": peak_kib() - before, "total": report.total_bytes}))
    """
)


def rss_growth_of_inspect(
    archive: Path, max_ratio: float = 200.0, how: str = "path"
) -> tuple[int, int]:
    """(peak RSS growth in KiB, total bytes) of inspecting `archive` in a fresh interpreter,
    from its path or (`how="streamed"`) fed in 1 MiB blocks as a download does."""
    if not Path("/proc/self/status").exists():
        pytest.skip("needs /proc/self/status (Linux)")
    result = subprocess.run(
        [sys.executable, "-c", MEMORY_PROBE, str(archive), str(max_ratio), how],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
        timeout=60,
    )
    measured = json.loads(result.stdout)
    return measured["growth_kib"], measured["total"]


@pytest.mark.parametrize("fmt", ["tar.gz", "zip"])
def test_inspect_memory_does_not_grow_with_member_size(tmp_path: Path, fmt: str) -> None:
    size = 200 * MiB
    members: list[Generated] = [("big.bin", size, "random"), ("index.html", 10, "random")]
    archive = (
        write_generated_tar(tmp_path / "big.tar.gz", members, compresslevel=0)
        if fmt == "tar.gz"
        else write_generated_zip(tmp_path / "big.zip", members, compression=zipfile.ZIP_STORED)
    )
    growth_kib, total = rss_growth_of_inspect(archive)
    assert total == size + 10
    assert growth_kib < 30 * 1024


@pytest.mark.parametrize("fmt", ["tar.gz", "zip"])
def test_inspect_memory_does_not_grow_with_compression_ratio(tmp_path: Path, fmt: str) -> None:
    """100 MiB of zeros (about 1000:1), read to the end with the ratio guard switched off."""
    members: list[Generated] = [("zeros.bin", 100 * MiB, "zeros")]
    archive = (
        write_generated_tar(tmp_path / "zeros.tar.gz", members)
        if fmt == "tar.gz"
        else write_generated_zip(tmp_path / "zeros.zip", members)
    )
    growth_kib, total = rss_growth_of_inspect(archive, max_ratio=1e9)
    assert total == 100 * MiB
    assert growth_kib < 30 * 1024


@pytest.mark.parametrize(("content", "level"), [("random", 0), ("zeros", 9)])
def test_streamed_inspection_memory_is_bounded(
    tmp_path: Path, content: Content, level: int
) -> None:
    """Blocks wait in a bounded queue: memory grows neither with size nor with the ratio."""
    members: list[Generated] = [("big.bin", 150 * MiB, content), ("index.html", 10, "random")]
    archive = write_generated_tar(tmp_path / "big.tar.gz", members, compresslevel=level)
    growth_kib, total = rss_growth_of_inspect(archive, max_ratio=1e9, how="streamed")
    assert total == 150 * MiB + 10
    assert growth_kib < 30 * 1024
