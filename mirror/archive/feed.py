"""The inspection run on a second thread over an archive's bytes as a download writes them."""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import io
import queue
import threading
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, cast

from mirror.archive.check import ArchiveReport, inspect_archive, inspect_stream
from mirror.archive.formats import format_of
from mirror.archive.members import FileSink
from mirror.archive.paths import ArchiveLimits


class ArchiveFeed:
    """The inspection of `inspect_archive`, run on a second thread over bytes as they arrive.

    A download hands each block to `feed` as it appends it to `path`; a thread runs the
    very same checks and tree hash over them (gunzip, tar parsing and hashing release
    the GIL, so they use the second core), and `result` waits for the last block and
    gives the report or raises the same `IntegrityError` as `inspect_archive(path)`.
    Promises:

    - memory is bounded: at most `FEED_DEPTH` blocks wait between the two threads;
      `feed` blocks while they are full (the download never runs further ahead);
    - `restart()` forgets every byte fed (a download that starts over from zero) and
      `close()` abandons the inspection; neither leaves a thread behind;
    - `archive_size` (the announced size) is what the compression-ratio guard divides
      by, as `inspect_archive` divides by the finished file's size; when the finished
      size differs, `result` inspects the finished file instead;
    - with `observe`, a sink it makes (afresh at every start) sees every checked member in
      the same pass, and is the report's `observed`;
    - a zip cannot be inspected as it streams (its central directory is at the end,
      and only the directory says which entries exist): the thread then only takes the
      blocks, and `result` runs `inspect_archive(path)` on the finished file (a second
      read, as for every format before); so does a `result` after `close`.
    """

    def __init__(
        self,
        path: Path,
        archive_size: int,
        limits: ArchiveLimits = ArchiveLimits(),
        observe: Callable[[], FileSink] | None = None,
    ):
        self.path = path
        self.archive_size = archive_size
        self.limits = limits
        self.observe = observe
        self.fed = 0
        self._start()

    def _start(self) -> None:
        self.fed = 0
        self._blocks: queue.Queue[bytes | _Signal] = queue.Queue(maxsize=FEED_DEPTH)
        self._outcome: ArchiveReport | BaseException | None = None
        self._observer = self.observe() if self.observe is not None else None
        self._thread = threading.Thread(
            target=self._consume, name="mirror-archive-feed", daemon=True
        )
        self._thread.start()

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        """Hand over the next bytes of the archive (copied: the caller may reuse its buffer)."""
        if data:
            self.fed += len(data)
            self._blocks.put(bytes(data))

    def restart(self) -> None:
        """Forget every byte fed so far: the next byte fed is the archive's first."""
        self.close()
        self._start()

    def close(self) -> None:
        """Abandon the inspection and end its thread."""
        if self._thread.is_alive():
            self._blocks.put(_Signal.ABANDON)
            self._thread.join()

    def result(self, size: int) -> ArchiveReport:
        """The report of the whole archive (`size` bytes fed); raises what the check found."""
        if self._thread.is_alive():
            self._blocks.put(_Signal.END)
            self._thread.join()
        outcome = self._outcome
        if size != self.fed or size != self.archive_size or outcome is None:
            return inspect_archive(self.path, self.limits, self.observe)
        if isinstance(outcome, BaseException):
            raise outcome
        return dataclasses.replace(outcome, observed=self._observer)

    def _consume(self) -> None:
        stream = _BlockStream(self._blocks)
        try:
            head = stream.peek(512)
            fmt = format_of(head, self.path.name)
            if fmt != "zip":  # a zip's blocks are only taken (drained below): never a wait
                self._outcome = inspect_stream(
                    self.path,
                    fmt,
                    self.archive_size,
                    lambda: cast(IO[bytes], stream),
                    self.limits,
                    self._observer,
                )
        except _Abandoned:
            return
        except BaseException as exc:
            self._outcome = exc
        with contextlib.suppress(_Abandoned):
            stream.drain()


FEED_DEPTH = 4


class _Signal(enum.Enum):
    END = "the last byte was fed"
    ABANDON = "the inspection is abandoned"


class _Abandoned(BaseException):
    """Unwinds the inspection thread through the readers (never caught by their handlers)."""


class _BlockStream(io.RawIOBase):
    """The inspection thread's end of an ArchiveFeed: the blocks fed, read as one stream."""

    def __init__(self, blocks: queue.Queue[bytes | _Signal]) -> None:
        super().__init__()
        self.blocks = blocks
        self.current = memoryview(b"")
        self.ended = False

    def readable(self) -> bool:
        return True

    def _next_block(self) -> bool:
        while not self.current:
            if self.ended:
                return False
            block = self.blocks.get()
            if block is _Signal.ABANDON:
                raise _Abandoned
            if block is _Signal.END:
                self.ended = True
                return False
            self.current = memoryview(block)
        return True

    def peek(self, size: int) -> bytes:
        """The first `size` bytes (fewer at the end), left to be read again."""
        head = b""
        while len(head) < size and self._next_block():
            head += bytes(self.current)
            self.current = memoryview(b"")
        self.current = memoryview(head)
        return head[:size]

    def read(self, size: int | None = -1, /) -> bytes:
        if not self._next_block():
            return b""
        if size is None or size < 0:
            size = len(self.current)
        piece = self.current[:size]
        self.current = self.current[len(piece) :]
        return bytes(piece)

    def readinto(self, buffer: Any) -> int:
        piece = self.read(len(buffer))
        buffer[: len(piece)] = piece
        return len(piece)

    def drain(self) -> None:
        """Take the remaining blocks unread, so that the feeding thread never waits."""
        self.current = memoryview(b"")
        while self._next_block():
            self.current = memoryview(b"")
