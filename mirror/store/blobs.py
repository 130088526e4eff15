"""The content-addressed blob store on disk.

Layout: `ROOT/blobs/sha256/ab/<hex>` (read-only files), `ROOT/digests/sha256/ab/<hex>.gz`
(each blob's file digests: `store.digests`) and `ROOT/tmp/` for partial downloads.
Promise: a blob path exists only once its bytes are whole,
fsynced and named by their own sha256; `tmp/` and `blobs/` share a file system,
so moving a finished download into place is one atomic rename.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import re
import shutil
import stat
import threading
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from mirror.errors import ConfigError, IntegrityError, NotFound
from mirror.fsutil import (
    disk_full,
    fsync_dir,
    hash_workers,
    in_runs,
    is_disk_full,
    map_on_cores,
)
from mirror.integrity import Digest, hash_file, hash_mapped_file, hash_stream, mismatch

_HEX64 = re.compile(r"^[0-9a-f]{64}$")
MISSING = "indexed but not on disk"
NOT_A_FILE = "not a regular file"
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BlobProblem:
    """One finding of `BlobStore.verify`: kind is `missing`, `corrupt` or `extra`."""

    kind: str
    sha256: str
    detail: str


class BlobStore:
    """Blobs by sha256 under `root`; the SQL index lives elsewhere (see exporter, models)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.blobs_dir = root / "blobs" / "sha256"
        self.digests_dir = root / "digests" / "sha256"
        self.recipes_dir = root / "recipes" / "sha256"
        self.objects_dir = root / "objects" / "sha256"
        self.tmp_dir = root / "tmp"

    def ensure(self) -> None:
        """Create the directories; a root that is not a writable directory is a configuration
        error (exit 2) named in one line, a full disk a temporary failure (exit 75)."""
        self.check_not_a_file()
        try:
            self.blobs_dir.mkdir(parents=True, exist_ok=True)
            self.tmp_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            if is_disk_full(exc):
                raise disk_full(self.root, None, "nothing was written") from None
            raise ConfigError(
                f"cannot create the store at {self.root}: {exc.strerror}",
                hint="set store.path to a writable directory",
            ) from None

    def check_not_a_file(self) -> None:
        """A store.path naming something other than a directory is a configuration error."""
        if self.root.exists() and not self.root.is_dir():
            raise ConfigError(
                f"store.path {self.root} is not a directory",
                hint="set store.path to a directory (it is created when missing)",
            )

    def blob_path(self, sha256: str) -> Path:
        if not _HEX64.match(sha256):
            raise ValueError(f"not a sha256 hex digest: {sha256!r}")
        return self.blobs_dir / sha256[:2] / sha256

    def digests_path(self, sha256: str) -> Path:
        """Where blob `sha256`'s file digests are kept (`store.digests` owns the format)."""
        return self.digests_dir / sha256[:2] / f"{self.blob_path(sha256).name}.gz"

    def recipe_path(self, sha256: str) -> Path:
        """Where the splice recipe of the version whose bundle is blob `sha256` is kept
        (`mirror.outbound.recipe` owns the format)."""
        return self.recipes_dir / sha256[:2] / self.blob_path(sha256).name

    def object_path(self, sha256: str) -> Path:
        """Where the object the kept recipe of the version whose bundle is blob `sha256`
        makes is kept whole, when it is (`mirror.outbound.recipe`)."""
        return self.objects_dir / sha256[:2] / self.blob_path(sha256).name

    def temp_path(self, name: str) -> Path:
        """A path under tmp/ for a partial file; `name` must be a plain file name."""
        if "/" in name or name.startswith("."):
            raise ValueError(f"not a plain temp file name: {name!r}")
        return self.tmp_dir / name

    def has(self, sha256: str) -> bool:
        return self.blob_path(sha256).is_file()

    def open(self, sha256: str) -> Path:
        """The path of a stored blob; NotFound when it is not on disk."""
        path = self.blob_path(sha256)
        if not path.is_file():
            raise NotFound(f"blob {sha256[:12]}… is not in the store at {self.root}")
        return path

    def adopt(self, temp_file: Path, sha256: str, size: int) -> Path:
        """Move a finished, already-hashed temp file into place as blob `sha256`.

        The caller computed `sha256` while writing; the size is checked again here.
        If the blob already exists it is re-hashed: when its bytes still match its name the
        temp file is dropped, otherwise (bit rot, a truncated copy) the verified temp file
        replaces it in one atomic rename, which repairs it.
        """
        actual_size = temp_file.stat().st_size
        if actual_size != size:
            raise IntegrityError(
                f"{temp_file.name}: size {actual_size} differs from the expected {size}"
            )
        target = self.blob_path(sha256)
        if target.is_file():
            if self.intact(sha256, size):
                temp_file.unlink()
                return target
            log.warning("blob %s no longer matches its name; replacing it", sha256[:12])
        target.parent.mkdir(parents=True, exist_ok=True)
        _make_way(target)
        with open(temp_file, "rb") as handle:
            os.fsync(handle.fileno())
        os.chmod(temp_file, 0o444)
        os.replace(temp_file, target)
        fsync_dir(target.parent)
        return target

    def intact(self, sha256: str, size: int) -> bool:
        """Whether blob `sha256` is on disk with `size` bytes that hash to its name."""
        path = self.blob_path(sha256)
        try:
            return self._seen(sha256, size) is None and hash_file(path).sha256 == sha256
        except FileNotFoundError:
            return False

    def add_file(self, source: Path) -> tuple[str, int]:
        """Copy any file into the store (hashing while copying); returns (sha256, size)."""
        self.ensure()
        temp = self.tmp_dir / f"add-{os.getpid()}-{source.name}"
        try:
            with open(source, "rb") as reader, open(temp, "wb") as writer:
                digest = hash_stream(reader, writer=writer)
            self.adopt(temp, digest.sha256, digest.size)
        finally:
            with contextlib.suppress(FileNotFoundError):
                temp.unlink()
        return digest.sha256, digest.size

    def remove(self, sha256: str) -> int:
        """Delete a blob, and its file digests, kept recipe and kept object; returns the bytes
        freed (0 if it was not there). What no download leaves under a blob's name goes too
        (a link, a FIFO, an empty directory: OSError when it holds anything)."""
        path = self.blob_path(sha256)
        sidecars = (self.digests_path(sha256), self.recipe_path(sha256), self.object_path(sha256))
        for sidecar in sidecars:
            with contextlib.suppress(FileNotFoundError):
                sidecar.unlink()
        try:
            found = path.lstat()
            path.rmdir() if stat.S_ISDIR(found.st_mode) else path.unlink()
        except FileNotFoundError:
            return 0
        fsync_dir(path.parent)
        return found.st_size if stat.S_ISREG(found.st_mode) else 0

    def iter_blobs(self) -> Iterator[str]:
        """Every blob name on disk (well-formed names only)."""
        if not self.blobs_dir.is_dir():
            return
        for shard in sorted(self.blobs_dir.iterdir()):
            if not shard.is_dir():
                continue
            for entry in sorted(shard.iterdir()):
                if _HEX64.match(entry.name) and entry.name[:2] == shard.name:
                    yield entry.name

    def hash_in_background(self, workers: int | None = None) -> BlobHashing:
        """Start hashing every blob on disk now (see BlobHashing); close it when done."""
        return BlobHashing(self, workers)

    def verify(
        self,
        expected: dict[str, int],
        workers: int | None = None,
        hashing: BlobHashing | None = None,
    ) -> list[BlobProblem]:
        """Re-hash every blob: missing (indexed, not on disk), corrupt (not a regular file,
        size or bytes differ), extra; sorted by sha256 within kind. The hashing is spread over
        `workers` threads (one per usable core, at most 8), with the same findings in the same
        order; with `hashing` (started earlier), its digests are used."""
        on_disk = set(self.iter_blobs())
        to_hash = sorted(sha256 for sha256 in expected if sha256 in on_disk)
        problems = {
            sha256: BlobProblem("missing", sha256, MISSING)
            for sha256 in expected
            if sha256 not in on_disk
        }
        paths = [self.blob_path(sha256) for sha256 in to_hash]
        digests = (
            map_on_cores(hash_blob, paths, workers)
            if hashing is None
            else map(hashing.digest, to_hash, paths)
        )
        for sha256, actual in zip(to_hash, digests, strict=True):
            size = expected[sha256]
            if isinstance(actual, Digest) and actual == Digest(sha256, size):
                continue
            problems[sha256] = self._seen(sha256, size) or _hash_problem(sha256, actual)
        extra = [
            BlobProblem("extra", sha256, "on disk but not indexed")
            for sha256 in sorted(on_disk - expected.keys())
        ]
        return [problems[sha256] for sha256 in sorted(problems)] + extra

    def _seen(self, sha256: str, size: int) -> BlobProblem | None:
        """What a blob that did not hash to its name shows (None: a regular file of its size,
        whose bytes differ). Only a blob that hashed wrong is looked at again: a stat a blob
        cost as much as hashing a small one. `hash_mapped_file` never waits on what is not a
        regular file (a FIFO) nor reads it (a link to /dev/zero): it is found here."""
        try:
            found = self.blob_path(sha256).stat()
        except FileNotFoundError:  # removed meanwhile, or a link to nothing
            return BlobProblem("missing", sha256, MISSING)
        if not stat.S_ISREG(found.st_mode):
            return BlobProblem("corrupt", sha256, NOT_A_FILE)
        if found.st_size != size:
            return BlobProblem("corrupt", sha256, f"size {found.st_size}, expected {size}")
        return None

    def temp_files(self) -> list[Path]:
        if not self.tmp_dir.is_dir():
            return []
        return sorted(p for p in self.tmp_dir.iterdir() if p.is_file())

    def used_bytes(self) -> int:
        return sum(self.blob_path(sha).stat().st_size for sha in self.iter_blobs())

    def free_bytes(self) -> int:
        self.ensure()
        return shutil.disk_usage(self.root).free


