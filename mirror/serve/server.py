"""The socket edge of `mirror serve`: the standard library's HTTP/1.1 server, one thread per
connection, bundles sent from the cache with `sendfile`.

Why this server (measured, bench/RESULTS.md "`mirror serve`: the HTTP server, chosen by
measurement"): with 50 clients fetching a 256 MiB file it used less memory (21 MiB peak
against aiohttp's 38 MiB) and less CPU (2.0-2.5 s against 2.6-2.8 s for 12.5 GiB) than
aiohttp's `FileResponse` (which also sends with sendfile), and its per-socket timeout cuts a
stalled client after `serve.idle_timeout`, where aiohttp kept one connected for as long as
it was measured (100 s; it has no send timeout). It adds no dependency. Requests are
parsed by `http.server` (no parser of ours); this module only routes and answers.

Promises: every response carries Content-Length; every answer that is not a bundle is one
line of text; a bundle is sent only from a verified cache file (mirror.serve.cache) after
its plan (mirror.serve.ranges); a client that takes or sends nothing for
`serve.idle_timeout` is cut, in its own thread, so it never holds up another; a request
whose line and headers are not all in within `serve.header_timeout` of its first byte is
answered 408 and cut (mirror.serve.head), so trickled bytes hold no slot for long; more than
`serve.max_clients` connections at once are answered 503, but `/healthz` and `/readyz` are
answered in slots of their own (mirror.serve.connections); a request line, target or header
section longer than the limits is 400; a number in a header is read with a bound
(mirror.serve.ranges); an unexpected error is a 500 line and a logged error, never a
connection closed without an answer. While draining (SIGTERM) every response closes its
connection. One log line per response, refusals included (mirror.serve.access).
"""

from __future__ import annotations

import base64
import contextlib
import io
import logging
import os
import socket
import threading
import time
from email.message import Message
from http.server import BaseHTTPRequestHandler
from typing import IO, Any

from mirror.airgap.layout import SERVER_NAME, VERSION_HEADER
from mirror.errors import IntegrityError, MirrorError
from mirror.httpserver import QuietHTTPServer
from mirror.serve import ranges
from mirror.serve.access import log_response, shown
from mirror.serve.cache import Entry, fingerprint
from mirror.serve.connections import PROBE_PAGES, Connections, Slot
from mirror.serve.head import HeadReader, http09, problem
from mirror.serve.metrics import CONTENT_TYPE
from mirror.serve.pointers import Listed
from mirror.serve.routes import CONTENT_TYPES, BundleRoute, Page, Refusal, bundle_path, parse_target
from mirror.serve.service import Service
from mirror.serve.status import render_status
from mirror.versions import VersionRef

log = logging.getLogger(__name__)

ALLOW = "GET, HEAD"
MAX_LINE = 8192
MAX_HEADERS = 16384
ERROR_LINE = 200
IMMUTABLE = "public, max-age=31536000, immutable"
PLAIN = "text/plain; charset=utf-8"
BUSY_LINE = "too many clients; try again soon"
BUSY = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n"
    b"Content-Length: 33\r\nConnection: close\r\nRetry-After: 5\r\n\r\n"
    + BUSY_LINE.encode()
    + b"\n"
)


class ServeServer(QuietHTTPServer):
    """The listener: a thread per connection in a slot (mirror.serve.connections); a
    connection with no slot is answered 503 at once, logged and counted."""

    request_queue_size = 128

    def __init__(self, address: tuple[str, int], service: Service) -> None:
        self.service = service
        self.connections = Connections(service.settings.max_clients, service.draining)
        settings = service.settings
        quick = min(settings.idle_timeout, settings.header_timeout)
        self.handlers = {
            Slot.CLIENT: type("Handler", (Handler,), {"timeout": settings.idle_timeout}),
            Slot.PROBE: type("ProbeHandler", (Handler,), {"timeout": quick, "probe_only": True}),
        }
        super().__init__(address, self.handlers[Slot.CLIENT])

    def process_request(self, request: Any, client_address: Any) -> None:
        slot = self.connections.admit(request)
        if slot is None:
            self._refuse(request, client_address)
            return
        thread = threading.Thread(
            target=self._serve, args=(request, client_address, slot), daemon=True
        )
        thread.start()

    def _serve(self, request: Any, client_address: Any, slot: Slot) -> None:
        """Handle one connection in `slot`; the slot is free before the connection is
        closed, so a client that has read its answer to the end can take it at once."""
        try:
            self.handlers[slot](request, client_address, self)
        except Exception:
            self.handle_error(request, client_address)
        finally:
            self.connections.release(request)
            self.shutdown_request(request)

    def _refuse(self, request: Any, client_address: Any) -> None:
        """No slot: 503 without reading the request, one access line, counted."""
        started, sent = time.monotonic(), 0
        with contextlib.suppress(OSError):
            request.settimeout(1.0)
            request.sendall(BUSY)
            sent = len(BUSY_LINE) + 1
        log_response(self.service, (client_address[0], "-", "-"), 503, sent, started)
        self.shutdown_request(request)


