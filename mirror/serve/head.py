"""Reading a request head against a deadline, under `http.server`'s own parser.

A socket timeout bounds each `recv`, not a request: a client that sends one byte just
under `serve.idle_timeout` apart would hold its connection for ever. `HeadReader` is the
raw stream under the handler's buffered `rfile`: while a head is being read (`start`) each
`recv` waits at most until the head's deadline, and one that would wait past it raises
TimeoutError, as the socket's own timeout does; between heads (`stop`) the idle timeout
alone applies, and it is the socket's timeout again for the sends that follow.
"""

from __future__ import annotations

import io
import socket
import time


class HeadReader(io.RawIOBase):
    """The connection's bytes, each read bounded by the idle timeout and the head's
    deadline (module docstring)."""

    def __init__(self, conn: socket.socket, idle: float | None) -> None:
        super().__init__()
        self.conn = conn
        self.idle = idle
        self.deadline: float | None = None

    def readable(self) -> bool:
        return True

    def start(self, seconds: float) -> None:
        """A head is being read: it must be whole within `seconds` from now."""
        self.deadline = time.monotonic() + seconds

    def stop(self) -> None:
        """The head is read: the idle timeout alone applies again, to reads and sends."""
        self.deadline = None
        self.conn.settimeout(self.idle)

    def readinto(self, buffer: memoryview | bytearray) -> int:  # type: ignore[override]
        wait = self.idle
        if self.deadline is not None:
            left = self.deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("request head not received in time")
            wait = left if wait is None else min(wait, left)
        self.conn.settimeout(wait)
        return self.conn.recv_into(buffer)
