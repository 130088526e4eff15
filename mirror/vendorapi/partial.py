"""The partial file of one bundle download: appended, hashed and made durable.

Promises:

- memory stays constant: network bytes are gathered into 1 MiB blocks (received straight
  into the block when the body is read from the socket), each written and hashed in the
  same pass;
- a partial file longer than expected, or with no recorded validator (its bytes may belong
  to another object), is emptied before anything is continued;
- `durable` counts only bytes an fsync covered: a background fsync runs every 8 MiB (and
  every 30 s), each finished one is reported, so the network never waits for the disk
  unless the disk falls a whole interval behind;
- on a full disk the file is cut back to its last fsynced checkpoint (resumable, and the
  unsynced tail's space freed) and the error says where, how much is free and needed;
- a `tap` (the archive inspection) sees every byte of the file once, in order: the prefix
  a resumed download starts from (read once for the hash and the tap together), then
  each block as it is appended; when the file is emptied, the tap is restarted.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import BinaryIO, Protocol

from mirror.errors import TemporaryFailure
from mirror.fsutil import disk_full, remove_interrupted_writes
from mirror.integrity import CHUNK_SIZE, HashingWriter, iter_file
from mirror.vendorapi.validators import Validator, load_validator, validator_path

log = logging.getLogger("mirror.vendorapi.download")  # one logger for the whole download

CHECKPOINT_BYTES = 8 * 1024 * 1024
CHECKPOINT_SECONDS = 30.0


class Tap(Protocol):
    """Something that reads the file's bytes as they are written (`archive.ArchiveFeed`)."""

    def feed(self, data: bytes | bytearray | memoryview) -> None: ...
    def restart(self) -> None: ...


