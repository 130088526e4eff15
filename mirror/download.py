"""Download a bundle from its presigned link: streamed, hashed, resumable, re-requested.

Promises:

- memory stays constant: the body is read in 1 MiB chunks, each hashed and
  appended to the partial file in the same pass;
- an existing partial file is continued with `Range: bytes=N-` (its prefix is
  re-hashed first, streamed); a server that ignores the range (200) makes the
  download restart from zero, never append the wrong bytes;
- a cut connection is resumed, an expired link is replaced through
  `refresh_link()`, 408/429/5xx are retried with backoff honouring
  `Retry-After`; all bounded by `max_attempts` tries in a row that made no progress;
- more bytes than the vendor announced is an `IntegrityError` at once;
- `checkpoint(bytes_durable, link)` is called only after an fsync, at least
  every 8 MiB (and every 30 s) and at the end, so a caller can persist progress;
- the presigned query string is a credential: it is never logged or put in an error.
"""

from __future__ import annotations

import contextlib
import email.utils
import hashlib
import logging
import os
import random
import re
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import BinaryIO
from urllib.parse import urlsplit

import httpx

from mirror.api import BundleLink
from mirror.errors import AuthError, IntegrityError, Interrupted, NotFound, TemporaryFailure
from mirror.fsutil import CHUNK_SIZE, disk_full, is_disk_full, iter_file

log = logging.getLogger(__name__)

CHECKPOINT_BYTES = 8 * 1024 * 1024
CHECKPOINT_SECONDS = 30.0
_MAX_BACKOFF = 30.0
_ERROR_BODY_LIMIT = 64 * 1024
_CONTENT_RANGE = re.compile(r"^\s*bytes\s+(?:(\d+)-(\d+)|\*)/(\d+|\*)\s*$")
_S3_CODE = re.compile(r"<Code>([^<]{1,100})</Code>")
_S3_MESSAGE = re.compile(r"<Message>([^<]{1,300})</Message>")


@dataclass(frozen=True)
class DownloadResult:
    """The whole file is at `path`; `sha256` covers all of its `size` bytes."""

    path: Path
    size: int
    sha256: str
    restarts: int
    resumes: int
    refreshes: int


def safe_url(url: str) -> str:
    """The link without its query string (the signature), for logs and messages."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}{parts.path}"


def link_expired(link: BundleLink, now: datetime) -> bool:
    """True when the link's announced expiry has passed."""
    return link.expires_at is not None and now >= link.expires_at


def parse_retry_after(value: str | None, now: datetime) -> float | None:
    """Seconds to wait from a Retry-After header (delta-seconds or an HTTP date)."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - now).total_seconds())


def parse_content_range(value: str | None) -> tuple[int | None, int | None]:
    """(first byte, complete length) from `bytes A-B/N` or `bytes */N`; None where unknown."""
    match = _CONTENT_RANGE.match(value or "")
    if match is None:
        return None, None
    first = int(match.group(1)) if match.group(1) is not None else None
    total = int(match.group(3)) if match.group(3) != "*" else None
    return first, total


def is_expired_answer(status: int, body: str) -> bool:
    """S3's answer to an expired presigned link: 403 AccessDenied `Request has expired`."""
    lowered = body.lower()
    return status == 403 and (
        "request has expired" in lowered or ("accessdenied" in lowered and "expired" in lowered)
    )


def backoff_delay(failures: int, retry_after: float | None) -> float:
    """Jittered exponential backoff (0.5 s doubling, capped), or the server's Retry-After."""
    if retry_after is not None:
        return min(max(retry_after, 0.0), 300.0)
    ceiling = min(_MAX_BACKOFF, 0.5 * 2.0 ** min(max(failures - 1, 0), 16))
    return ceiling / 2 + random.uniform(0, ceiling / 2)  # noqa: S311 (jitter, not crypto)


class _Restart(Exception):
    """The server sent the whole body again or a range we did not ask for: start over."""


