from __future__ import annotations

import errno
import sqlite3
from pathlib import Path

import pytest
import sqlalchemy.exc

from mirror.fsutil import atomic_write_bytes, atomic_writer, disk_full, is_disk_full


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


def test_disk_full_is_recognised_through_sqlalchemy_and_chains() -> None:
    assert is_disk_full(OSError(errno.ENOSPC, "No space left on device"))
    assert is_disk_full(OSError(errno.EDQUOT, "Disk quota exceeded"))
    assert not is_disk_full(OSError(errno.EACCES, "Permission denied"))
    orig = sqlite3.OperationalError("database or disk is full")
    wrapped = sqlalchemy.exc.OperationalError("UPDATE export_runs", {}, orig)
    assert is_disk_full(wrapped)
    try:
        try:
            raise OSError(errno.ENOSPC, "No space left on device")
        except OSError as exc:
            raise RuntimeError("while writing") from exc
    except RuntimeError as chained:
        assert is_disk_full(chained)


def test_disk_full_error_says_free_needed_and_kept(tmp_path: Path) -> None:
    error = disk_full(tmp_path, 3 * 1024 * 1024, "the partial file is kept")
    assert error.exit_code == 75
    text = str(error)
    assert f"disk holding {tmp_path}:" in text and " free, 3.0 MiB more is needed" in text
    assert "the partial file is kept" in text
    assert "more space is needed" in str(disk_full(tmp_path / "gone" / "deeper", None, "x"))
