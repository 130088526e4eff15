from __future__ import annotations

import errno
import sqlite3
from pathlib import Path

import pytest
import sqlalchemy.exc

from mirror.fsutil import (
    RUNS_A_WORKER,
    atomic_write_bytes,
    atomic_writer,
    disk_full,
    in_runs,
    is_disk_full,
    map_on_cores,
)


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


@pytest.mark.parametrize("count", [0, 1, 3, 100, 1000])
def test_map_on_cores_gives_every_result_in_order_in_runs(count: int) -> None:
    """Items go to the threads in runs (a future a run, not one an item), results in order;
    a few items still spread one a run over the workers."""
    assert list(map_on_cores(lambda n: n * n, range(count), workers=2)) == [
        n * n for n in range(count)
    ]
    runs = in_runs(list(range(count)), 2)
    assert [n for run in runs for n in run] == list(range(count))
    if count <= 2 * RUNS_A_WORKER:
        assert all(len(run) == 1 for run in runs)
    else:
        assert 2 * RUNS_A_WORKER <= len(runs) < count  # runs of several items


def test_map_on_cores_raises_the_first_exception_where_its_result_is_reached() -> None:
    """Every result before the failing item is given, then its exception; a later item's
    failure (in another run) is never reached."""

    def square(n: int) -> int:
        if n in (500, 900):
            raise ValueError(f"item {n}")
        return n * n

    given: list[int] = []
    with pytest.raises(ValueError, match="item 500"):
        for result in map_on_cores(square, range(1000), workers=2):
            given.append(result)
    assert given == [n * n for n in range(500)]
