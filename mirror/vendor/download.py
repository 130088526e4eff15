"""Download a bundle from its presigned link: streamed, hashed, resumable, re-requested.

Promises:

- memory stays constant: the body is read in 1 MiB chunks, each hashed and
  appended to the partial file in the same pass;
- an existing partial file is continued with `Range: bytes=N-` and `If-Range`
  carrying the first answer's strong ETag (else its Last-Modified), as RFC 9110
  says; the validators and the `Content-Range` total of every answer are compared
  with the first answer's (kept in `<partial>.validator`, so a later process
  compares too) and with the vendor's `sizeBytes`: on any difference, or when a
  partial file has no recorded validator, the download restarts from zero. Bytes
  of two objects never meet in one file;
- only http and https links and redirects are followed; any other scheme raises
  `LinkFailed` at once, as does a link whose attempts are spent, so the caller
  drops the link and asks the vendor for a fresh one next time;
- a transfer slower than `min_speed` bytes/s over `stall_time` seconds (curl's
  `--speed-limit`/`--speed-time`) is cut and resumed; such cuts count as tries
  that made no progress;
- a cut connection is resumed, an expired link is replaced through
  `refresh_link()`, 408/429/5xx are retried with backoff honouring
  `Retry-After`; all bounded by `max_attempts` tries in a row that made no progress;
  a link host that does not resolve is given up after `api.DNS_ATTEMPTS` tries, naming it;
- more bytes than the vendor announced is an `IntegrityError` at once;
- `checkpoint(bytes_durable, link)` is called only after an fsync, at least
  every 8 MiB (and every 30 s) and at the end, so a caller can persist progress;
- the presigned query string is a credential: it is never logged or put in an error.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import BinaryIO
from urllib.parse import urlsplit

import httpx

from mirror import links
from mirror.errors import AuthError, IntegrityError, Interrupted, NotFound, TemporaryFailure
from mirror.fsutil import (
    CHUNK_SIZE,
    VALIDATOR_SUFFIX,
    atomic_write_bytes,
    disk_full,
    is_disk_full,
    iter_file,
)
from mirror.links import is_expired_answer, s3_error, safe_url
from mirror.vendor.client import DNS_ATTEMPTS, BundleLink, name_resolution_error
from mirror.vendor.retry import Backoff, parse_retry_after

log = logging.getLogger(__name__)

CHECKPOINT_BYTES = 8 * 1024 * 1024
CHECKPOINT_SECONDS = 30.0
# A cut connection is usually back within a second; a busy storage host says Retry-After.
BACKOFF = Backoff(initial=0.5, maximum=30.0, jitter=0.5, retry_after_cap=300.0)
_ERROR_BODY_LIMIT = 64 * 1024
_CONTENT_RANGE = re.compile(r"^\s*bytes\s+(?:(\d+)-(\d+)|\*)/(\d+|\*)\s*$")
MAX_REDIRECTS = 10
DEFAULT_MIN_SPEED = 1024
DEFAULT_STALL_TIME = 30.0
FOLLOWED_SCHEMES = frozenset({"http", "https"})
_REDIRECTS = frozenset({301, 302, 303, 307, 308})


class LinkFailed(TemporaryFailure):
    """This link cannot deliver the bundle (a scheme other than http/https, or its attempts
    are spent): drop it; the next try asks the vendor for a fresh one (exit 75)."""


@dataclass(frozen=True)
class Validator:
    """What identifies the object behind a link: strong ETag, Last-Modified, complete length."""

    etag: str | None
    last_modified: str | None
    total: int | None

    @classmethod
    def of(cls, response: httpx.Response, total: int | None) -> Validator:
        return cls(response.headers.get("ETag"), response.headers.get("Last-Modified"), total)

    def if_range(self) -> str | None:
        """The If-Range value: a strong ETag, else the Last-Modified date (RFC 9110 13.1.5)."""
        if self.etag and not self.etag.startswith("W/"):
            return self.etag
        return self.last_modified

    def difference(self, answer: Validator) -> str | None:
        """Why `answer` may come from another object than this one; None when it matches."""
        if (self.etag or answer.etag) and self.etag != answer.etag:
            return f"ETag {self.etag} became {answer.etag}"
        if (self.last_modified or answer.last_modified) and (
            self.last_modified != answer.last_modified
        ):
            return f"Last-Modified {self.last_modified} became {answer.last_modified}"
        if self.total is not None and answer.total is not None and self.total != answer.total:
            return f"the object's length {self.total} became {answer.total}"
        return None


def validator_path(dest: Path) -> Path:
    """Where the validator of a partial file is kept, next to it."""
    return dest.with_name(dest.name + VALIDATOR_SUFFIX)


def load_validator(dest: Path) -> Validator | None:
    """The recorded validator of a partial file; None when absent or unreadable."""
    try:
        data = json.loads(validator_path(dest).read_text())
        return Validator(
            etag=data.get("etag"), last_modified=data.get("last_modified"), total=data.get("total")
        )
    except (OSError, ValueError, AttributeError, TypeError):
        return None


def save_validator(dest: Path, validator: Validator) -> None:
    """Record the validator durably before any byte of its object is written."""
    atomic_write_bytes(validator_path(dest), json.dumps(asdict(validator)).encode())


def followable(url: str) -> bool:
    """Only http and https links are fetched."""
    return urlsplit(url).scheme.lower() in FOLLOWED_SCHEMES


@dataclass(frozen=True)
class DownloadResult:
    """The whole file is at `path`; `sha256` covers all of its `size` bytes."""

    path: Path
    size: int
    sha256: str
    restarts: int
    resumes: int
    refreshes: int


def link_expired(link: BundleLink, now: datetime) -> bool:
    """True when the link's expiry (announced, else its signature's) has passed."""
    return links.link_expired(link.url, link.expires_at, now)


def parse_content_range(value: str | None) -> tuple[int | None, int | None]:
    """(first byte, complete length) from `bytes A-B/N` or `bytes */N`; None where unknown."""
    match = _CONTENT_RANGE.match(value or "")
    if match is None:
        return None, None
    first = int(match.group(1)) if match.group(1) is not None else None
    total = int(match.group(3)) if match.group(3) != "*" else None
    return first, total


class _Restart(Exception):
    """The server sent the whole body again or a range we did not ask for: start over."""


class _Retry(Exception):
    """A failure worth another try after `delay` seconds."""

    def __init__(
        self, reason: str, retry_after: float | None = None, *, slow: bool = False
    ) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retry_after = retry_after
        self.slow = slow


class _Refresh(Exception):
    """The link has expired: get a new one and continue."""


class _Download:
    """The mutable state of one download_bundle call."""

    def __init__(
        self,
        http: httpx.Client,
        link: BundleLink,
        dest: Path,
        *,
        refresh_link: Callable[[], BundleLink],
        expected_size: int | None,
        checkpoint: Callable[[int, BundleLink], None] | None,
        on_progress: Callable[[int, int | None], None] | None,
        cancel: threading.Event | None,
        max_attempts: int,
        sleep: Callable[[float], None],
        now: Callable[[], datetime],
        min_speed: int,
        stall_time: float,
    ) -> None:
        self.http = http
        self.link = link
        self.dest = dest
        self.refresh_link = refresh_link
        self.expected = link.size_bytes if link.size_bytes is not None else expected_size
        self.announced = self.expected
        self.checkpoint_cb = checkpoint
        self.on_progress = on_progress
        self.cancel = cancel
        self.max_attempts = max(1, max_attempts)
        self.sleep = sleep
        self.now = now
        self.min_speed = max(0, min_speed)
        self.stall_time = max(stall_time, 0.001)
        self.validator: Validator | None = None
        self.digest = hashlib.sha256()
        self.offset = 0
        self.durable = 0
        self.last_checkpoint_at = time.monotonic()
        self.restarts = 0
        self.resumes = 0
        self.refreshes = 0
        self.failures = 0
        self.refreshes_in_a_row = 0
        self.done = False
        self.block = bytearray(CHUNK_SIZE)
        self.fill = 0
        self.syncer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="mirror-fsync")
        self.sync_future: Future[None] | None = None
        self.sync_offset = 0

    # -- the partial file ------------------------------------------------------------

    def open_partial(self) -> BinaryIO:
        self.dest.parent.mkdir(parents=True, exist_ok=True)
        handle = open(self.dest, "ab", buffering=0)  # noqa: SIM115 (closed by run())
        size = handle.seek(0, os.SEEK_END)
        if self.expected is not None and size > self.expected:
            log.warning(
                "partial file %s holds %d bytes, more than the %d expected; starting over",
                self.dest.name,
                size,
                self.expected,
            )
            handle.truncate(0)
            size = 0
        self.validator = load_validator(self.dest) if size > 0 else None
        if size > 0 and self.validator is None:
            log.warning(
                "partial file %s has no recorded validator, so its bytes may belong to another "
                "object; starting over",
                self.dest.name,
            )
            handle.truncate(0)
            size = 0
        for chunk in iter_file(self.dest, 0, size):
            self.digest.update(chunk)
        self.offset = self.durable = self.sync_offset = size
        return handle

    def truncate(self, handle: BinaryIO) -> None:
        self.fill = 0
        with contextlib.suppress(OSError):
            self.finish_sync(report=False)
        handle.truncate(0)
        handle.seek(0)
        os.fsync(handle.fileno())
        self.digest = hashlib.sha256()
        self.offset = self.durable = self.sync_offset = 0
        self.validator = None
        self.expected = self.announced  # a length learnt from the server was that object's
        self.restarts += 1

    def write_block(self, handle: BinaryIO) -> None:
        """Append the buffered bytes to the file and the hash (one pass over them)."""
        if not self.fill:
            return
        view = memoryview(self.block)[: self.fill]
        written = 0
        while written < self.fill:
            written += handle.write(view[written:]) or 0
        self.digest.update(view)
        self.offset += self.fill
        self.fill = 0

    def finish_sync(self, *, report: bool = True) -> None:
        """Wait for the background fsync in flight (if any) and report what it made durable."""
        future, self.sync_future = self.sync_future, None
        if future is None:
            return
        future.result()
        self.durable = max(self.durable, self.sync_offset)
        if report and self.checkpoint_cb is not None:
            self.checkpoint_cb(self.durable, self.link)

    def pace_checkpoints(self, handle: BinaryIO) -> None:
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
        self.sync_future = self.syncer.submit(os.fsync, handle.fileno())

    def make_durable(self, handle: BinaryIO) -> None:
        """fsync everything written so far, now, and report it."""
        self.write_block(handle)
        self.finish_sync(report=False)
        os.fsync(handle.fileno())
        self.durable = self.sync_offset = self.offset
        self.last_checkpoint_at = time.monotonic()
        if self.checkpoint_cb is not None:
            self.checkpoint_cb(self.durable, self.link)

    # -- the loop ----------------------------------------------------------------------

    def run(self) -> DownloadResult:
        with self.open_partial() as handle, self.syncer:
            try:
                self.loop(handle)
            except IntegrityError:
                raise
            except Exception as exc:
                if is_disk_full(exc):
                    raise self.disk_full(handle) from None
                if self.durable != self.offset + self.fill:
                    with contextlib.suppress(Exception):
                        self.make_durable(handle)
                raise
            if self.expected is not None and self.offset != self.expected:
                raise IntegrityError(
                    f"bundle of job {self.link.job_id}: got {self.offset} bytes, the vendor "
                    f"announced {self.expected}; run the export again"
                )
            self.make_durable(handle)
        with contextlib.suppress(OSError):
            validator_path(self.dest).unlink()
        if self.on_progress is not None:
            self.on_progress(self.offset, self.expected)
        return DownloadResult(
            path=self.dest,
            size=self.offset,
            sha256=self.digest.hexdigest(),
            restarts=self.restarts,
            resumes=self.resumes,
            refreshes=self.refreshes,
        )

    def loop(self, handle: BinaryIO) -> None:
        while not self.done:
            self.check_cancel(handle)
            self.check_restarts()
            if self.expected is not None and self.offset == self.expected and self.offset > 0:
                break
            if link_expired(self.link, self.now()):
                self.refresh(handle, "the link's expiry time has passed")
                continue
            progress_before = self.offset
            try:
                self.fetch(handle)
            except _Restart as restart:
                log.warning("%s; downloading %s from the start", restart, self.dest.name)
                self.truncate(handle)
                self.count_failure(handle, str(restart), None, progress_before)
            except _Refresh:
                self.refresh(handle, "the link has expired")
            except _Retry as retry:
                progress = self.offset + 1 if retry.slow else progress_before
                self.count_failure(handle, retry.reason, retry.retry_after, progress)
            except httpx.TransportError as exc:
                self.check_resolved(handle, exc, progress_before)
                self.count_failure(
                    handle, f"connection problem ({type(exc).__name__})", None, progress_before
                )

    def check_restarts(self) -> None:
        """Bytes thrown away by a restart are no progress: a host whose answers keep
        disagreeing (a lying length, a changing object, ranges ignored and the body cut)
        would otherwise reset the failure count on every pass and hold the run for ever."""
        if self.restarts <= self.max_attempts:
            return
        raise LinkFailed(
            f"download of the bundle of job {self.link.job_id} from "
            f"{urlsplit(self.link.url).netloc} restarted from zero {self.restarts} times (its "
            "answers keep disagreeing about the object); the link is dropped and the next run "
            "asks the vendor for a fresh one"
        )

    def check_resolved(self, handle: BinaryIO, exc: httpx.TransportError, before: int) -> None:
        """A host name that does not resolve will not resolve in a minute either."""
        unresolved = name_resolution_error(exc)
        if unresolved is None or self.failures + 1 < DNS_ATTEMPTS or self.offset > before:
            return
        if self.durable != self.offset:
            self.make_durable(handle)
        raise TemporaryFailure(
            f"cannot resolve the bundle host {urlsplit(self.link.url).hostname!r} "
            f"(job {self.link.job_id}): {unresolved.strerror or unresolved}, "
            f"tried {self.failures + 1} times",
            hint="check the network's DNS resolver (and a proxy, if one is needed)",
        )

    def disk_full(self, handle: BinaryIO) -> TemporaryFailure:
        """Keep the partial file cut back to its last fsynced checkpoint (resumable, and the
        unsynced tail's space freed); the error says where, how much is free and needed."""
        self.fill = 0
        kept = f"the partial download of the bundle of job {self.link.job_id} is kept"
        try:
            with contextlib.suppress(Exception):
                self.finish_sync(report=False)
            handle.truncate(self.durable)
            os.fsync(handle.fileno())
        except OSError:
            kept = f"the partial download of job {self.link.job_id} may end in unsynced bytes"
        needed = self.expected - self.durable if self.expected is not None else None
        return disk_full(
            self.dest.parent,
            needed,
            f"{kept} ({self.durable} bytes) and the next run resumes it",
        )

    def check_cancel(self, handle: BinaryIO) -> None:
        if self.cancel is not None and self.cancel.is_set():
            self.make_durable(handle)
            raise Interrupted(
                f"download of the bundle of job {self.link.job_id} stopped at {self.offset} "
                "bytes; run the export again to resume"
            )

    def refresh(self, handle: BinaryIO, why: str) -> None:
        self.refreshes_in_a_row += 1
        if self.refreshes_in_a_row > self.max_attempts:
            raise LinkFailed(
                f"the bundle link of job {self.link.job_id} keeps expiring "
                f"({self.refreshes_in_a_row - 1} fresh links in a row failed); check the clock "
                "and try again later"
            )
        log.info("requesting a fresh bundle link for job %s: %s", self.link.job_id, why)
        self.link = self.refresh_link()
        self.refreshes += 1
        if self.link.size_bytes is not None:
            self.check_announced(self.link.size_bytes, "the fresh link")
            self.announced = self.link.size_bytes
        if self.checkpoint_cb is not None:
            self.make_durable(handle)

    def count_failure(
        self, handle: BinaryIO, reason: str, retry_after: float | None, progress_before: int
    ) -> None:
        self.failures = 1 if self.offset > progress_before else self.failures + 1
        if self.durable != self.offset:
            self.make_durable(handle)
        if self.failures >= self.max_attempts:
            raise LinkFailed(
                f"download of the bundle of job {self.link.job_id} from "
                f"{urlsplit(self.link.url).netloc} failed {self.failures} times in a row "
                f"({reason}); run the export again later to resume",
                retry_after=retry_after,
            )
        delay = BACKOFF.delay(self.failures, retry_after)
        log.info(
            "download of %s: %s at byte %d; retrying in %.1fs",
            safe_url(self.link.url),
            reason,
            self.offset,
            delay,
        )
        if self.cancel is not None and self.sleep is time.sleep:
            self.cancel.wait(delay)
        else:
            self.sleep(delay)

    def check_announced(self, size: int, source: str) -> None:
        if self.expected is None:
            self.expected = size
        elif size != self.expected:
            raise IntegrityError(
                f"bundle of job {self.link.job_id}: {source} announces {size} bytes, "
                f"expected {self.expected}; run the export again"
            )

    def request(self, url: str) -> httpx.Request:
        timeout = self.http.timeout
        if self.min_speed > 0:
            # Silence for stall_time is a speed of 0: below any limit.
            read = min(timeout.read, self.stall_time) if timeout.read else self.stall_time
            timeout = httpx.Timeout(
                connect=timeout.connect, read=read, write=timeout.write, pool=timeout.pool
            )
        request = self.http.build_request("GET", url, timeout=timeout)
        # The admin key must never travel to the storage host, and S3 refuses two auth schemes.
        for name in ("Authorization", "Cookie"):
            if name in request.headers:
                del request.headers[name]
        request.headers["Accept-Encoding"] = "identity"
        if self.offset > 0:
            request.headers["Range"] = f"bytes={self.offset}-"
            if_range = self.validator.if_range() if self.validator is not None else None
            if if_range:
                request.headers["If-Range"] = if_range
        return request

    def refuse_scheme(self, url: str, what: str) -> None:
        if not followable(url):
            scheme = urlsplit(url).scheme or "(none)"
            raise LinkFailed(
                f"the {what} of job {self.link.job_id} uses the scheme {scheme!r}; only http "
                "and https are followed, so this link is dropped and the next try asks the "
                "vendor for a fresh one"
            )

    def fetch(self, handle: BinaryIO) -> None:
        """One GET, following up to MAX_REDIRECTS http(s) redirects by hand."""
        url = self.link.url
        self.refuse_scheme(url, "bundle link")
        for _ in range(MAX_REDIRECTS + 1):
            response = self.http.send(self.request(url), stream=True, follow_redirects=False)
            try:
                location = response.headers.get("Location")
                if response.status_code not in _REDIRECTS or not location:
                    self.answer(handle, response)
                    return
            finally:
                response.close()
            try:
                url = str(httpx.URL(url).join(location))
            except (httpx.InvalidURL, ValueError):
                url = location
            self.refuse_scheme(url, "redirect of the bundle link")
        raise _Retry(f"more than {MAX_REDIRECTS} redirects")

    def answer(self, handle: BinaryIO, response: httpx.Response) -> None:
        status = response.status_code
        if status == 206:
            first, total = parse_content_range(response.headers.get("Content-Range"))
            if first != self.offset:
                raise _Restart(
                    f"asked for bytes from {self.offset}, the server sent a range from {first}"
                )
            self.accept(Validator.of(response, total))
            if self.offset > 0:
                self.resumes += 1
                log.info("resuming download of %s at byte %d", self.dest.name, self.offset)
        elif status == 200:
            if self.offset > 0:
                log.warning(
                    "the server sent the whole object for %s (range ignored, or the object "
                    "changed); restarting from zero",
                    self.dest.name,
                )
                self.truncate(handle)
            length = response.headers.get("Content-Length")
            self.accept(
                Validator.of(response, int(length) if length and length.isdigit() else None)
            )
        elif status == 416:
            _, total = parse_content_range(response.headers.get("Content-Range"))
            known = self.validator.total if self.validator is not None else None
            if total is not None and total == self.offset and known in (None, total):
                self.check_announced(total, "the server")
                self.done = True
                return
            raise _Restart(f"the server cannot serve bytes from {self.offset} (416)")
        else:
            self.refuse(response)
        self.stream(handle, response)

    def accept(self, answer: Validator) -> None:
        """Check the answer comes from the same object as the bytes so far; record it first."""
        if self.validator is not None and self.offset > 0:
            difference = self.validator.difference(answer)
            if difference is not None:
                raise _Restart(f"the object behind the link changed ({difference})")
        if answer.total is not None and self.expected is not None and answer.total != self.expected:
            if self.offset > 0:
                raise _Restart(
                    f"the server's object has {answer.total} bytes, {self.expected} were announced"
                )
            self.check_announced(answer.total, "the server")  # from the start: refused
        if answer != self.validator:
            save_validator(self.dest, answer)
            self.validator = answer
        if self.expected is None:
            self.expected = answer.total

    def refuse(self, response: httpx.Response) -> None:
        status = response.status_code
        body = _read_limited(response)
        where = safe_url(self.link.url)
        if status == 403 and is_expired_answer(status, body):
            raise _Refresh()
        if status in (408, 425, 429) or status >= 500:
            now = self.now()
            raise _Retry(
                f"HTTP {status}", parse_retry_after(response.headers.get("Retry-After"), now)
            )
        detail = s3_error(body).detail() or f"HTTP {status}"
        if status == 404:
            raise NotFound(
                f"the bundle of job {self.link.job_id} is gone from {where} ({detail}); "
                "run the export again"
            )
        if status in (401, 403):
            raise AuthError(
                f"the storage host refused the bundle link of job {self.link.job_id} "
                f"({detail}); run the export again for a fresh link"
            )
        raise _Retry(f"HTTP {status} ({detail})")

    def stream(self, handle: BinaryIO, response: httpx.Response) -> None:
        window_start = time.monotonic()
        window_bytes = 0
        try:
            for piece in response.iter_raw():
                if self.min_speed > 0:
                    window_bytes += len(piece)
                    elapsed = time.monotonic() - window_start
                    if elapsed >= self.stall_time:
                        if window_bytes < self.min_speed * elapsed:
                            raise _Retry(
                                f"transfer below {self.min_speed} bytes/s for {self.stall_time:g}s",
                                slow=True,
                            )
                        window_start, window_bytes = time.monotonic(), 0
                received = self.offset + self.fill + len(piece)
                if self.expected is not None and received > self.expected:
                    raise IntegrityError(
                        f"bundle of job {self.link.job_id} from {urlsplit(self.link.url).netloc} "
                        f"is bigger than the {self.expected} bytes announced; nothing was stored"
                    )
                self.buffer(handle, piece)
        finally:
            self.write_block(handle)  # whatever ended the body, the bytes received are good
        if self.expected is not None and self.offset < self.expected:
            raise _Retry(f"the connection ended early at byte {self.offset}")
        self.done = True

    def buffer(self, handle: BinaryIO, piece: bytes) -> None:
        """Gather network pieces into 1 MiB blocks; each full block is written and hashed."""
        view = memoryview(piece)
        while view:
            take = min(CHUNK_SIZE - self.fill, len(view))
            self.block[self.fill : self.fill + take] = view[:take]
            self.fill += take
            view = view[take:]
            if self.fill == CHUNK_SIZE:
                self.write_block(handle)
                self.after_block(handle)

    def after_block(self, handle: BinaryIO) -> None:
        self.refreshes_in_a_row = 0
        self.pace_checkpoints(handle)
        if self.on_progress is not None:
            self.on_progress(self.offset, self.expected)
        if self.cancel is not None and self.cancel.is_set():
            self.check_cancel(handle)


def _read_limited(response: httpx.Response) -> str:
    data = b""
    for chunk in response.iter_raw():
        data += chunk
        if len(data) >= _ERROR_BODY_LIMIT:
            break
    return data[:_ERROR_BODY_LIMIT].decode("utf-8", "replace")


def _utcnow() -> datetime:
    return datetime.now(UTC)


def download_bundle(
    http: httpx.Client,
    link: BundleLink,
    dest: Path,
    *,
    refresh_link: Callable[[], BundleLink],
    expected_size: int | None = None,
    checkpoint: Callable[[int, BundleLink], None] | None = None,
    on_progress: Callable[[int, int | None], None] | None = None,
    cancel: threading.Event | None = None,
    max_attempts: int = 8,
    sleep: Callable[[float], None] = time.sleep,
    now: Callable[[], datetime] = _utcnow,
    min_speed: int = DEFAULT_MIN_SPEED,
    stall_time: float = DEFAULT_STALL_TIME,
) -> DownloadResult:
    """Download `link` into `dest`, continuing whatever `dest` already holds.

    Raises IntegrityError (size), Interrupted (cancel; progress checkpointed),
    LinkFailed (attempts spent, or not an http(s) link), AuthError/NotFound (link
    refused for good). `min_speed` bytes/s over `stall_time` s is the low-speed limit
    (0 turns it off).
    """
    return _Download(
        http,
        link,
        dest,
        refresh_link=refresh_link,
        expected_size=expected_size,
        checkpoint=checkpoint,
        on_progress=on_progress,
        cancel=cancel,
        max_attempts=max_attempts,
        sleep=sleep,
        now=now,
        min_speed=min_speed,
        stall_time=stall_time,
    ).run()
