from __future__ import annotations

import errno
import hashlib
import os
import threading
from pathlib import Path

import pytest

from mirror.errors import ConfigError, IntegrityError, NotFound
from mirror.integrity import Digest, mismatch
from mirror.store import blobs as blobs_module
from mirror.store.blobs import BlobStore


def _temp_with(store: BlobStore, name: str, data: bytes) -> tuple[Path, str]:
    store.ensure()
    path = store.temp_path(name)
    path.write_bytes(data)
    return path, hashlib.sha256(data).hexdigest()


def test_adopt_places_a_read_only_blob(store_dir: Path) -> None:
    store = BlobStore(store_dir)
    temp, sha = _temp_with(store, "a.part", b"hello")
    path = store.adopt(temp, sha, 5)
    assert path == store_dir / "blobs" / "sha256" / sha[:2] / sha
    assert path.read_bytes() == b"hello"
    assert not temp.exists()
    assert oct(path.stat().st_mode & 0o777) == "0o444"
    assert store.has(sha) and store.open(sha) == path


def test_adopt_refuses_wrong_size(store_dir: Path) -> None:
    store = BlobStore(store_dir)
    temp, sha = _temp_with(store, "a.part", b"hello")
    with pytest.raises(IntegrityError, match="size 5 differs"):
        store.adopt(temp, sha, 6)
    assert not store.has(sha)


def test_adopt_same_content_twice_keeps_one(store_dir: Path) -> None:
    store = BlobStore(store_dir)
    first, sha = _temp_with(store, "a.part", b"same")
    store.adopt(first, sha, 4)
    second, _ = _temp_with(store, "b.part", b"same")
    store.adopt(second, sha, 4)
    assert list(store.iter_blobs()) == [sha]
    assert store.temp_files() == []


def test_verify_finds_missing_corrupt_and_extra(store_dir: Path, tmp_path: Path) -> None:
    store = BlobStore(store_dir)
    good, good_sha = _temp_with(store, "g", b"good")
    store.adopt(good, good_sha, 4)
    bad, bad_sha = _temp_with(store, "b", b"bad!")
    bad_path = store.adopt(bad, bad_sha, 4)
    os.chmod(bad_path, 0o644)
    bad_path.write_bytes(b"BAD!")
    extra_src = tmp_path / "extra"
    extra_src.write_bytes(b"extra")
    extra_sha, _ = store.add_file(extra_src)
    missing_sha = "0" * 64
    problems = store.verify({good_sha: 4, bad_sha: 4, missing_sha: 1})
    kinds = {(p.kind, p.sha256) for p in problems}
    assert kinds == {("corrupt", bad_sha), ("missing", missing_sha), ("extra", extra_sha)}


def test_open_missing_blob(store_dir: Path) -> None:
    with pytest.raises(NotFound):
        BlobStore(store_dir).open("a" * 64)


def test_remove_frees_bytes(store_dir: Path) -> None:
    store = BlobStore(store_dir)
    temp, sha = _temp_with(store, "x", b"12345")
    store.adopt(temp, sha, 5)
    assert store.used_bytes() == 5
    assert store.remove(sha) == 5
    assert store.remove(sha) == 0


def test_temp_names_must_be_plain(store_dir: Path) -> None:
    with pytest.raises(ValueError):
        BlobStore(store_dir).temp_path("../escape")


def test_adopt_over_a_damaged_blob_replaces_it(store_dir: Path) -> None:
    store = BlobStore(store_dir)
    temp, sha = _temp_with(store, "a.part", b"hello")
    path = store.adopt(temp, sha, 5)
    path.chmod(0o644)
    path.write_bytes(b"hellO")
    assert not store.intact(sha, 5)
    again, _ = _temp_with(store, "b.part", b"hello")
    assert store.adopt(again, sha, 5) == path
    assert store.intact(sha, 5) and not again.exists()


def test_a_store_path_that_is_a_file_is_a_config_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigError, match="is not a directory") as info:
        BlobStore(tmp_path / "file").ensure()
    assert info.value.exit_code == 2


def test_a_blob_stored_after_background_hashing_began_is_hashed_when_asked(
    store_dir: Path, tmp_path: Path
) -> None:
    store = BlobStore(store_dir)
    first, first_sha = _temp_with(store, "a", b"first")
    store.adopt(first, first_sha, 5)
    with store.hash_in_background(workers=2) as hashing:
        late, late_sha = _temp_with(store, "b", b"late")
        late_path = store.adopt(late, late_sha, 4)
        os.chmod(late_path, 0o644)
        late_path.write_bytes(b"LATE")  # damaged: only a hash taken now can tell
        problems = store.verify({first_sha: 5, late_sha: 4}, hashing=hashing)
    assert [(p.kind, p.sha256) for p in problems] == [("corrupt", late_sha)]