def _make_way(target: Path) -> None:
    """A directory where a blob belongs (no download leaves one; verify calls it `not a
    regular file`) is removed when empty, so the rename can replace it; one with files in it
    is refused (IntegrityError, exit 5), not emptied: what it holds is the operator's."""
    try:
        if not stat.S_ISDIR(target.lstat().st_mode):
            return
        target.rmdir()
    except FileNotFoundError:
        return
    except OSError as exc:
        if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
            raise
        raise IntegrityError(
            f"{target} is a directory with files in it, where blob {target.name[:12]}… belongs",
            hint="move that directory out of the store, then run the same command again",
        ) from None


def hash_blob(path: Path) -> Digest | OSError:
    """A blob's digest (`hash_mapped_file`), or the OSError reading it gave: verify reports an
    unreadable blob (an I/O error, a mode it may not read) beside the others, and goes on."""
    try:
        return hash_mapped_file(path)
    except OSError as exc:
        return exc


def _hash_problem(sha256: str, actual: Digest | OSError) -> BlobProblem:
    """A regular file of the indexed size that could not be read, or whose bytes differ."""
    if isinstance(actual, OSError):
        return BlobProblem("corrupt", sha256, f"cannot be read: {actual.strerror or actual}")
    return BlobProblem("corrupt", sha256, str(mismatch("content", actual.sha256, sha256)))


