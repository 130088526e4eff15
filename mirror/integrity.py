"""Integrity: the one streaming hash, the one hashing writer, the one digest check.

Every place that checks bytes uses these, so a digest is computed one way (sha256, in
CHUNK_SIZE pieces, memory flat in the bytes hashed) and a mismatch reads the same
everywhere: `WHAT hashes to ABC…, expected DEF…` (IntegrityError, exit 5).

Promises:
- `hash_stream` reads at most `limit` bytes when given and copies to `writer` in the
  same pass; nothing is held beyond one chunk.
- `HashingWriter` hashes exactly what reaches the file it wraps (or, wrapping nothing,
  what it is given: a running digest that can be carried across appends).
- `hash_mapped_file` gives what `hash_file` gives for the whole file, and fails as it
  fails, with less CPU (see there for its one exception).
- `BackgroundSha256` hashes on another thread behind a bounded queue (a few chunks at
  most wait in memory), so a second digest costs no wall time on a spare core.
- `require_digest` raises one IntegrityError naming what was checked, both digests
  abbreviated, and never the bytes.
"""

from __future__ import annotations

import errno
import hashlib
import mmap
import os
import queue
import stat
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Protocol

from mirror.errors import IntegrityError

CHUNK_SIZE = 1024 * 1024
MAP_WINDOW = 4 * 1024 * 1024
MAP_MIN = CHUNK_SIZE
"""Files of at most this many bytes are read by `hash_mapped_file`, not mapped."""
# Linux's value where Python (3.11) does not name it
MADV_POPULATE_READ = getattr(mmap, "MADV_POPULATE_READ", 22)
# Opening a FIFO returns at once (to be refused); no newline translation where there is any.
READ_NO_WAIT = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)
SHORT = 12


class Readable(Protocol):
    def read(self, size: int = ..., /) -> bytes: ...


@dataclass(frozen=True)
class Digest:
    """What a stream hashed to: its sha256 (hex) and its size in bytes."""

    sha256: str
    size: int


def hash_stream(
    reader: Readable,
    *,
    writer: Any = None,
    limit: int | None = None,
    on_progress: Callable[[int], None] | None = None,
) -> Digest:
    """sha256 and size of everything `reader` yields (at most `limit` bytes), copied to
    `writer` when given. A reader that can `readinto` with no writer is read into one buffer
    (`_hash_reads`), not a new bytes object a chunk."""
    digest = hashlib.sha256()
    if writer is None and hasattr(reader, "readinto"):
        view = memoryview(bytearray(CHUNK_SIZE if limit is None else min(CHUNK_SIZE, limit)))
        size = _hash_reads(reader, digest, limit, view, on_progress)
        return Digest(digest.hexdigest(), size)
    size = 0
    while chunk := reader.read(CHUNK_SIZE if limit is None else min(CHUNK_SIZE, limit - size)):
        if writer is not None:
            writer.write(chunk)
        digest.update(chunk)
        size += len(chunk)
        if on_progress is not None:
            on_progress(len(chunk))
    return Digest(digest.hexdigest(), size)


def iter_file(path: Path, start: int = 0, length: int | None = None) -> Iterator[bytes]:
    """A file (or a byte range of it) in CHUNK_SIZE pieces."""
    with path.open("rb") as handle:
        handle.seek(start)
        remaining = length
        while remaining is None or remaining > 0:
            want = CHUNK_SIZE if remaining is None else min(CHUNK_SIZE, remaining)
            chunk = handle.read(want)
            if not chunk:
                return
            if remaining is not None:
                remaining -= len(chunk)
            yield chunk


def hash_file(path: Path, start: int = 0, length: int | None = None) -> Digest:
    """sha256 and size of a file (or a byte range of it), streamed through one reused buffer
    (no new bytes object a chunk: about 6% less CPU than `iter_file`, as much as `openssl
    dgst` spends a byte)."""
    digest = hashlib.sha256()
    with path.open("rb", buffering=0) as handle:
        handle.seek(start)
        size = _hash_reads(handle, digest, length)
    return Digest(digest.hexdigest(), size)


