"""store.digests: each bundle's file digests kept beside it, used only when whole and of the
recorded tree, gone with the blob."""

from __future__ import annotations

import gzip
import hashlib
from pathlib import Path

import pytest

from mirror.archive import inspect_archive
from mirror.store import digests
from mirror.store.blobs import BlobStore
from tests.fixtures.archives import make_tar_gz

FILES = {"index.html": b"<h1>home</h1>", "b/c.html": b"c", "a b/\u00e9.css": b"", "B.js": b"js"}


def _stored(tmp_path: Path) -> tuple[BlobStore, str, str]:
    store = BlobStore(tmp_path / "store")
    store.ensure()
    archive = make_tar_gz(tmp_path / "site.tar.gz", FILES)
    report = inspect_archive(archive)
    sha256, _ = store.add_file(archive)
    assert digests.keep_report(store, sha256, report)
    return store, sha256, report.tree_sha256


def test_an_inspection_lists_every_file_and_the_listing_reads_back(tmp_path: Path) -> None:
    store, sha256, tree = _stored(tmp_path)
    listing = digests.load(store, sha256, tree)
    assert listing is not None
    expected = sorted(
        ((p, len(d), hashlib.sha256(d).hexdigest()) for p, d in FILES.items()),
        key=lambda entry: entry[0].encode(),
    )
    assert list(listing) == expected


def test_no_listing_is_none(tmp_path: Path) -> None:
    store, sha256, tree = _stored(tmp_path)
    store.digests_path(sha256).unlink()
    assert digests.load(store, sha256, tree) is None


def test_a_listing_of_another_tree_is_not_used(tmp_path: Path) -> None:
    store, sha256, _ = _stored(tmp_path)
    assert digests.load(store, sha256, "0" * 64) is None
    assert not store.digests_path(sha256).exists()  # removed: the next pack writes it again


@pytest.mark.parametrize("damage", ["truncate", "edit"])
def test_a_damaged_listing_is_removed_and_not_used(tmp_path: Path, damage: str) -> None:
    store, sha256, tree = _stored(tmp_path)
    path = store.digests_path(sha256)
    if damage == "truncate":
        path.write_bytes(path.read_bytes()[:-9])
    else:
        text = gzip.decompress(path.read_bytes()).replace(b"b/c.html", b"b/d.html")
        path.write_bytes(gzip.compress(text))
    assert digests.load(store, sha256, tree) is None
    assert not path.exists()


def test_removing_a_blob_removes_its_listing(tmp_path: Path) -> None:
    store, sha256, _ = _stored(tmp_path)
    assert store.digests_path(sha256).is_file()
    store.remove(sha256)
    assert not store.digests_path(sha256).exists()
    assert list(store.iter_blobs()) == []


def test_a_listing_that_cannot_be_written_fails_nothing(tmp_path: Path) -> None:
    store, sha256, tree = _stored(tmp_path)
    shard = store.digests_path(sha256).parent
    for listing in shard.iterdir():
        listing.unlink()
    shard.rmdir()
    shard.write_bytes(b"not a directory")
    assert digests.keep(store, sha256, tree, [("a", 1, "0" * 64)]) is False
    assert digests.load(store, sha256, tree) is None and store.temp_files() == []
