"""Download a bundle from its presigned link: streamed, hashed, resumable, re-requested.

The loop over tries is here; one GET and what its answer means is `exchange`, the body
into the partial file `receiver`, the counting of tries `attempts`, the file itself
`partial`, the object's identity `validators`.

Promises:

- memory stays constant: the body is read in 1 MiB blocks, each hashed and
  appended to the partial file in the same pass; a body of known length on HTTP/1.x is
  received from the socket straight into the block (`socketbody.SocketBody`: no copies
  through h11 and httpcore);
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
- the presigned query string is a credential: it is never logged or put in an error;
- with `inspect` (archive limits) and a known size, the archive is inspected as its
  bytes arrive (`archive.ArchiveFeed`, on a second thread): a resumed download re-feeds
  the inspection from the partial file's prefix, a restart from zero starts it afresh,
  and the result carries the same report as `inspect_archive` on the finished file, or
  the same `IntegrityError` is raised once the last byte is in (the file is left for the
  caller to drop). A zip is inspected after the download (its directory is at the end).
  With `observe`, a sink it makes sees every checked member in that same pass (the
  report's `observed`: `mirror.archive.completeness.SiteScanner`).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import httpx

from mirror import links
from mirror.archive import ArchiveFeed, ArchiveLimits, ArchiveReport, FileSink, inspect_archive
from mirror.errors import IntegrityError, Interrupted
from mirror.fsutil import is_disk_full
from mirror.links import is_expired_answer, safe_url
from mirror.timestamps import utcnow
from mirror.vendorapi.attempts import BACKOFF, Attempts, LinkFailed, Refresh, Retry
from mirror.vendorapi.client import BundleLink
from mirror.vendorapi.exchange import (
    FOLLOWED_SCHEMES,
    MAX_REDIRECTS,
    Exchange,
    followable,
    range_request,
)
from mirror.vendorapi.partial import CHECKPOINT_BYTES, CHECKPOINT_SECONDS, PartialFile
from mirror.vendorapi.receiver import Receiver
from mirror.vendorapi.retry import parse_retry_after
from mirror.vendorapi.speedlimit import SpeedLimit
from mirror.vendorapi.validators import (
    Restart,
    ResumeGuard,
    Validator,
    load_validator,
    parse_content_range,
    save_validator,
    validator_path,
)

__all__ = [
    "BACKOFF",
    "CHECKPOINT_BYTES",
    "CHECKPOINT_SECONDS",
    "DEFAULT_MIN_SPEED",
    "DEFAULT_STALL_TIME",
    "FOLLOWED_SCHEMES",
    "MAX_REDIRECTS",
    "DownloadResult",
    "LinkFailed",
    "Validator",
    "download_bundle",
    "followable",
    "is_expired_answer",
    "link_expired",
    "load_validator",
    "parse_content_range",
    "parse_retry_after",
    "range_request",
    "safe_url",
    "save_validator",
    "validator_path",
]

log = logging.getLogger(__name__)

DEFAULT_MIN_SPEED = 1024
DEFAULT_STALL_TIME = 30.0


@dataclass(frozen=True)
class DownloadResult:
    """The whole file is at `path`; `sha256` covers all of its `size` bytes; `archive` is
    its inspection when one was asked for."""

    path: Path
    size: int
    sha256: str
    restarts: int
    resumes: int
    refreshes: int
    archive: ArchiveReport | None = None


def link_expired(link: BundleLink, now: datetime) -> bool:
    """True when the link's expiry (announced, else its signature's) has passed."""
    return links.link_expired(link.url, link.expires_at, now)


@dataclass(frozen=True)
class _Options:
    """What one `download_bundle` call was asked for, beyond the link and the file."""

    refresh_link: Callable[[], BundleLink]
    expected_size: int | None
    checkpoint: Callable[[int, BundleLink], None] | None
    on_progress: Callable[[int, int | None], None] | None
    cancel: threading.Event | None
    max_attempts: int
    sleep: Callable[[float], None]
    now: Callable[[], datetime]
    min_speed: int
    stall_time: float
    inspect: ArchiveLimits | None
    observe: Callable[[], FileSink] | None


class _Download:
    """One download_bundle call: the loop over tries of the link (`exchange.Exchange`, its
    body through `receiver.Receiver`), counted by `attempts.Attempts`, into the partial
    file under the resume guard; it decides what each failure means for the file."""

    def __init__(self, http: httpx.Client, link: BundleLink, dest: Path, options: _Options) -> None:
        self.link = link
        self.dest = dest
        self.options = options
        announced = link.size_bytes if link.size_bytes is not None else options.expected_size
        self.guard = ResumeGuard(dest, announced)
        limits = options.inspect
        self.feed = (
            ArchiveFeed(dest, announced, limits, options.observe)
            if limits is not None and announced is not None
            else None
        )
        report = self.report_checkpoint if options.checkpoint is not None else None
        self.file = PartialFile(dest, report, self.feed)
        self.attempts = Attempts(options.max_attempts, options.sleep, options.cancel)
        speed = SpeedLimit(options.min_speed, options.stall_time)
        receiver = Receiver(self.file, self.guard, speed, self.after_block)
        self.exchange = Exchange(
            http, self.file, self.guard, receiver, restart=self.truncate, now=options.now
        )
        self.started_at = 0

    def report_checkpoint(self, durable: int) -> None:
        if self.options.checkpoint is not None:
            self.options.checkpoint(durable, self.link)

    @property
    def offset(self) -> int:
        return self.file.offset

    @property
    def expected(self) -> int | None:
        return self.guard.expected

    def truncate(self) -> None:
        self.file.empty()
        self.guard.forget()
        self.attempts.restarts += 1

    def run(self) -> DownloadResult:
        try:
            return self.download()
        finally:
            if self.feed is not None:
                self.feed.close()

    @property
    def continued(self) -> bool:
        """Whether bytes written before this call, or before a resume, are in the file."""
        return self.started_at > 0 or self.exchange.resumes > 0

    def download(self) -> DownloadResult:
        handle, self.guard.validator = self.file.open(self.expected)
        self.started_at = self.offset
        with handle, self.file.syncer:
            try:
                self.loop()
            except IntegrityError:
                raise
            except Exception as exc:
                if is_disk_full(exc):
                    raise self.file.disk_full(self.link.job_id, self.expected) from None
                if self.file.unsynced:
                    with contextlib.suppress(Exception):
                        self.file.make_durable()
                raise
            if self.expected is not None and self.offset != self.expected:
                raise IntegrityError(
                    f"bundle of job {self.link.job_id}: got {self.offset} bytes, the vendor "
                    f"announced {self.expected}; run the export again"
                )
            self.file.make_durable()
        with contextlib.suppress(OSError):
            validator_path(self.dest).unlink()
        return self.result()

    def result(self) -> DownloadResult:
        """The finished file, its inspection (streamed, else read from the file), the counts."""
        archive = None
        if self.feed is not None:
            archive = self.feed.result(self.offset)
        elif self.options.inspect is not None:
            archive = inspect_archive(self.dest, self.options.inspect, self.options.observe)
        if self.options.on_progress is not None:
            self.options.on_progress(self.offset, self.expected)
        return DownloadResult(
            path=self.dest,
            size=self.offset,
            sha256=self.file.hashed.result.sha256,
            restarts=self.attempts.restarts,
            resumes=self.exchange.resumes,
            refreshes=self.attempts.refreshes,
            archive=archive,
        )

    def loop(self) -> None:
        while True:
            self.check_cancel()
            self.attempts.check_restarts(self.link)
            if self.expected is not None and self.offset == self.expected and self.offset > 0:
                return
            if link_expired(self.link, self.options.now()):
                self.refresh("the link's expiry time has passed")
                continue
            before = self.offset
            try:
                self.exchange.fetch(self.link)
                return
            except Restart as restart:
                log.warning("%s; downloading %s from the start", restart, self.dest.name)
                self.truncate()
                self.count_failure(str(restart), None, progressed=self.offset > before)
            except Refresh:
                self.refresh("the link has expired")
            except Retry as retry:
                progressed = not retry.slow and self.offset > before
                self.count_failure(retry.reason, retry.retry_after, progressed=progressed)
            except httpx.TransportError as exc:
                self.check_resolved(exc, progressed=self.offset > before)
                reason = f"connection problem ({type(exc).__name__})"
                self.count_failure(reason, None, progressed=self.offset > before)

    def check_resolved(self, exc: httpx.TransportError, *, progressed: bool) -> None:
        unresolvable = self.attempts.unresolvable(exc, self.link, progressed)
        if unresolvable is not None:
            self.make_durable()
            raise unresolvable

    def make_durable(self) -> None:
        if self.file.durable != self.offset:
            self.file.make_durable()

    def check_cancel(self) -> None:
        if self.options.cancel is not None and self.options.cancel.is_set():
            self.file.make_durable()
            raise Interrupted(
                f"download of the bundle of job {self.link.job_id} stopped at {self.offset} "
                "bytes; run the export again to resume"
            )

    def refresh(self, why: str) -> None:
        self.attempts.refresh(self.link)
        log.info("requesting a fresh bundle link for job %s: %s", self.link.job_id, why)
        self.link = self.options.refresh_link()
        if self.link.size_bytes is not None:
            self.guard.announce(self.link.size_bytes, self.link.job_id)
        if self.options.checkpoint is not None:
            self.file.make_durable()

    def count_failure(self, reason: str, retry_after: float | None, *, progressed: bool) -> None:
        self.make_durable()
        self.attempts.failed(
            reason, retry_after, progressed=progressed, link=self.link, offset=self.offset
        )

    def after_block(self) -> None:
        self.attempts.block_written()
        self.file.pace_checkpoints()
        if self.options.on_progress is not None:
            self.options.on_progress(self.offset, self.expected)
        if self.options.cancel is not None and self.options.cancel.is_set():
            self.check_cancel()


def _drop_after_failed_resume(job_id: str, dest: Path, exc: IntegrityError) -> None:
    """Bytes from before a resume may be damaged on disk: drop them, so one download from
    zero decides."""
    log.warning(
        "bundle of job %s failed its check after a resume (%s); downloading it again "
        "from the start",
        job_id,
        exc.message,
    )
    for stale in (dest, validator_path(dest)):
        with contextlib.suppress(FileNotFoundError):
            stale.unlink()


def _download_once_more_if_continued(
    http: httpx.Client, link: BundleLink, dest: Path, options: _Options
) -> DownloadResult:
    """A download that continued earlier bytes and fails its check is made once more from
    zero: the earlier bytes may be what is damaged."""
    first = _Download(http, link, dest, options)
    try:
        return first.run()
    except IntegrityError as exc:
        if not first.continued:
            raise
        _drop_after_failed_resume(link.job_id, dest, exc)
    return _Download(http, link, dest, options).run()


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
    now: Callable[[], datetime] = utcnow,
    min_speed: int = DEFAULT_MIN_SPEED,
    stall_time: float = DEFAULT_STALL_TIME,
    inspect: ArchiveLimits | None = None,
    observe: Callable[[], FileSink] | None = None,
) -> DownloadResult:
    """Download `link` into `dest`, continuing whatever `dest` already holds.

    With `inspect`, the archive is checked within those limits as it arrives and the
    result's `archive` holds the report. A download that continued earlier bytes (a resume,
    or a partial file from before) and then fails its size or archive check is downloaded
    once more from zero, since the earlier bytes may be what is damaged. Raises
    IntegrityError (size, or the archive check, of a download from zero), Interrupted
    (cancel; progress checkpointed), LinkFailed (attempts spent, or not an http(s) link),
    AuthError/NotFound (link refused for good). `min_speed` bytes/s over `stall_time` s is
    the low-speed limit (0 turns it off).
    """
    timing = (max_attempts, sleep, now, min_speed, stall_time)
    options = _Options(
        refresh_link, expected_size, checkpoint, on_progress, cancel, *timing, inspect, observe
    )
    return _download_once_more_if_continued(http, link, dest, options)
