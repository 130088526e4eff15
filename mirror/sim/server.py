"""The simulator's HTTP server: a real keep-alive HTTP/1.1 server on loopback.

`Simulator` is the public handle used by tests, `mirror sim serve`, the demo and benchmarks.
"""

from __future__ import annotations

import contextlib
import functools
import ipaddress
import logging
import shutil
import socket
import tempfile
import threading
import time
from email.utils import formatdate
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from mirror.httpserver import QuietHTTPServer
from mirror.sim.api import Reply, Request, SimApi, error_reply
from mirror.sim.config import Faults, SimConfig
from mirror.sim.links import s3_error_xml
from mirror.sim.ranges import UNSATISFIABLE, parse_range
from mirror.sim.site import CHUNK
from mirror.sim.stats import SimStats

log = logging.getLogger("mirror.sim")

MAX_BODY = 1024 * 1024
SEED_AGENT_JOBS = (("aj_pr", "pr"), ("aj_nochange", "no_changes"), ("aj_failed", "failed"))


class _Server(QuietHTTPServer):
    request_queue_size = 128
    api_url = ""

    def __init__(self, address: tuple[str, int], api: SimApi) -> None:
        self.api = api
        self.connections: set[socket.socket] = set()
        self.connections_lock = threading.Lock()
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        super().__init__(address, _Handler)

    def close_connections(self) -> None:
        with self.connections_lock:
            connections = list(self.connections)
        for conn in connections:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "mirror-sim"
    sys_version = ""
    timeout = 120
    server: _Server

    def setup(self) -> None:
        super().setup()
        with contextlib.suppress(OSError):
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with self.server.connections_lock:
            self.server.connections.add(self.connection)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            with self.server.connections_lock:
                self.server.connections.discard(self.connection)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s %s", self.address_string(), format % args)

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_HEAD(self) -> None:
        self._dispatch("HEAD")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_PUT(self) -> None:
        self._dispatch("PUT")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    def do_PATCH(self) -> None:
        self._dispatch("PATCH")

    def __getattr__(self, name: str) -> Any:
        """Any other method (OPTIONS, TRACE, FOO) is routed too, so it gets the API gateway's
        answer (405 with Allow and a JSON error) instead of the standard library's 501 page."""
        if name.startswith("do_"):
            return functools.partial(self._dispatch, name[3:])
        raise AttributeError(name)

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """Malformed requests (bad request line, headers too long) get a JSON error too."""
        self.close_connection = True
        try:
            phrase = HTTPStatus(code).phrase
        except ValueError:
            phrase = "Error"
        self._send(error_reply(code, message or phrase), head_only=self.command == "HEAD")

    # ---- plumbing ----------------------------------------------------------------------

    def _dispatch(self, method: str) -> None:
        api = self.server.api
        api.stats.count_request()
        body = self._read_body()
        if body is None:
            return
        split = urlsplit(self.path)
        try:
            if split.path.startswith("/_dl/"):
                self._download(method, split.path, split.query)
                return
            huge = api.faults.huge_body_bytes
            if huge > 0 and not split.path.startswith("/_sim/"):
                self._send_huge(api.faults.huge_body_status, huge)
                return
            request = Request(
                method=method,
                path=split.path,
                headers={k.lower(): v for k, v in self.headers.items()},
                body=body,
                base_url=self._base_url(),
                client_is_loopback=_is_loopback(self.client_address[0]),
            )
            reply = api.handle(request)
        except Exception:
            log.exception("simulator failed on %s %s", method, split.path)
            reply = error_reply(500, "Internal simulator error")
        self._send(reply, head_only=method == "HEAD")

    def _read_body(self) -> bytes | None:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            return self._read_chunked()
        length_text = self.headers.get("Content-Length")
        if not length_text:
            return b""
        try:
            length = int(length_text)
        except ValueError:
            self.close_connection = True
            self._send(error_reply(400, "Bad Content-Length"), head_only=False)
            return None
        if length > MAX_BODY:
            self.close_connection = True
            self._send(error_reply(413, "Request body too large"), head_only=False)
            return None
        return self.rfile.read(length)

    def _read_chunked(self) -> bytes | None:
        parts: list[bytes] = []
        total = 0
        while True:
            line = self.rfile.readline(1024)
            size = int(line.split(b";")[0].strip() or b"0", 16)
            if size == 0:
                while self.rfile.readline(1024) not in (b"\r\n", b"\n", b""):
                    pass
                return b"".join(parts)
            total += size
            if total > MAX_BODY:
                self.close_connection = True
                self._send(error_reply(413, "Request body too large"), head_only=False)
                return None
            parts.append(self.rfile.read(size))
            self.rfile.readline(1024)

    def _base_url(self) -> str:
        host = self.headers.get("Host")
        return f"http://{host}" if host else self.server.api_url

    def _send(self, reply: Reply, *, head_only: bool) -> None:
        self.send_response(reply.status)
        for name, value in reply.headers:
            self.send_header(name, value)
        self.send_header("Content-Type", reply.content_type)
        self.send_header("Content-Length", str(len(reply.body)))
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        if not head_only and reply.body:
            self.wfile.write(reply.body)

    def _send_huge(self, status: int, size: int) -> None:
        """A JSON object of exactly `size` bytes (when size allows), streamed from one buffer."""
        head = b'{"jobId": "se_huge", "status": "running", "padding": "'
        tail = b'"}'
        padding = max(size - len(head) - len(tail), 0)
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(head) + padding + len(tail)))
        self.end_headers()
        block = b"x" * CHUNK
        try:
            self.wfile.write(head)
            while padding > 0:
                piece = min(padding, len(block))
                self.wfile.write(block[:piece] if piece < len(block) else block)
                padding -= piece
            self.wfile.write(tail)
        except OSError:
            self.close_connection = True

    def _s3_error(
        self,
        status: int,
        code: str,
        message: str,
        *,
        head_only: bool,
        extra: tuple[tuple[str, str], ...] = (),
        headers: list[tuple[str, str]] | None = None,
    ) -> None:
        self._send(
            Reply(status, s3_error_xml(code, message, extra), "application/xml", headers or []),
            head_only=head_only,
        )

    # ---- downloads ---------------------------------------------------------------------

    def _download(self, method: str, path: str, query: str) -> None:
        api = self.server.api
        head_only = method == "HEAD"
        if method not in ("GET", "HEAD"):
            self._s3_error(
                405,
                "MethodNotAllowed",
                "The specified method is not allowed against this resource.",
                head_only=False,
                headers=[("Allow", "GET, HEAD")],
            )
            return
        if "Authorization" in self.headers:
            self._s3_error(
                400,
                "InvalidArgument",
                "Only one auth mechanism allowed; only the X-Amz-Algorithm query parameter, "
                "Signature query string parameter or the Authorization header should be specified",
                head_only=head_only,
                extra=(("ArgumentName", "Authorization"),),
            )
            return
        check = api.links.check(path, query, time.time())
        if check.link is None:
            self._s3_error(
                check.status, check.code, check.message, head_only=head_only, extra=check.extra
            )
            return
        redirect = api.faults.redirect_downloads_to
        if redirect is not None:
            self._send(Reply(302, b"", "text/plain", [("Location", redirect)]), head_only=True)
            return
        job = api.jobs.get(check.link.job_id)
        range_header = self.headers.get("Range")
        if job is not None and range_header is not None and self._take_change():
            api.change_bundle(job)
        bundle = job.bundle if job is not None else None
        if job is None or bundle is None:
            self._s3_error(
                404, "NoSuchKey", "The specified key does not exist.", head_only=head_only
            )
            return
        size = bundle.size
        etag = f'"{bundle.sha256[:32]}"'
        last_modified = formatdate(bundle.mtime, usegmt=True)
        byte_range = None
        if range_header is not None and not api.faults.ignore_range:
            if_range = self.headers.get("If-Range")
            if (
                if_range is None
                or api.faults.ignore_if_range
                or if_range.strip() in (etag, last_modified)
            ):
                byte_range = parse_range(range_header, size)
        if byte_range is UNSATISFIABLE:
            api.stats.record_download(
                job_id=job.job_id,
                method=method,
                range_header=range_header,
                status=416,
                bytes_sent=0,
                complete=True,
            )
            self._s3_error(
                416,
                "InvalidRange",
                "The requested range is not satisfiable",
                head_only=head_only,
                extra=(("RangeRequested", range_header or ""), ("ActualObjectSize", str(size))),
                headers=[("Content-Range", f"bytes */{size}")],
            )
            return
        start, length = (byte_range.start, byte_range.length) if byte_range else (0, size)
        status = 206 if byte_range else 200
        self.send_response(status)
        self.send_header("Content-Type", "application/gzip")
        self.send_header("Content-Length", str(length))
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("ETag", etag)
        self.send_header("Last-Modified", last_modified)
        self.send_header("Content-Disposition", f'attachment; filename="{check.link.filename}"')
        if byte_range is not None:
            self.send_header("Content-Range", byte_range.content_range(size))
        self.end_headers()
        if head_only:
            api.stats.record_download(
                job_id=job.job_id,
                method=method,
                range_header=range_header,
                status=status,
                bytes_sent=0,
                complete=True,
            )
            return
        cut = self._take_cut(length)
        trickle = self._take_trickle()
        entry = api.stats.record_download(
            job_id=job.job_id, method=method, range_header=range_header, status=status
        )
        try:
            self._stream_file(
                bundle.path, start, length if cut is None else cut, length, entry, trickle
            )
        except OSError:
            self.close_connection = True
            api.stats.mark_download_incomplete(entry)
        if cut is not None:
            self.close_connection = True
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)

    def _take_cut(self, length: int) -> int | None:
        api = self.server.api
        faults = api.faults
        with api.fault_lock:
            cut = faults.cut_after_bytes
            if cut is None or faults.cuts_remaining <= 0 or cut >= length:
                return None
            faults.cuts_remaining -= 1
            return cut

    def _take_change(self) -> bool:
        api = self.server.api
        with api.fault_lock:
            if api.faults.change_object_on_range <= 0:
                return False
            api.faults.change_object_on_range -= 1
            return True

    def _take_trickle(self) -> int:
        """Bytes per second for this download (0: full speed)."""
        api = self.server.api
        with api.fault_lock:
            faults = api.faults
            if faults.trickle_bytes_per_second <= 0 or faults.trickles_remaining <= 0:
                return 0
            faults.trickles_remaining -= 1
            return faults.trickle_bytes_per_second

    def _stream_file(
        self,
        path: Path,
        start: int,
        limit: int,
        length: int,
        entry: dict[str, Any],
        trickle: int = 0,
    ) -> None:
        stats = self.server.api.stats
        sent = 0
        size = CHUNK if trickle <= 0 else max(1, trickle // 10)
        buffer = bytearray(min(size, max(limit, 1)))
        view = memoryview(buffer)
        with open(path, "rb") as source:
            source.seek(start)
            while sent < limit:
                count = source.readinto(view[: min(len(buffer), limit - sent)])
                if not count:
                    raise OSError(f"bundle {path.name} is shorter than expected")
                sent += count
                stats.add_download_bytes(entry, count, complete=sent == length)
                self.wfile.write(view[:count])
                if trickle > 0:
                    self.wfile.flush()
                    if self.server.api.cancel.wait(count / trickle):
                        raise OSError("the simulator is stopping")


def _is_loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address.split("%", 1)[0]).is_loopback
    except ValueError:
        return False


