"""Crash-safe file writing, free space and full disks (hashing is `mirror.integrity`).

Promise: a reader never sees a half-written file. Everything is written to a
temporary name in the target's own directory, fsynced, renamed over the target
and the directory fsynced, so after a crash either the old or the new file is
there, whole.
"""

from __future__ import annotations

import contextlib
import errno
import glob
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import IO, TypeVar

from mirror.errors import TemporaryFailure
from mirror.units import format_size

VALIDATOR_SUFFIX = ".validator"  # beside a partial download: what a resume must match
_DISK_FULL = frozenset({errno.ENOSPC, errno.EDQUOT})
T = TypeVar("T")
R = TypeVar("R")


def is_disk_full(exc: BaseException) -> bool:
    """True for "no space left on device", "disk quota exceeded", and SQLite's "database or
    disk is full" (as raised through SQLAlchemy), anywhere in the exception's chain."""
    seen: set[int] = set()
    pending: list[BaseException | None] = [exc]
    while pending:
        current = pending.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno in _DISK_FULL:
            return True
        if "database or disk is full" in str(current):
            return True
        orig = getattr(current, "orig", None)
        pending += [orig if isinstance(orig, BaseException) else None]
        pending += [current.__cause__, current.__context__]
    return False


def free_bytes(path: Path) -> int | None:
    """Bytes free for us on the file system holding `path` (None when it cannot be asked)."""
    for candidate in (path, *path.parents):
        try:
            return shutil.disk_usage(candidate).free
        except OSError:
            continue
    return None


def disk_full(
    where: Path,
    needed: int | None,
    kept: str,
    hint: str = "free space there (or move store.path) and run the same command again",
) -> TemporaryFailure:
    """The one-line exit-75 error for a full disk: free space where, space needed, and what
    was kept (e.g. "the partial download of 12 MiB is kept; the next run resumes it"); the
    hint names what else may move (the store by default; a receiver's spool is its DIR)."""
    free = free_bytes(where)
    free_text = format_size(free) if free is not None else "an unknown amount"
    need_text = (
        f"{format_size(needed)} more is needed" if needed is not None else "more space is needed"
    )
    return TemporaryFailure(
        f"no space left on the disk holding {where}: {free_text} free, {need_text}; {kept}",
        hint=hint,
    )


def fsync_dir(directory: Path) -> None:
    """Make a rename or create inside `directory` durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_writer(path: Path, mode: int = 0o644) -> Iterator[IO[bytes]]:
    """Yield a binary file that replaces `path` only if the block finishes without error."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    temp_path = Path(temp_name)
    try:
        with os.fdopen(fd, "wb") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temp_path, mode)
        os.replace(temp_path, path)
        fsync_dir(path.parent)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            temp_path.unlink()
        raise


def remove_interrupted_writes(path: Path) -> list[Path]:
    """Remove the temporary files an `atomic_writer` of `path` left when its process was
    killed mid-write; only the one process that writes `path` may call this."""
    removed: list[Path] = []
    for stale in path.parent.glob(f".{glob.escape(path.name)}.*.tmp"):
        with contextlib.suppress(FileNotFoundError):
            stale.unlink()
            removed.append(stale)
    return removed


def atomic_write_bytes(path: Path, data: bytes, mode: int = 0o644) -> None:
    """Replace `path` with `data`, all or nothing."""
    with atomic_writer(path, mode) as handle:
        handle.write(data)


def pid_alive(pid: int) -> bool:
    """True when a process with this pid exists on this host (a lease's owner, or the writer
    whose pid a temp file's name carries)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def hash_workers() -> int:
    """One hashing thread per usable core, at most 8 (the disk is the limit beyond)."""
    return max(1, min(8, len(os.sched_getaffinity(0))))


RUNS_A_WORKER = 16


def in_runs(items: list[T], workers: int) -> list[list[T]]:
    """`items` cut into consecutive runs, about RUNS_A_WORKER a worker (one item a run while
    there are fewer): one task a run, so ten thousand small files are not ten thousand
    futures (each cost about what hashing a 64 KiB file does), while a few large files still
    spread over every core."""
    size = max(1, len(items) // (workers * RUNS_A_WORKER))
    return [items[start : start + size] for start in range(0, len(items), size)]


def map_on_cores(
    function: Callable[[T], R], items: Iterable[T], workers: int | None = None
) -> Iterator[R]:
    """`function` over `items` on one thread per core (`hash_workers`), results in order.

    For hashing files: hashlib releases the GIL on large updates, so the threads use every
    core. Items go to the threads in runs (`in_runs`). The first exception is raised when its
    result is reached; the rest are cancelled.
    """
    count = workers or hash_workers()
    with ThreadPoolExecutor(count, thread_name_prefix="hash") as pool:
        futures = [pool.submit(_run_of, function, run) for run in in_runs(list(items), count)]
        try:
            for future in futures:
                results, error = future.result()
                yield from results
                if error is not None:
                    raise error
        finally:
            for future in futures:
                future.cancel()


def _run_of(function: Callable[[T], R], run: list[T]) -> tuple[list[R], Exception | None]:
    """`function` over one run, up to the first exception (returned, to be raised in order)."""
    results: list[R] = []
    for item in run:
        try:
            results.append(function(item))
        except Exception as exc:
            return results, exc
    return results, None