def _hash_blobs(paths: list[Path], closed: threading.Event) -> list[Digest | OSError]:
    """A run of blobs' digests, cut short once `closed` (the run's results are then never
    asked for): a closed `BlobHashing` leaves at most one blob a thread to finish."""
    digests: list[Digest | OSError] = []
    for path in paths:
        if closed.is_set():
            break
        digests.append(hash_blob(path))
    return digests


class BlobHashing:
    """Every blob on disk being hashed on one thread per core (hashlib releases the GIL),
    started before the index is read: `store verify` spends the index's start-up (importing
    SQLAlchemy, the query) hashing, not waiting. `digest` waits for one blob's result (a blob
    that appeared after the start is hashed then); `close` cancels what has not started."""

    def __init__(self, store: BlobStore, workers: int | None = None) -> None:
        count = workers or hash_workers()
        self._pool = ThreadPoolExecutor(count, thread_name_prefix="hash")
        self._futures: dict[str, tuple[Future[list[Digest | OSError]], int]] = {}
        self._closed = threading.Event()
        names: list[str] = []
        with contextlib.suppress(OSError):  # an unreadable store: verify reports it as before
            names = list(store.iter_blobs())
        for run in in_runs(names, count):  # a future a run of blobs, not one a blob
            paths = [store.blob_path(name) for name in run]
            future = self._pool.submit(_hash_blobs, paths, self._closed)
            self._futures.update((name, (future, index)) for index, name in enumerate(run))

    def digest(self, sha256: str, path: Path) -> Digest | OSError:
        found = self._futures.get(sha256)
        if found is None:
            return hash_blob(path)
        future, index = found
        return future.result()[index]

    def close(self) -> None:
        self._closed.set()
        self._pool.shutdown(wait=False, cancel_futures=True)

    def __enter__(self) -> BlobHashing:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