def hash_mapped_file(path: Path) -> Digest:
    """sha256 and size of a whole file, hashed from the page cache without copying it:
    MAP_WINDOW pieces are mapped, populated (MADV_POPULATE_READ) and hashed, about 15% less
    CPU than `hash_file`, whose reads copy every byte once more.

    For the store's blobs: windows are mapped only under a read lease (`_mappable_size`), so
    a process that truncates or rewrites the file (`cp` over it) waits until the hash is done
    instead of unmapping a window's pages under it (SIGBUS: a truncation every few ms killed
    53 of 54 processes hashing a 64 MiB file without the lease). Without a lease, and for
    what could not be populated (an I/O error, a kernel before 5.14), the file is read as
    `hash_file` reads it from there on, so every failure is the OSError or the short digest
    that `hash_file` would give. Once a writer waits, the rest is read too, so a hash that
    outlasts the lease (lease-break-time, 45 s by default) is cut short as `hash_file`'s
    would be. SIGBUS is left only to a window's milliseconds stalled from outside: the
    process stopped longer than lease-break-time while a writer waits, or a populated page
    reclaimed under memory pressure whose re-read fails.

    What is not a regular file (links followed) is refused with an OSError before a byte is
    read, where `hash_file` would wait for a FIFO's writer forever, read a device such as
    /dev/zero without end, or fail on a directory.

    A file of at most MAP_MIN bytes is read, not mapped: for ten thousand small blobs the
    lease, the mapping and its unmapping cost more than the copy they save (measured in
    bench/RESULTS.md, issue 39), and a read needs no lease."""
    digest = hashlib.sha256()
    with _open_regular(path) as handle:
        if os.fstat(handle.fileno()).st_size <= MAP_MIN:
            size = _hash_reads(handle, digest, None)
            return Digest(digest.hexdigest(), size)
        end = _mappable_size(handle.fileno())
        size = 0
        while (
            size < end
            and _lease_held(handle.fileno())
            and _hash_window(handle.fileno(), size, min(MAP_WINDOW, end - size), digest)
        ):
            size += min(MAP_WINDOW, end - size)
        handle.seek(size)
        size += _hash_reads(handle, digest, None)
    return Digest(digest.hexdigest(), size)


def _open_regular(path: Path) -> IO[bytes]:
    """`path` opened for reading when it is a regular file; OSError (EINVAL) otherwise. The
    open itself does not wait: O_NONBLOCK returns a FIFO's end at once, to be refused."""
    fd = os.open(path, READ_NO_WAIT)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(errno.EINVAL, "not a regular file", str(path))
    return open(fd, "rb", buffering=0)


def _mappable_size(fd: int) -> int:
    """The bytes of `fd`'s file that may be hashed from mapped windows: all of them once a read
    lease is held (Linux), none (the file is read) otherwise. Under the lease, a process that
    opens the file to write or truncates it waits until the file is closed, at most
    /proc/sys/fs/lease-break-time. The lease's break notice is SIGURG, which is ignored
    unless handled. No lease is granted while another process has the file open to write (it
    may be cutting it now), on NFS, or on a file of another user without CAP_LEASE."""
    if sys.platform != "linux":
        return 0
    import fcntl
    import signal

    try:
        fcntl.fcntl(fd, fcntl.F_SETSIG, signal.SIGURG)
        fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_RDLCK)
    except OSError:
        return 0
    return os.fstat(fd).st_size


def _lease_held(fd: int) -> bool:
    """Whether the read lease still holds writers off: once one waits (the lease is being
    broken), the rest of the file is read, never mapped, so a truncation after
    lease-break-time finds no mapped page to take away."""
    import fcntl

    return fcntl.fcntl(fd, fcntl.F_GETLEASE) == fcntl.F_RDLCK


def _hash_window(fd: int, offset: int, length: int, digest: Any) -> bool:
    """Hash one mapped window when the kernel could populate all of it; False (and nothing
    hashed) otherwise."""
    try:
        with mmap.mmap(fd, length, offset=offset, access=mmap.ACCESS_READ) as window:
            window.madvise(MADV_POPULATE_READ)
            digest.update(window)
    except (OSError, ValueError):  # ValueError: the file is already shorter than the window
        return False
    return True


