from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from mirror.fsutil import atomic_write_bytes, atomic_writer, iter_file, sha256_file


def test_atomic_write_replaces_whole(tmp_path: Path) -> None:
    target = tmp_path / "index.json"
    atomic_write_bytes(target, b"old")
    atomic_write_bytes(target, b"new", mode=0o600)
    assert target.read_bytes() == b"new"
    assert oct(target.stat().st_mode & 0o777) == "0o600"
    assert [p.name for p in tmp_path.iterdir()] == ["index.json"]


def test_failed_write_leaves_old_file_and_no_temp(tmp_path: Path) -> None:
    target = tmp_path / "values.yaml"
    target.write_bytes(b"old")
    with pytest.raises(RuntimeError), atomic_writer(target) as handle:
        handle.write(b"half")
        raise RuntimeError("disk full")
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["values.yaml"]


def test_ranges_and_hash(tmp_path: Path) -> None:
    path = tmp_path / "blob"
    data = bytes(range(256)) * 10000
    path.write_bytes(data)
    assert sha256_file(path) == hashlib.sha256(data).hexdigest()
    assert sha256_file(path, 100, 5000) == hashlib.sha256(data[100:5100]).hexdigest()
    assert b"".join(iter_file(path, 2_000_000)) == data[2_000_000:]