class Simulator:
    """The simulated vendor: admin API, presigned downloads and control endpoints on one port."""

    def __init__(
        self, config: SimConfig | None = None, *, host: str = "127.0.0.1", port: int = 0
    ) -> None:
        self.config = config if config is not None else SimConfig()
        self.faults = Faults()
        self.stats = SimStats()
        self._host = host
        self._port = port
        self._workdir: Path | None = None
        self._api: SimApi | None = None
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    # ---- lifecycle ---------------------------------------------------------------------

    def start(self) -> Simulator:
        """Bind, seed the demo agent jobs and serve in a background thread."""
        if self._server is not None:
            return self
        self._workdir = Path(tempfile.mkdtemp(prefix="mirror-sim-"))
        self._api = SimApi(self.config, self.faults, self.stats, self._workdir)
        try:
            self._server = _Server((self._host, self._port), self._api)
        except OSError:
            shutil.rmtree(self._workdir, ignore_errors=True)
            raise
        self._server.api_url = self.url
        for job_id, outcome in SEED_AGENT_JOBS:
            self._api.add_agent_job(outcome, 1.0, job_id)
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="mirror-sim",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving, drop open connections, cancel builds and remove the temp dir."""
        server, api, workdir = self._server, self._api, self._workdir
        if server is None or api is None:
            return
        api.cancel.set()
        server.shutdown()
        server.server_close()
        server.close_connections()
        api.join_builders(timeout=30)
        if self._thread is not None:
            self._thread.join(timeout=5)
        if workdir is not None:
            shutil.rmtree(workdir, ignore_errors=True)
        self._server = None
        self._thread = None

    def __enter__(self) -> Simulator:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- facts -------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """Base URL, e.g. http://127.0.0.1:8765 (the real port when started with port 0)."""
        if self._server is None:
            raise RuntimeError("the simulator is not started")
        host, port = self._server.server_address[:2]
        assert isinstance(host, str)
        shown = f"[{host}]" if ":" in host else host
        return f"http://{shown}:{port}"

    @property
    def key(self) -> str:
        return self.config.key

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("the simulator is not started")
        return int(self._server.server_address[1])

    @property
    def workdir(self) -> Path:
        """Where bundles are built (removed by stop())."""
        if self._workdir is None:
            raise RuntimeError("the simulator is not started")
        return self._workdir

    # ---- control -----------------------------------------------------------------------

    def _require_api(self) -> SimApi:
        if self._api is None:
            raise RuntimeError("the simulator is not started")
        return self._api

    def publish(self, domain: str) -> None:
        """Bump the domain's site revision: every page of its next export changes."""
        self._require_api().publish(domain)

    def add_agent_job(
        self, outcome: str = "pr", *, seconds: float = 0.5, job_id: str | None = None
    ) -> str:
        """A new agent job, `active` for `seconds`, then ending as `outcome`."""
        return self._require_api().add_agent_job(outcome, seconds, job_id)

    def set_run_seconds(self, job_id: str, seconds: float) -> None:
        """How long the job runs, counted from its start: a long value keeps it active (someone
        else's long export), a short one lets it finish on the next status it is asked."""
        self._require_api().jobs[job_id].run_seconds = seconds

    def bundle_sha256(self, job_id: str, timeout: float = 120.0) -> str:
        """sha256 of the job's archive bytes (waits for the build). KeyError for an unknown job,
        ValueError for a job without a bundle."""
        return str(self.bundle_info(job_id, timeout)["sha256"])

    def bundle_info(self, job_id: str, timeout: float = 120.0) -> dict[str, Any]:
        """sha256, size, path and page count of the job's archive (waits for the build)."""
        job = self._require_api().jobs[job_id]
        job.built.wait(timeout)
        if job.bundle is None:
            raise ValueError(f"export job {job_id} has no bundle")
        return {
            "sha256": job.bundle.sha256,
            "size": job.bundle.size,
            "path": job.bundle.path,
            "page_count": job.bundle.page_count,
        }

    def expire_links(self) -> None:
        """Every link issued so far answers 403 AccessDenied 'Request has expired' from now on."""
        self._require_api().links.expire_all()

    def set_faults(self, **changes: Any) -> None:
        """Change several faults at once, checked like POST /_sim/faults."""
        if self._api is None:
            self.faults.update(changes)
            return
        with self._api.fault_lock:
            self.faults.update(changes)
