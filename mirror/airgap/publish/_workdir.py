"""Work directories of delta rebuilds: one per rebuild, locked while it lives, so a rebuild
killed half-way leaves something the next one recognises and removes.

Promises: `locked_work_dir` makes a directory and takes its lock while holding a lock on
the work root, which `remove_abandoned` takes too, so no directory is judged half-made;
`remove_abandoned` removes exactly the directories whose lock no process holds (or that
have none: their maker was killed before it), and any removal that was cut short;
`check_writable` refuses (exit 2) a work root that is no writable directory;
`check_space` refuses (TemporaryFailure, exit 75) a rebuild without room, naming needed,
free and where.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

from mirror.errors import ConfigError, TemporaryFailure
from mirror.fsutil import free_bytes
from mirror.units import format_size

WORK_PREFIX = "mirror-rebuild-"
LOCK_NAME = ".lock"
REMOVING_PREFIX = f".{WORK_PREFIX}removing-"

FreeSpace = Callable[[Path], int | None]


def work_root(work_dir: Path | None) -> Path:
    """`work_dir`, else the system temp dir; ConfigError (exit 2) when there is none (a
    read-only root file system, as pods run)."""
    if work_dir is not None:
        return Path(work_dir)
    try:
        return Path(tempfile.gettempdir())
    except FileNotFoundError as exc:
        raise ConfigError(
            f"no writable temporary directory to rebuild deltas in ({exc.strerror})",
            hint="set target.work_dir to a writable directory with room for rebuilds",
        ) from None


def check_writable(root: Path) -> None:
    """ConfigError (exit 2) unless `root` is a directory this process can create in."""
    if not root.is_dir():
        raise ConfigError(
            f"target.work_dir {root} is not a directory",
            hint="create it or point target.work_dir at a disk with room for rebuilds",
        )
    if not os.access(root, os.W_OK | os.X_OK):
        raise ConfigError(
            f"target.work_dir {root} is not writable (read-only or not permitted); "
            "nothing was published",
            hint="point target.work_dir at a writable disk with room for rebuilds",
        )


def remove_abandoned(root: Path) -> None:
    """Remove the work directories of rebuilds whose process is gone (killed mid-way): a
    live rebuild holds the lock in its directory, which the kernel releases at its death.
    Creating a work directory and judging one both hold a lock on `root` itself, so a
    directory is never judged half-made: one without a held lock is abandoned, at once."""
    if not root.is_dir():
        return
    with _holding(root):
        for entry in root.glob(f"{WORK_PREFIX}*"):
            if entry.is_dir() and _abandoned(entry):
                with contextlib.suppress(OSError):
                    os.rename(entry, entry.with_name(f"{REMOVING_PREFIX}{entry.name}"))
    for entry in root.glob(f"{REMOVING_PREFIX}*"):
        shutil.rmtree(entry, ignore_errors=True)


def remove_work_dir(work: Path) -> None:
    """Remove a work directory: renamed out of the way first (with its lock still held), so
    a kill half-way through leaves something every later import removes at once."""
    doomed = work.with_name(f"{REMOVING_PREFIX}{work.name}")
    try:
        os.rename(work, doomed)
    except OSError:
        doomed = work
    shutil.rmtree(doomed, ignore_errors=True)


def _abandoned(work: Path) -> bool:
    try:
        fd = os.open(work / LOCK_NAME, os.O_RDWR | os.O_NOFOLLOW)
    except FileNotFoundError:
        return True  # its maker was killed before the lock was in place
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False  # a live rebuild
    finally:
        os.close(fd)
    return True


@contextlib.contextmanager
def _holding(root: Path) -> Iterator[None]:
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def locked_work_dir(root: Path) -> tuple[Path, int]:
    """A new work directory whose lock is held before any other import may judge it."""
    with _holding(root):
        work = Path(tempfile.mkdtemp(prefix=WORK_PREFIX, dir=root))
        fd = os.open(work / LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)
    return work, fd


def check_space(where: Path, needed: int, free_space: FreeSpace = free_bytes) -> None:
    free = free_space(where)
    if free is not None and free < needed:
        raise TemporaryFailure(
            f"not enough space in {where} to rebuild a delta: {format_size(needed)} needed, "
            f"{format_size(free)} free; nothing was published",
            hint="free space there or set target.work_dir to a larger disk, then run again",
        )
