"""A producer on a thread of its own, handing bytes to one reader through a bounded queue.

Promises:
- `Pipe(produce)` runs `produce(put)` on its own thread; `get` returns what it put, in
  order, then None at its end. An exception in the producer is raised by `get`.
- Memory is bounded: at most DEPTH pieces wait in the queue, each about PIECE bytes. Small
  writes are gathered into pieces of about PIECE (a splice writes many small pieces, and
  handing each over would wake the reader, and wait for the GIL, thousands of times); a
  write of PIECE bytes or more when nothing is gathered is handed over as it is, uncopied.
- `close` stops the producer at its next `put` and waits for its thread.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Callable

DEPTH = 1  # the 200,000-file rebuild peaked 65 MiB above its imports with 2 (goal 64)
PIECE = 1024 * 1024

Produce = Callable[[Callable[[bytes], None]], None]


class Pipe:
    """See the module: one producer thread, one reader, bounded."""

    def __init__(self, produce: Produce, *, name: str) -> None:
        self._queue: queue.Queue[bytes | BaseException | None] = queue.Queue(DEPTH)
        self._stop = threading.Event()
        self._pending = bytearray()
        self._thread = threading.Thread(target=self._run, args=(produce,), name=name, daemon=True)
        self._thread.start()

    def _gather(self, data: bytes) -> None:
        if not self._pending and len(data) >= PIECE and type(data) is bytes:
            self._put(data)
            return
        self._pending += data
        if len(self._pending) >= PIECE:
            self._hand_over()

    def _hand_over(self) -> None:
        if self._pending:
            piece = bytes(self._pending)
            self._pending.clear()
            self._put(piece)

    def _put(self, item: bytes | BaseException | None) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(queue.Full):
                self._queue.put(item, timeout=0.1)
                return
        raise _Stopped

    def _run(self, produce: Produce) -> None:
        try:
            produce(self._gather)
            self._hand_over()
        except _Stopped:
            return
        except BaseException as exc:  # handed to the reader, which raises it
            with contextlib.suppress(_Stopped):
                self._put(exc)
            return
        with contextlib.suppress(_Stopped):
            self._put(None)

    def get(self) -> bytes | None:
        item = self._queue.get()
        if isinstance(item, BaseException):
            raise item
        return item

    def close(self) -> None:
        self._stop.set()
        self._thread.join()


class _Stopped(Exception):
    """The reader closed the pipe: the producer stops."""