class PartialFile:
    """`dest` while it is downloaded; `report(durable)` hears of every checkpoint."""

    handle: BinaryIO

    def __init__(
        self, dest: Path, report: Callable[[int], None] | None, tap: Tap | None = None
    ) -> None:
        self.dest = dest
        self.report = report
        self.tap = tap
        self.hashed = HashingWriter()  # the running digest of the whole file
        self.offset = 0
        self.durable = 0
        self.last_checkpoint_at = time.monotonic()
        self.block = bytearray(CHUNK_SIZE)
        self.fill = 0
        self.syncer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="mirror-fsync")
        self.sync_future: Future[None] | None = None
        self.sync_offset = 0

    def open(self, expected: int | None) -> tuple[BinaryIO, Validator | None]:
        """Open (or create) the file for appending, hash what it holds; its validator too."""
        self.dest.parent.mkdir(parents=True, exist_ok=True)
        remove_interrupted_writes(validator_path(self.dest))
        handle = open(self.dest, "ab", buffering=0)  # noqa: SIM115 (closed by the caller)
        size = handle.seek(0, os.SEEK_END)
        if expected is not None and size > expected:
            log.warning(
                "partial file %s holds %d bytes, more than the %d expected; starting over",
                self.dest.name,
                size,
                expected,
            )
            handle.truncate(0)
            size = 0
        validator = load_validator(self.dest) if size > 0 else None
        if size > 0 and validator is None:
            log.warning(
                "partial file %s has no recorded validator, so its bytes may belong to another "
                "object; starting over",
                self.dest.name,
            )
            handle.truncate(0)
            size = 0
        for chunk in iter_file(self.dest, 0, size):
            self.hashed.write(chunk)
            if self.tap is not None:
                self.tap.feed(chunk)
        self.offset = self.durable = self.sync_offset = size
        self.handle = handle
        return handle, validator

    @property
    def unsynced(self) -> bool:
        """Some bytes received (written or still buffered) are not covered by an fsync."""
        return self.durable != self.offset + self.fill

    def empty(self) -> None:
        """Throw every byte away, durably, and start the hash afresh."""
        self.fill = 0
        with contextlib.suppress(OSError):
            self.finish_sync(report=False)
        self.handle.truncate(0)
        self.handle.seek(0)
        os.fsync(self.handle.fileno())
        self.hashed = HashingWriter()
        self.offset = self.durable = self.sync_offset = 0
        if self.tap is not None:
            self.tap.restart()

    def write_block(self) -> None:
        """Append the buffered bytes to the file and the hash (one pass over them)."""
        if not self.fill:
            return
        view = memoryview(self.block)[: self.fill]
        written = 0
        while written < self.fill:
            written += self.handle.write(view[written:]) or 0
        self.hashed.write(view)
        if self.tap is not None:
            self.tap.feed(view)
        self.offset += self.fill
        self.fill = 0

    def space(self, limit: int | None = None) -> memoryview:
        """Where the next network bytes go (at most `limit`): the free end of the block, so a
        socket read lands where the file write and the hash read from, with no copy."""
        end = CHUNK_SIZE if limit is None else min(CHUNK_SIZE, self.fill + max(limit, 0))
        return memoryview(self.block)[self.fill : end]

    def filled(self, count: int, after_block: Callable[[], None]) -> None:
        """`count` bytes were received into `space()`; a full block is written and hashed."""
        self.fill += count
        if self.fill == CHUNK_SIZE:
            self.write_block()
            after_block()

    def buffer(self, piece: bytes, after_block: Callable[[], None]) -> None:
        """Gather network pieces into 1 MiB blocks; each full block is written and hashed."""
        view = memoryview(piece)
        while view:
            take = min(CHUNK_SIZE - self.fill, len(view))
            self.block[self.fill : self.fill + take] = view[:take]
            self.fill += take
            view = view[take:]
            if self.fill == CHUNK_SIZE:
                self.write_block()
                after_block()

    def finish_sync(self, *, report: bool = True) -> None:
        """Wait for the background fsync in flight (if any) and report what it made durable."""
        future, self.sync_future = self.sync_future, None
        if future is None:
            return
        future.result()
        self.durable = max(self.durable, self.sync_offset)
        if report and self.report is not None:
            self.report(self.durable)

    def pace_checkpoints(self) -> None:
        """fsync in the background every 8 MiB (or 30 s), so the network never waits for the
        disk unless the disk falls a whole interval behind; each finished fsync is reported."""
        if self.sync_future is not None and self.sync_future.done():
            self.finish_sync()
        due = (
            self.offset - self.sync_offset >= CHECKPOINT_BYTES
            or time.monotonic() - self.last_checkpoint_at >= CHECKPOINT_SECONDS
        )
        if not due:
            return
        self.finish_sync()
        self.sync_offset = self.offset
        self.last_checkpoint_at = time.monotonic()
        self.sync_future = self.syncer.submit(os.fsync, self.handle.fileno())

    def make_durable(self) -> None:
        """fsync everything written so far, now, and report it."""
        self.write_block()
        self.finish_sync(report=False)
        os.fsync(self.handle.fileno())
        self.durable = self.sync_offset = self.offset
        self.last_checkpoint_at = time.monotonic()
        if self.report is not None:
            self.report(self.durable)

    def disk_full(self, job_id: str, expected: int | None) -> TemporaryFailure:
        """Keep the partial file cut back to its last fsynced checkpoint (resumable, and the
        unsynced tail's space freed); the error says where, how much is free and needed."""
        self.fill = 0
        kept = f"the partial download of the bundle of job {job_id} is kept"
        try:
            with contextlib.suppress(Exception):
                self.finish_sync(report=False)
            self.handle.truncate(self.durable)
            os.fsync(self.handle.fileno())
        except OSError:
            kept = f"the partial download of job {job_id} may end in unsynced bytes"
        needed = expected - self.durable if expected is not None else None
        return disk_full(
            self.dest.parent,
            needed,
            f"{kept} ({self.durable} bytes) and the next run resumes it",
        )
