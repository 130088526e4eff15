"""A bundle's body read from the connection's socket straight into the download's block.

httpx hands a body over in 64 KiB pieces, each copied three times on its way through h11
and httpcore, with a Python round trip per piece: about three times curl's CPU per byte.
A bundle is one long HTTP/1.1 body of known length, so once the response head is parsed
(by httpx, as for every answer) the rest is read with `recv_into` into the block the
partial file writes and hashes from, as curl does.

Promises:

- used only where the bytes on the socket are the body itself: HTTP/1.x, a
  `Content-Length`, no `Transfer-Encoding`, and the connection's own socket (plain, or TLS
  straight to the host); anything else (a tunnel inside TLS, HTTP/2, a body of unknown
  length, a test transport) returns None and the caller reads `iter_raw` as before;
- the bytes h11 already holds are taken first (`first`): h11 hands over everything it
  buffered as one piece, so the socket then holds exactly the rest of the body;
- never more than `Content-Length` bytes are read, so nothing of another answer is taken;
- failures are httpx's: a timeout is `httpx.ReadTimeout`, a socket error `httpx.ReadError`,
  a body that ends early `httpx.RemoteProtocolError`, as `iter_raw` would raise them;
- the response is closed by its owner as before: a body not read to its end closes the
  connection (httpcore never reuses it).
"""

from __future__ import annotations

import socket
import ssl
from collections.abc import Iterator

import httpx

_HTTP1 = frozenset({"HTTP/1.1", "HTTP/1.0"})


class SocketBody:
    """The rest of one response's body, read from its socket; `first` is what h11 held."""

    def __init__(self, response: httpx.Response, sock: socket.socket, length: int) -> None:
        self.request = response.request
        # Kept while the body is read: dropping the generator would close the connection.
        self._pieces: Iterator[bytes] = response.iter_raw()
        self.first = next(self._pieces, b"")
        self.left = length - len(self.first)
        self.sock = sock
        timeouts = response.request.extensions.get("timeout", {})
        sock.settimeout(timeouts.get("read"))

    @classmethod
    def of(cls, response: httpx.Response) -> SocketBody | None:
        """The body as a socket read, or None when only `iter_raw` can read it."""
        length = response.headers.get("Content-Length", "")
        if (
            response.http_version not in _HTTP1
            or "Transfer-Encoding" in response.headers
            or not length.isdigit()
        ):
            return None
        sock = _own_socket(response)
        return cls(response, sock, int(length)) if sock is not None else None

    def readinto(self, view: memoryview) -> int:
        """Receive up to len(view) bytes of the body into `view`; 0 once it is all read."""
        want = min(len(view), self.left)
        if want <= 0:
            return 0
        try:
            got = self.sock.recv_into(view, want)
        except TimeoutError as exc:
            raise httpx.ReadTimeout(str(exc) or "timed out", request=self.request) from exc
        except OSError as exc:
            raise httpx.ReadError(str(exc) or type(exc).__name__, request=self.request) from exc
        if got == 0:
            raise httpx.RemoteProtocolError(
                f"peer closed connection without sending complete message body "
                f"({self.left} bytes missing)",
                request=self.request,
            )
        self.left -= got
        return got


def _own_socket(response: httpx.Response) -> socket.socket | None:
    """The socket the body travels on, when its bytes are the body's (plain, or TLS directly
    on it); None for anything else, such as TLS inside a proxy's TLS tunnel."""
    stream = response.extensions.get("network_stream")
    if stream is None:
        return None
    sock = stream.get_extra_info("socket")
    tls = stream.get_extra_info("ssl_object")
    if not isinstance(sock, socket.socket):
        return None
    if tls is None:
        return None if isinstance(sock, ssl.SSLSocket) else sock
    if isinstance(sock, ssl.SSLSocket) and getattr(sock, "_sslobj", None) is tls:
        return sock
    return None
