"""Streaming sha256: memory never grows with the bytes hashed.

Promises: `stream_sha256` reads in CHUNK_SIZE pieces and copies to a writer in the
same pass; `BackgroundSha256` hashes on another thread behind a bounded queue (a
few chunks at most wait in memory), so a second digest costs no wall time on a
machine with a spare core.
"""

from __future__ import annotations

import hashlib
import queue
import threading
from collections.abc import Callable
from typing import Any

from mirror.fsutil import CHUNK_SIZE


def stream_sha256(
    reader: Any,
    on_progress: Callable[[int], None] | None,
    writer: Any = None,
    *,
    limit: int | None = None,
) -> tuple[str, int]:
    """(sha256, size) of everything `reader` yields (at most `limit` bytes when given), copied
    to `writer` when given."""
    digest = hashlib.sha256()
    size = 0
    while chunk := reader.read(CHUNK_SIZE if limit is None else min(CHUNK_SIZE, limit - size)):
        if writer is not None:
            writer.write(chunk)
        digest.update(chunk)
        size += len(chunk)
        if on_progress is not None:
            on_progress(len(chunk))
    return digest.hexdigest(), size


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