class _Retry(Exception):
    """A failure worth another try after `delay` seconds."""

    def __init__(self, reason: str, retry_after: float | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retry_after = retry_after


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
    ) -> None:
        self.http = http
        self.link = link
        self.dest = dest
        self.refresh_link = refresh_link
        self.expected = link.size_bytes if link.size_bytes is not None else expected_size
        self.checkpoint_cb = checkpoint
        self.on_progress = on_progress
        self.cancel = cancel
        self.max_attempts = max(1, max_attempts)
        self.sleep = sleep
        self.now = now
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
                self.count_failure(handle, retry.reason, retry.retry_after, progress_before)
            except httpx.TransportError as exc:
                self.count_failure(
                    handle, f"connection problem ({type(exc).__name__})", None, progress_before
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
            raise TemporaryFailure(
                f"the bundle link of job {self.link.job_id} keeps expiring "
                f"({self.refreshes_in_a_row - 1} fresh links in a row failed); check the clock "
                "and try again later"
            )
        log.info("requesting a fresh bundle link for job %s: %s", self.link.job_id, why)
        self.link = self.refresh_link()
        self.refreshes += 1
        if self.link.size_bytes is not None:
            self.check_announced(self.link.size_bytes, "the fresh link")
        if self.checkpoint_cb is not None:
            self.make_durable(handle)

    def count_failure(
        self, handle: BinaryIO, reason: str, retry_after: float | None, progress_before: int
    ) -> None:
        self.failures = 1 if self.offset > progress_before else self.failures + 1
        if self.durable != self.offset:
            self.make_durable(handle)
        if self.failures >= self.max_attempts:
            raise TemporaryFailure(
                f"download of the bundle of job {self.link.job_id} from "
                f"{urlsplit(self.link.url).netloc} failed {self.failures} times in a row "
                f"({reason}); run the export again later to resume",
                retry_after=retry_after,
            )
        delay = backoff_delay(self.failures, retry_after)
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

    def request(self) -> httpx.Request:
        request = self.http.build_request("GET", self.link.url)
        # The admin key must never travel to the storage host, and S3 refuses two auth schemes.
        for name in ("Authorization", "Cookie"):
            if name in request.headers:
                del request.headers[name]
        request.headers["Accept-Encoding"] = "identity"
        if self.offset > 0:
            request.headers["Range"] = f"bytes={self.offset}-"
        return request

    def fetch(self, handle: BinaryIO) -> None:
        response = self.http.send(self.request(), stream=True, follow_redirects=True)
        try:
            self.answer(handle, response)
        finally:
            response.close()

    def answer(self, handle: BinaryIO, response: httpx.Response) -> None:
        status = response.status_code
        if status == 206:
            first, total = parse_content_range(response.headers.get("Content-Range"))
            if first != self.offset:
                raise _Restart(
                    f"asked for bytes from {self.offset}, the server sent a range from {first}"
                )
            if total is not None:
                self.check_announced(total, "the server")
            if self.offset > 0:
                self.resumes += 1
                log.info("resuming download of %s at byte %d", self.dest.name, self.offset)
        elif status == 200:
            if self.offset > 0:
                log.warning(
                    "the server ignored the range request for %s; restarting from zero",
                    self.dest.name,
                )
                self.truncate(handle)
            length = response.headers.get("Content-Length")
            if length is not None and length.isdigit():
                self.check_announced(int(length), "the server")
        elif status == 416:
            _, total = parse_content_range(response.headers.get("Content-Range"))
            if total is not None and total == self.offset:
                self.check_announced(total, "the server")
                self.done = True
                return
            raise _Restart(f"the server cannot serve bytes from {self.offset} (416)")
        else:
            self.refuse(response)
        self.stream(handle, response)

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
        code = _S3_CODE.search(body)
        message = _S3_MESSAGE.search(body)
        detail = ": ".join(m.group(1) for m in (code, message) if m) or f"HTTP {status}"
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
        try:
            for piece in response.iter_raw():
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
) -> DownloadResult:
    """Download `link` into `dest`, continuing whatever `dest` already holds.

    Raises IntegrityError (size), Interrupted (cancel; progress checkpointed),
    TemporaryFailure (attempts spent), AuthError/NotFound (link refused for good).
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
    ).run()