def _hash_reads(
    handle: Any,
    digest: Any,
    length: int | None,
    view: memoryview | None = None,
    on_progress: Callable[[int], None] | None = None,
) -> int:
    """Feed `digest` from `handle`'s position (at most `length` bytes) through one reused
    buffer (`view`, or this thread's); the number of bytes read."""
    size = 0
    view = _buffer() if view is None else view
    while length is None or size < length:
        want = len(view) if length is None else min(len(view), length - size)
        got = handle.readinto(view[:want])
        if not got:
            break
        digest.update(view[:got])
        size += got
        if on_progress is not None:
            on_progress(got)
    return size


_buffers = threading.local()


def _buffer() -> memoryview:
    """This thread's read buffer of CHUNK_SIZE bytes, made once: a new one for every file
    zeroed a MiB each time, more CPU than hashing a 64 KiB blob. `_hash_reads` never calls
    out while it fills it, so one a thread is enough."""
    view: memoryview | None = getattr(_buffers, "view", None)
    if view is None:
        view = _buffers.view = memoryview(bytearray(CHUNK_SIZE))
    return view


def hash_bytes(data: bytes) -> str:
    """Hex sha256 of bytes already in memory (a manifest, a signature, a small document)."""
    return hashlib.sha256(data).hexdigest()


class HashingWriter:
    """Wraps a binary file: every byte written reaches the file and the hash, in order.
    With no file it only hashes: the running digest of bytes its owner writes elsewhere."""

    def __init__(self, target: IO[bytes] | None = None) -> None:
        self._target = target
        self._digest = hashlib.sha256()
        self.size = 0

    def write(self, data: bytes | bytearray | memoryview) -> int:
        if self._target is not None:
            self._target.write(data)
        self._digest.update(data)
        self.size += len(data)
        return len(data)

    def flush(self) -> None:
        if self._target is not None:
            self._target.flush()

    @property
    def result(self) -> Digest:
        return Digest(self._digest.hexdigest(), self.size)


def tee(chunks: Iterable[bytes], write: Callable[[bytes], object]) -> Iterator[bytes]:
    """`chunks` as they pass, each handed to `write` first (a running hash, a spool)."""
    for chunk in chunks:
        write(chunk)
        yield chunk


def mismatch(what: str, actual: str, expected: str, *, hint: str | None = None) -> IntegrityError:
    """The one wording of a digest that is not the one expected."""
    return IntegrityError(
        f"{what} hashes to {actual[:SHORT]}…, expected {expected[:SHORT]}…", hint=hint
    )


def require_digest(
    what: str,
    actual: Digest | str,
    expected_sha256: str,
    expected_size: int | None = None,
    *,
    hint: str | None = None,
) -> None:
    """Raise IntegrityError (exit 5) unless `actual` has the expected sha256 (and size)."""
    sha256 = actual.sha256 if isinstance(actual, Digest) else actual
    if expected_size is not None and isinstance(actual, Digest) and actual.size != expected_size:
        raise IntegrityError(f"{what} is {actual.size} bytes, expected {expected_size}", hint=hint)
    if sha256 != expected_sha256:
        raise mismatch(what, sha256, expected_sha256, hint=hint)


class BackgroundSha256:
    """A sha256 computed on another thread (hashlib releases the GIL), so a second digest of
    the same bytes costs no wall time on a machine with a spare core. Bounded queue: at
    most a few chunks wait in memory."""

    def __init__(self) -> None:
        self._digest = hashlib.sha256()
        self._queue: queue.Queue[bytes | None] = queue.Queue(maxsize=8)
        self._thread = threading.Thread(target=self._run, name="sha256", daemon=True)
        self._thread.start()
        self._closed = False

    def _run(self) -> None:
        while (chunk := self._queue.get()) is not None:
            self._digest.update(chunk)

    def update(self, chunk: bytes) -> None:
        self._queue.put(chunk)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._queue.put(None)
            self._thread.join()

    def hexdigest(self) -> str:
        self.close()
        return self._digest.hexdigest()
