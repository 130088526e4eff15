"""What a spliced delta carries (mirror/outbound/carried.py): the two listings compared in one
merge, the carried contents taken from one inflate of real tar.gz bundles."""

from __future__ import annotations

import gzip
import hashlib
import io
import tarfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mirror.archive.spill import SpillMap
from mirror.errors import IntegrityError
from mirror.outbound.carried import compare, take_contents
from mirror.transferset.delta._formats import (
    DeltaBlobWriter,
    DeltaContent,
    DeltaFileList,
    read_delta_blob,
)
from tests.fixtures.archives import make_tar_gz, tar_bytes, word_text


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def listing(files: dict[str, bytes]) -> list[tuple[str, int, str]]:
    return sorted(((p, len(d), sha(d)) for p, d in files.items()), key=lambda f: f[0].encode())


PATHS = st.text("abé/.", min_size=1, max_size=6).filter(lambda p: "//" not in p)


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(PATHS, st.sampled_from([b"1", b"2", b"3"]), max_size=12),
    st.dictionaries(PATHS, st.sampled_from([b"1", b"2", b"3"]), max_size=12),
)
def test_the_merge_agrees_with_comparing_two_dictionaries(
    base: dict[str, bytes], new: dict[str, bytes]
) -> None:
    found = compare(listing(new), [(p, h) for p, _, h in listing(base)])
    with found.carried:
        assert dict(found.carried.sorted_items()) == {
            p: sha(d) for p, d in new.items() if base.get(p) != d
        }
    assert found.changed == sum(1 for p in new if p in base and base[p] != new[p])
    assert found.added == sum(1 for p in new if p not in base)
    assert found.removed == sum(1 for p in base if p not in new)


def carry(bundle: Path, wanted: dict[str, bytes], tmp_path: Path) -> dict[str, bytes]:
    """The contents `take_contents` writes into a delta blob for the carried `wanted`."""
    out = io.BytesIO()
    blob = DeltaBlobWriter(out, compresslevel=1)
    with SpillMap() as carried:
        for path, data in wanted.items():
            carried[path] = sha(data)
        take_contents(bundle, carried, blob, spool_dir=tmp_path, label="v2")
    blob.finish([])
    out.seek(0)
    contents: dict[str, bytes] = {}
    for member in read_delta_blob(out, label="blob"):
        if isinstance(member, DeltaContent):
            contents[member.sha256] = member.stream.read()
        else:
            assert isinstance(member, DeltaFileList)
    return contents


SITE = {
    "index.html": b"<h1>home</h1>\n",
    "guides/a.html": word_text(70_000, 1),
    "guides/empty.html": b"",
    "assets/big.bin": word_text(3_000_000, 2),  # past the spool's memory and many pieces
    "a" * 120 + "/long-name.html": b"a name only pax or GNU can hold\n",
}


@pytest.mark.parametrize("tar_format", [tarfile.PAX_FORMAT, tarfile.GNU_FORMAT])
def test_each_carried_content_is_taken_once_from_the_bundle(
    tar_format: int, tmp_path: Path
) -> None:
    bundle = tmp_path / "v2.tar.gz"
    bundle.write_bytes(gzip.compress(tar_bytes(SITE, tar_format=tar_format)))
    wanted = {p: SITE[p] for p in ("guides/a.html", "guides/empty.html", "assets/big.bin")}
    wanted["a" * 120 + "/long-name.html"] = SITE["a" * 120 + "/long-name.html"]
    assert carry(bundle, wanted, tmp_path) == {sha(d): d for d in wanted.values()}
    assert list(tmp_path.glob("tmp*")) == []


def test_a_bundle_of_several_gzip_members_gives_its_contents_alike(tmp_path: Path) -> None:
    tar = tar_bytes(SITE)
    bundle = tmp_path / "v2.tar.gz"
    bundle.write_bytes(
        b"".join(gzip.compress(tar[i : i + 100_000]) for i in range(0, len(tar), 100_000))
    )
    wanted = {"assets/big.bin": SITE["assets/big.bin"], "index.html": SITE["index.html"]}
    assert carry(bundle, wanted, tmp_path) == {sha(d): d for d in wanted.values()}


def test_a_carried_file_whose_bytes_are_not_its_listings_is_refused(tmp_path: Path) -> None:
    bundle = make_tar_gz(tmp_path / "v2.tar.gz", {**SITE, "index.html": b"<h1>other</h1>\n"})
    with pytest.raises(IntegrityError, match=r"v2: index\.html in the stored bundle"):
        carry(bundle, {"index.html": SITE["index.html"]}, tmp_path)


def test_a_carried_file_the_bundle_lacks_is_refused(tmp_path: Path) -> None:
    bundle = make_tar_gz(tmp_path / "v2.tar.gz", SITE)
    with pytest.raises(IntegrityError, match="the bundle lacks 1 of the files"):
        carry(bundle, {"index.html": SITE["index.html"], "nowhere.html": b"x"}, tmp_path)