def test_adopt_replaces_an_empty_directory_and_names_one_with_files_in_it(
    store_dir: Path,
) -> None:
    """`store verify` reports a directory under a blob's name as `not a regular file` and
    its remedy is the next export, which adopts the download: the rename failed on it
    (an `unexpected IsADirectoryError`)."""
    store = BlobStore(store_dir)
    temp, sha = _temp_with(store, "a.part", b"hello")
    store.blob_path(sha).mkdir(parents=True)
    assert store.adopt(temp, sha, 5).read_bytes() == b"hello"

    other, other_sha = _temp_with(store, "b.part", b"other")
    (store.blob_path(other_sha) / "kept").mkdir(parents=True)
    with pytest.raises(IntegrityError, match="is a directory with files in it") as refused:
        store.adopt(other, other_sha, 5)
    assert refused.value.exit_code == 5
    assert (store.blob_path(other_sha) / "kept").is_dir() and other.read_bytes() == b"other"
    assert refused.value.hint is not None and "move that directory out" in refused.value.hint
    store.blob_path(other_sha).rename(store_dir / "moved")  # the remedy
    assert store.adopt(other, other_sha, 5).read_bytes() == b"other"


@pytest.mark.parametrize("started_early", [False, True])
def test_an_unreadable_blob_is_named_and_the_rest_still_verified(
    store_dir: Path, monkeypatch: pytest.MonkeyPatch, started_early: bool
) -> None:
    """An I/O error (a bad sector) reading one blob ended `store verify` as `unexpected
    OSError` (exit 1), before any other blob was reported: it is a finding like the others."""
    store = BlobStore(store_dir)
    blobs, expected = {}, {}
    for name, data in (("a", b"first"), ("b", b"second"), ("c", b"third")):
        temp, sha = _temp_with(store, f"{name}.part", data)
        store.adopt(temp, sha, len(data))
        blobs[name], expected[sha] = sha, len(data)
    damaged = store.blob_path(blobs["c"])
    os.chmod(damaged, 0o644)
    damaged.write_bytes(b"THIRD")
    unreadable = store.blob_path(blobs["a"])
    real = blobs_module.hash_mapped_file

    def failing_disk(path: Path) -> Digest:
        if path == unreadable:
            raise OSError(errno.EIO, os.strerror(errno.EIO), str(path))
        return real(path)

    monkeypatch.setattr(blobs_module, "hash_mapped_file", failing_disk)
    with store.hash_in_background() as hashing:
        problems = store.verify(expected, hashing=hashing if started_early else None)
    assert {(p.kind, p.sha256): p.detail for p in problems} == {
        ("corrupt", blobs["a"]): "cannot be read: Input/output error",
        ("corrupt", blobs["c"]): str(
            mismatch("content", hashlib.sha256(b"THIRD").hexdigest(), blobs["c"])
        ),
    }


@pytest.mark.parametrize("started_early", [False, True])
def test_a_blob_that_hashes_wrong_is_looked_at_again_and_named_by_what_it_is(
    store_dir: Path, started_early: bool
) -> None:
    """Every blob on disk is hashed first and only one that does not hash to its name is
    looked at again (a stat a blob cost as much as hashing a small one): a wrong size, a
    FIFO and a link to nothing are named as they were when they were looked at first."""
    store = BlobStore(store_dir)
    expected: dict[str, int] = {}
    names: dict[str, str] = {}
    for name in ("short", "fifo", "gone", "fine"):
        data = f"the {name} blob".encode()
        temp, sha = _temp_with(store, f"{name}.part", data)
        store.adopt(temp, sha, len(data))
        names[name], expected[sha] = sha, len(data)
    short = store.blob_path(names["short"])
    os.chmod(short, 0o644)
    short.write_bytes(b"short")
    store.blob_path(names["fifo"]).unlink()
    os.mkfifo(store.blob_path(names["fifo"]))
    store.blob_path(names["gone"]).unlink()
    store.blob_path(names["gone"]).symlink_to(store_dir / "nothing")
    with store.hash_in_background() as hashing:
        problems = store.verify(expected, hashing=hashing if started_early else None)
    assert {p.sha256: (p.kind, p.detail) for p in problems} == {
        names["short"]: ("corrupt", f"size 5, expected {expected[names['short']]}"),
        names["fifo"]: ("corrupt", "not a regular file"),
        names["gone"]: ("missing", "indexed but not on disk"),
    }


def test_a_run_of_blobs_stops_once_the_hashing_is_closed(store_dir: Path) -> None:
    """`BlobHashing` hands the threads runs of blobs: once closed (verify refused the store,
    or ended), a run stops before its next blob, so the process does not wait at exit for
    whole runs to be hashed that nobody will ask for."""
    store = BlobStore(store_dir)
    temp, sha = _temp_with(store, "a.part", b"hello")
    path = store.adopt(temp, sha, 5)
    closed = threading.Event()
    assert blobs_module._hash_blobs([path, path], closed) == [Digest(sha, 5)] * 2
    closed.set()
    assert blobs_module._hash_blobs([path, path], closed) == []
