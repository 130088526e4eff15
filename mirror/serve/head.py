"""Reading a request head against a deadline, under `http.server`'s own parser.

A socket timeout bounds each `recv`, not a request: a client that sends one byte just
under `serve.idle_timeout` apart would hold its connection for ever. `HeadReader` is the
raw stream under the handler's buffered `rfile`: while a head is being read (`start`) each
`recv` waits at most until the head's deadline, and one that would wait past it raises
TimeoutError, as the socket's own timeout does; between heads (`stop`) the idle timeout
alone applies, and it is the socket's timeout again for the sends that follow.

`problem` is what RFC 9112 makes a 400 that `http.server`'s lenient parser lets through:
it reads what that parser (the standard library's email parser) reports, its defects and
the values it kept, rather than parsing the head a second time. `http09` spots a request
line without a version, which the parser would answer only after waiting for headers an
HTTP/0.9 client never sends.
"""

from __future__ import annotations

import io
import socket
import time
from email.message import Message


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


def http09(request_line: bytes) -> bool:
    """Whether a request line is HTTP/0.9's `METHOD TARGET` (no version)."""
    return len(request_line.split()) == 2


def problem(version: str, headers: Message) -> str | None:
    """Why a parsed head is a bad request under RFC 9112, or None: a line that is no
    `name: value` (a space in or before the colon; the parser stops reading headers there
    and would ignore the rest), a folded line (obs-fold, section 5.2), no Host on HTTP/1.1
    or more than one (section 3.2)."""
    if headers.defects:
        return "a header line is not NAME: VALUE (RFC 9112 section 5)"
    if any("\n" in value for value in headers.values()):
        return "a header line starts with white space (obs-fold, RFC 9112 section 5.2)"
    hosts = len(headers.get_all("host") or [])
    if hosts > 1:
        return "more than one Host header (RFC 9112 section 3.2)"
    if hosts == 0 and version == "HTTP/1.1":
        return "no Host header in an HTTP/1.1 request (RFC 9112 section 3.2)"
    return None