class Handler(BaseHTTPRequestHandler):
    """One connection: requests read by http.server, answered here (module docstring)."""

    protocol_version = "HTTP/1.1"
    server_version = SERVER_NAME
    sys_version = ""
    server: ServeServer
    probe_only = False
    """In a probe slot: only /healthz and /readyz are answered, then the connection closes."""

    def setup(self) -> None:
        self.started = time.monotonic()
        super().setup()
        self.reader = HeadReader(self.connection, self.timeout or None)
        self.buffered = io.BufferedReader(self.reader)
        self.rfile = self.buffered

    @property
    def service(self) -> Service:
        return self.server.service

    def handle_one_request(self) -> None:
        self.command, self.path, self.request_version, self.requestline = "", "", "HTTP/1.1", ""
        self.responded = False
        try:
            if self._head():
                self._answer()
                self.wfile.flush()
        except TimeoutError:
            self._timed_out()
        except ConnectionError as exc:
            log.debug("%s went away: %s", self.client_address[0], exc)
            self.close_connection = True
        except Exception:
            self._failed()
        finally:
            self.server.connections.busy(self.connection, False)

    def _head(self) -> bool:
        """Read a request line and its headers (http.server parses them) within
        serve.header_timeout of the first byte; False when there is nothing to answer."""
        if not self.buffered.peek(1):  # the client closed (or the drain did)
            self.close_connection = True
            return False
        self.server.connections.busy(self.connection, True)
        self.started = time.monotonic()
        self.reader.start(self.service.settings.header_timeout)
        self.raw_requestline = self.rfile.readline(MAX_LINE + 1)
        if len(self.raw_requestline) > MAX_LINE:
            self.send_error(400, "request line too long")
            return False
        if not self.raw_requestline.endswith(b"\n"):
            self.close_connection = True  # the client closed half-way through a line
            return False
        if http09(self.raw_requestline):  # answered now: no headers will follow
            self.send_error(400, "HTTP/0.9 requests are not served")
            return False
        parsed = self.parse_request()
        self.reader.stop()
        return parsed

    def _timed_out(self) -> None:
        self.close_connection = True
        if self.reader.deadline is None or self.responded:
            log.debug("closing %s: idle for %ss", self.client_address[0], self.timeout)
            return
        seconds = self.service.settings.header_timeout
        log.info("cut %s: no whole request head in %gs", self.client_address[0], seconds)
        self.send_error(408, f"request line and headers not received within {seconds:g}s")

    def _failed(self) -> None:
        """An error of ours: logged with its traceback, answered 500 if nothing was sent."""
        self.close_connection = True
        log.exception("answering %s %s failed", self.command or "-", shown(self.path))
        if not self.responded:
            with contextlib.suppress(OSError):
                self._plain(500, "internal error; the server's log says more")

    def version_string(self) -> str:
        return self.server_version  # no trailing space for an empty sys_version

    def send_response(self, code: int, message: str | None = None) -> None:
        self.responded = True
        super().send_response(code, message)

    def end_headers(self) -> None:
        if self.server.connections.draining.is_set() and not self.close_connection:
            self.send_header("Connection", "close")  # stopping: no next request here
        super().end_headers()

    def _answer(self) -> None:
        route = parse_target(self.path)
        if self.probe_only:
            self.close_connection = True
            if not (isinstance(route, Page) and route.name in PROBE_PAGES):
                return self._plain(503, BUSY_LINE, {"Retry-After": "5"})
        refused = refusal(self.command, self.request_version, self.headers)
        if refused is not None or has_body(self.headers):
            self.close_connection = True  # refused, or a body never read: the connection ends
        if refused is not None:
            return self._plain(*refused)
        if isinstance(route, Refusal):
            return self._plain(route.status, route.reason)
        if isinstance(route, Page):
            return self._body(*page(self.service, route.name))
        return self._bundle(route)

    def _plain(
        self,
        status: int,
        line: str,
        headers: dict[str, str] | None = None,
        listed: Listed | None = None,
    ) -> None:
        self._body(status, plain(line), PLAIN, headers, listed)

    def _body(
        self,
        status: int,
        body: bytes,
        kind: str,
        headers: dict[str, str] | None = None,
        listed: Listed | None = None,
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")  # a body may echo the path
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        sent = 0
        if self.command != "HEAD":
            self.wfile.write(body)
            sent = len(body)
        self._finish(status, sent, listed)

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """http.server's refusals (a malformed request line, headers too long or too many,
        an unsupported version) as one line; the limits' own codes (414, 431) are 400."""
        self.reader.stop()
        self.close_connection = True
        if self.request_version in ("", "HTTP/0.9"):  # answered with a status line all the same
            self.request_version = "HTTP/1.1"
        status = 400 if code in (414, 431) else code
        self._plain(status, (message or "bad request")[:ERROR_LINE])

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        return None  # one line per response is _finish's

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s: " + format, self.client_address[0], *args)

    # ---- bundles ---------------------------------------------------------------------------

    def _bundle(self, route: BundleRoute, again: bool = True) -> None:
        found = self.service.resolve(route)
        if isinstance(found, Refusal):
            return self._plain(found.status, found.reason, found.headers)
        entry = self.service.cache.get(found.ref.sha256)
        hit = entry is not None and entry.verified
        try:
            entry = self.service.supply.ensure(found)
        except IntegrityError as exc:
            return self._plain(502, f"refused {exc.message}", listed=found)
        except MirrorError as exc:
            return self._plain(503, exc.message, {"Retry-After": "10"})
        with self.service.cache.open_verified(found.ref.sha256) as handle:
            if handle is not None:
                if hit:
                    self.service.metrics.hits.inc()
                return self._send(route, found, entry, handle)
        if again:  # changed since it was verified: dropped; fill it again once
            self.service.metrics.dropped.inc()
            return self._bundle(route, again=False)
        return self._plain(
            503,
            f"version {found.ref.label} of {found.ref.domain} is not "
            "available from the cache; ask again",
            {"Retry-After": "10"},
        )

    def _send(self, route: BundleRoute, listed: Listed, entry: Entry, handle: IO[bytes]) -> None:
        ref = listed.ref
        etag = f'"{ref.sha256}"'
        plan = ranges.plan(self.command, conditions(self.headers), etag, ref.size)
        if plan.status in (200, 206) and self.command == "GET":
            self.service.served(listed, entry)
        self.send_response(plan.status)
        for name, value in bundle_headers(route, ref, etag, plan):
            self.send_header(name, value)
        self.end_headers()
        sent, cut = 0, False
        if self.command == "GET" and plan.length:
            sent, cut = self._sendfile(handle, plan.start, plan.length)
            self._changed_while_sent(entry, handle)
        self._finish(plan.status, sent, listed, cut=cut)
        if plan.status == 200 and sent == ref.size and not cut:  # the whole bundle, received
            self.service.first_served(listed, entry)

    def _changed_while_sent(self, entry: Entry, handle: IO[bytes]) -> None:
        """The file is checked when it is opened; one written to during the send (never by
        mirror: fills are renamed into place) reached this client. Say so, and drop it."""
        if fingerprint(os.fstat(handle.fileno())) == entry.fingerprint:
            return
        log.error(
            "the cached bundle %s was changed while it was sent to %s: that response may "
            "hold other bytes (its Repr-Digest tells the client); dropping the file",
            entry.sha256,
            self.client_address[0],
        )
        self.service.metrics.dropped.inc()
        self.service.cache.drop(entry.sha256, "it was changed while it was sent")

    def _sendfile(self, handle: IO[bytes], start: int, length: int) -> tuple[int, bool]:
        """Send `length` bytes of the file from `start`: (bytes sent, whether the client was
        cut). A stalled client raises TimeoutError in socket.sendfile after the idle timeout
        (it waits on the socket's own timeout); one that went away, a ConnectionError."""
        try:
            return self.connection.sendfile(handle, start, length), False
        except (TimeoutError, ConnectionError) as exc:
            self.close_connection = True
            if isinstance(exc, TimeoutError):
                self.service.metrics.cut.inc()
                log.info("cut %s: took nothing for %ss", self.client_address[0], self.timeout)
            elif self.server.connections.draining.is_set():
                log.info("cut %s: still sending at the drain deadline", self.client_address[0])
            return max(0, handle.tell() - start), True

    # ---- one line per response -------------------------------------------------------------

    def _finish(
        self, status: int, sent: int, listed: Listed | None = None, *, cut: bool = False
    ) -> None:
        request = (self.client_address[0], self.command, self.path)
        log_response(self.service, request, status, sent, self.started, listed, cut=cut)


def refusal(command: str, version: str, headers: Message) -> tuple[int, str, dict[str, str]] | None:
    """The error a request is answered with before its target is looked at, or None: a
    header section too long, a head RFC 9112 refuses (mirror.serve.head.problem), a method
    other than GET and HEAD. Each one ends the connection."""
    if len(str(headers)) > MAX_HEADERS:
        return 400, f"request header section longer than {MAX_HEADERS} bytes", {}
    bad = problem(version, headers)
    if bad is not None:
        return 400, bad, {}
    if command not in ("GET", "HEAD"):
        return 405, f"method {command} is not allowed", {"Allow": ALLOW}
    return None


def has_body(headers: Message) -> bool:
    """The request announces a body (never read here: the connection ends after it)."""
    return headers.get("content-length", "0") != "0" or "transfer-encoding" in headers


def plain(line: str) -> bytes:
    """A one-line text/plain body: the line with its whitespace runs made one space."""
    return (" ".join(line.split()) + "\n").encode()


def page(service: Service, name: str) -> tuple[int, bytes, str]:
    """(status, body, content type) of a page: the probes, the metrics, the status page."""
    if name == "healthz":
        return 200, plain("ok"), PLAIN
    if name == "readyz":
        why = service.not_ready()
        return (200, plain("ready"), PLAIN) if why is None else (503, plain(why), PLAIN)
    if name == "metrics":
        return 200, service.metrics.exposition(), CONTENT_TYPE
    return 200, render_status(service).encode(), "text/html; charset=utf-8"


def bundle_headers(
    route: BundleRoute, ref: VersionRef, etag: str, plan: ranges.Plan
) -> list[tuple[str, str]]:
    """The headers of a bundle's response: what it is (ETag, Repr-Digest, its version),
    how long it may be cached (a pinned link: for good), and the range sent."""
    digest = base64.b64encode(bytes.fromhex(ref.sha256)).decode()
    found = [
        ("ETag", etag),
        ("Repr-Digest", f"sha-256=:{digest}:"),
        (VERSION_HEADER, str(ref.label)),
        ("Cache-Control", IMMUTABLE if route.pinned else "no-cache"),
    ]
    if not route.pinned:
        found.append(("Content-Location", bundle_path(ref.domain, ref.label, ref.format)))
    found.append(("Accept-Ranges", "bytes"))
    if plan.content_range:
        found.append(("Content-Range", plan.content_range))
    if plan.status != 304:
        found.append(("Content-Type", CONTENT_TYPES.get(ref.format, "application/octet-stream")))
        found.append(("Content-Length", str(plan.length)))
    return found


def conditions(headers: Message) -> dict[str, str]:
    """The request's conditional and range headers, each as one value (ranges.plan)."""
    wanted = ("if-none-match", "range", "if-range")
    return {
        name: ", ".join(headers.get_all(name) or [])
        for name in wanted
        if headers.get(name) is not None
    }


def listen(address: str, service: Service) -> ServeServer:
    """The server bound to `address` (HOST:PORT; `[::1]:8080` for IPv6)."""
    host, _, port = address.rpartition(":")
    host = host.strip("[]")
    server_class = ServeServer6 if ":" in host else ServeServer
    return server_class((host, int(port)), service)


class ServeServer6(ServeServer):
    address_family = socket.AF_INET6
