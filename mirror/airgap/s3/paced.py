"""A streamed object body whose every piece must come within the deadline, not only each
socket read of it: a body that stalls ends, one that keeps coming (however slowly, a piece
per deadline) is read to its end.

The S3 client's read timeout bounds each socket read; a store that sends one byte within
every read timeout would hold a reader of a body for ever. `Paced` reads a stream in a
thread of its own and gives up when its next piece has not come within `seconds`
(`target.deadline`, mirror.airgap.s3.client): the one owner of how long a body may stall.

Promises:
- A stall is a `BodyStalled` (a TemporaryFailure, exit 75) whose one line names what was
  read (the bucket and key, never a credential) and says `target.deadline` sets the wait.
  A body whose socket read timed out (`target.read_timeout`) or whose connection ended
  mid-way is the same one line (`body_cut`), never "cannot reach the object store": the
  store was reached, and stopped sending.
- Memory stays bounded: at most two pieces wait between the thread and the reader.
- The thread ends, and the stream is closed (by the thread, which alone reads it), once the
  reader stops early, is given up or the stream ends: `abort` (an S3 body's socket shut
  down) wakes it from a read that a trickle would keep alive. A stream never iterated is
  never read; `close()` closes it.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import botocore.exceptions

from mirror.errors import TemporaryFailure
from mirror.units import format_duration

DEPTH = 2
"""Pieces that may wait between the reading thread and the reader."""


class BodyStalled(TemporaryFailure):
    """The object store sent no more of a body within the deadline."""


BODY_CUT = (
    botocore.exceptions.ReadTimeoutError,
    botocore.exceptions.ResponseStreamingError,
    botocore.exceptions.IncompleteReadError,
)
"""What botocore raises when a body it was reading stops: a read timed out, the
connection ended, fewer bytes than its Content-Length."""


def body_cut(exc: Exception, what: str) -> BodyStalled:
    """The one line for a body of `what` that stopped mid-way (`exc`, one of BODY_CUT)."""
    if isinstance(exc, botocore.exceptions.ReadTimeoutError):
        return BodyStalled(
            f"the object store stopped sending {what} part-way (no byte within the read "
            "timeout); target.read_timeout sets how long to wait"
        )
    return BodyStalled(f"the object store cut {what} short: the connection ended mid-way")


class Paced(Iterator[bytes]):
    """`pieces`, read in a thread of its own (started at the first `next`); BodyStalled when
    the next piece has not come within `seconds` (the first within `seconds + first`: the
    request that opens the body is bounded by its own deadline). `what` names the object."""

    def __init__(
        self,
        pieces: Iterable[bytes],
        seconds: float,
        what: str,
        *,
        first: float = 0.0,
        abort: Callable[[], None] | None = None,
    ) -> None:
        self.seconds = seconds
        self.what = what
        self._pieces = pieces
        self._abort = abort
        self._wait = seconds + first
        self._box: queue.Queue[tuple[bytes | None, BaseException | None]] = queue.Queue(DEPTH)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._ended = False

    def __next__(self) -> bytes:
        if self._ended:
            raise StopIteration
        if self._thread is None:
            self._thread = threading.Thread(target=self._pump, name="s3-body", daemon=True)
            self._thread.start()
        try:
            chunk, error = self._box.get(timeout=self._wait)
        except queue.Empty:
            self.close()
            raise BodyStalled(
                f"the object store sent no more of {self.what} for "
                f"{format_duration(self.seconds)}; target.deadline sets how long to wait"
            ) from None
        self._wait = self.seconds
        if error is not None or chunk is None:
            self._ended = True  # the thread has closed the stream and ends
            if error is not None:
                raise error
            raise StopIteration
        return chunk

    def close(self) -> None:
        """Stop reading: `abort` wakes the thread from a read that trickles on, and the thread
        closes the stream at its next piece (or now, when it never started)."""
        if self._ended:
            return
        self._ended = True
        self._stop.set()
        if self._thread is None:
            close_stream(self._pieces)
        elif self._abort is not None:
            self._abort()

    def __del__(self) -> None:
        self.close()

    def _pump(self) -> None:
        """Move the pieces into the box, then (None, None) or (None, the error); until
        stopped. Closes the stream."""
        try:
            for chunk in self._pieces:
                if not self._offer((chunk, None)):
                    return
            self._offer((None, None))
        except BaseException as exc:  # handed to the reader, which raises it
            self._offer((None, exc))
        finally:
            close_stream(self._pieces)

    def _offer(self, item: tuple[bytes | None, BaseException | None]) -> bool:
        """Put `item` in the box unless stopped first (False then)."""
        while not self._stop.is_set():
            with contextlib.suppress(queue.Full):
                self._box.put(item, timeout=0.5)
                return True
        return False


def paced(pieces: Iterable[bytes], seconds: float, what: str) -> Iterator[bytes]:
    """`pieces` bounded as `Paced` says; a stream already paced (an `ObjectStore`'s, by
    `target.deadline`) as it is, so no body is read through two threads."""
    if isinstance(pieces, Paced):
        return pieces
    return Paced(pieces, seconds, what)


def close_stream(pieces: Any) -> None:
    """Close `pieces` when it can be closed (a generator, a `Paced`, a body)."""
    close = getattr(pieces, "close", None)
    if close is not None:
        close()
