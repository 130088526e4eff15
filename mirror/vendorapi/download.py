"""Download a bundle from its presigned link: streamed, hashed, resumable, re-requested.

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
  report's `observed`: `mirror.completeness.SiteScanner`).
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
from urllib.parse import urlsplit

import httpx

from mirror import links
from mirror.archive import ArchiveFeed, ArchiveLimits, ArchiveReport, FileSink, inspect_archive
from mirror.errors import AuthError, IntegrityError, Interrupted, NotFound, TemporaryFailure
from mirror.fsutil import is_disk_full
from mirror.links import is_expired_answer, s3_error, safe_url
from mirror.timestamps import utcnow
from mirror.vendorapi.client import BundleLink
from mirror.vendorapi.partial import CHECKPOINT_BYTES, CHECKPOINT_SECONDS, PartialFile
from mirror.vendorapi.retry import Backoff, parse_retry_after
from mirror.vendorapi.socketbody import SocketBody
from mirror.vendorapi.speedlimit import SpeedLimit
from mirror.vendorapi.transport import DNS_ATTEMPTS, name_resolution_error
from mirror.vendorapi.validators import Restart as _Restart
from mirror.vendorapi.validators import (
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
    "safe_url",
    "save_validator",
    "validator_path",
]

log = logging.getLogger(__name__)

# A cut connection is usually back within a second; a busy storage host says Retry-After.
BACKOFF = Backoff(initial=0.5, maximum=30.0, jitter=0.5, retry_after_cap=300.0)
_ERROR_BODY_LIMIT = 64 * 1024
MAX_REDIRECTS = 10
DEFAULT_MIN_SPEED = 1024
DEFAULT_STALL_TIME = 30.0
FOLLOWED_SCHEMES = frozenset({"http", "https"})
_REDIRECTS = frozenset({301, 302, 303, 307, 308})


class LinkFailed(TemporaryFailure):
    """This link cannot deliver the bundle (a scheme other than http/https, or its attempts
    are spent): drop it; the next try asks the vendor for a fresh one (exit 75)."""


def followable(url: str) -> bool:
    """Only http and https links are fetched."""
    return urlsplit(url).scheme.lower() in FOLLOWED_SCHEMES


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
    """One download_bundle call: the loop that composes the partial file, the resume guard
    and the speed limit, and decides what each answer and failure means."""

    def __init__(self, http: httpx.Client, link: BundleLink, dest: Path, options: _Options) -> None:
        self.http = http
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
        self.speed = SpeedLimit(options.min_speed, options.stall_time)
        self.max_attempts = max(1, options.max_attempts)
        self.restarts = self.resumes = self.started_at = 0
        self.refreshes = self.failures = self.refreshes_in_a_row = 0
        self.done = False

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
        self.restarts += 1

    # -- the loop ----------------------------------------------------------------------

    def run(self) -> DownloadResult:
        try:
            return self.download()
        finally:
            if self.feed is not None:
                self.feed.close()

    def inspection(self) -> ArchiveReport | None:
        """The archive's report: streamed when a feed ran, else read from the finished file."""
        if self.feed is not None:
            return self.feed.result(self.offset)
        if self.options.inspect is not None:
            return inspect_archive(self.dest, self.options.inspect, self.options.observe)
        return None

    @property
    def continued(self) -> bool:
        """Whether bytes written before this call, or before a resume, are in the file."""
        return self.started_at > 0 or self.resumes > 0

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
        archive = self.inspection()
        if self.options.on_progress is not None:
            self.options.on_progress(self.offset, self.expected)
        return DownloadResult(
            path=self.dest,
            size=self.offset,
            sha256=self.file.hashed.result.sha256,
            restarts=self.restarts,
            resumes=self.resumes,
            refreshes=self.refreshes,
            archive=archive,
        )

    def loop(self) -> None:
        while not self.done:
            self.check_cancel()
            self.check_restarts()
            if self.expected is not None and self.offset == self.expected and self.offset > 0:
                break
            if link_expired(self.link, self.options.now()):
                self.refresh("the link's expiry time has passed")
                continue
            progress_before = self.offset
            try:
                self.fetch()
            except _Restart as restart:
                log.warning("%s; downloading %s from the start", restart, self.dest.name)
                self.truncate()
                self.count_failure(str(restart), None, progress_before)
            except _Refresh:
                self.refresh("the link has expired")
            except _Retry as retry:
                progress = self.offset + 1 if retry.slow else progress_before
                self.count_failure(retry.reason, retry.retry_after, progress)
            except httpx.TransportError as exc:
                self.check_resolved(exc, progress_before)
                self.count_failure(
                    f"connection problem ({type(exc).__name__})", None, progress_before
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

    def check_resolved(self, exc: httpx.TransportError, before: int) -> None:
        """A host name that does not resolve will not resolve in a minute either."""
        unresolved = name_resolution_error(exc)
        if unresolved is None or self.failures + 1 < DNS_ATTEMPTS or self.offset > before:
            return
        if self.file.durable != self.offset:
            self.file.make_durable()
        raise TemporaryFailure(
            f"cannot resolve the bundle host {urlsplit(self.link.url).hostname!r} "
            f"(job {self.link.job_id}): {unresolved.strerror or unresolved}, "
            f"tried {self.failures + 1} times",
            hint="check the network's DNS resolver (and a proxy, if one is needed)",
        )

    def check_cancel(self) -> None:
        if self.options.cancel is not None and self.options.cancel.is_set():
            self.file.make_durable()
            raise Interrupted(
                f"download of the bundle of job {self.link.job_id} stopped at {self.offset} "
                "bytes; run the export again to resume"
            )

    def refresh(self, why: str) -> None:
        self.refreshes_in_a_row += 1
        if self.refreshes_in_a_row > self.max_attempts:
            raise LinkFailed(
                f"the bundle link of job {self.link.job_id} keeps expiring "
                f"({self.refreshes_in_a_row - 1} fresh links in a row failed); check the clock "
                "and try again later"
            )
        log.info("requesting a fresh bundle link for job %s: %s", self.link.job_id, why)
        self.link = self.options.refresh_link()
        self.refreshes += 1
        if self.link.size_bytes is not None:
            self.guard.announce(self.link.size_bytes, self.link.job_id)
        if self.options.checkpoint is not None:
            self.file.make_durable()

    def count_failure(self, reason: str, retry_after: float | None, progress_before: int) -> None:
        self.failures = 1 if self.offset > progress_before else self.failures + 1
        if self.file.durable != self.offset:
            self.file.make_durable()
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
        if self.options.cancel is not None and self.options.sleep is time.sleep:
            self.options.cancel.wait(delay)
        else:
            self.options.sleep(delay)

    def request(self, url: str) -> httpx.Request:
        timeout = self.speed.timeout(self.http.timeout)
        if_range = self.guard.if_range() if self.offset > 0 else None
        return range_request(self.http, url, self.offset, if_range, timeout)

    def fetch(self) -> None:
        """One GET, following up to MAX_REDIRECTS http(s) redirects by hand."""
        url = self.link.url
        refuse_scheme(url, "bundle link", self.link.job_id)
        for _ in range(MAX_REDIRECTS + 1):
            response = self.http.send(self.request(url), stream=True, follow_redirects=False)
            try:
                location = response.headers.get("Location")
                if response.status_code not in _REDIRECTS or not location:
                    self.answer(response)
                    return
            finally:
                response.close()
            try:
                url = str(httpx.URL(url).join(location))
            except (httpx.InvalidURL, ValueError):
                url = location
            refuse_scheme(url, "redirect of the bundle link", self.link.job_id)
        raise _Retry(f"more than {MAX_REDIRECTS} redirects")

    def answer(self, response: httpx.Response) -> None:
        status = response.status_code
        if status == 206:
            first, total = parse_content_range(response.headers.get("Content-Range"))
            if first != self.offset:
                raise _Restart(
                    f"asked for bytes from {self.offset}, the server sent a range from {first}"
                )
            self.guard.accept(Validator.of(response, total), self.offset, self.link.job_id)
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
                self.truncate()
            length = response.headers.get("Content-Length")
            total = int(length) if length and length.isdigit() else None
            self.guard.accept(Validator.of(response, total), self.offset, self.link.job_id)
        elif status == 416:
            _, total = parse_content_range(response.headers.get("Content-Range"))
            if self.guard.complete_at(total, self.offset) and total is not None:
                self.guard.check_announced(total, "the server", self.link.job_id)
                self.done = True
                return
            raise _Restart(f"the server cannot serve bytes from {self.offset} (416)")
        else:
            _refuse(response, self.link, self.options.now)
        self.stream(response)

    def stream(self, response: httpx.Response) -> None:
        self.speed.start()
        try:
            body = SocketBody.of(response)  # else the body comes through httpx's pieces
            for piece in response.iter_raw() if body is None else (body.first,):
                self.take(len(piece))
                self.file.buffer(piece, self.after_block)
            # Socket -> block, up to one byte past the announced size (refused, never kept).
            while body is not None and (got := body.readinto(self.file.space(self.room))):
                self.take(got)
                self.file.filled(got, self.after_block)
        finally:
            self.file.write_block()  # whatever ended the body, the bytes received are good
        if self.expected is not None and self.offset < self.expected:
            raise _Retry(f"the connection ended early at byte {self.offset}")
        self.done = True

    @property
    def room(self) -> int | None:
        return None if self.expected is None else self.expected - self.offset - self.file.fill + 1

    def take(self, count: int) -> None:
        """Accept `count` more bytes of the body, or refuse them: too slow, or too many."""
        if self.speed.too_slow(count):
            raise _Retry(self.speed.describe(), slow=True)
        received = self.offset + self.file.fill + count
        if self.expected is not None and received > self.expected:
            raise IntegrityError(
                f"bundle of job {self.link.job_id} from {urlsplit(self.link.url).netloc} "
                f"is bigger than the {self.expected} bytes announced; nothing was stored"
            )

    def after_block(self) -> None:
        self.refreshes_in_a_row = 0
        self.file.pace_checkpoints()
        if self.options.on_progress is not None:
            self.options.on_progress(self.offset, self.expected)
        if self.options.cancel is not None and self.options.cancel.is_set():
            self.check_cancel()


def range_request(
    http: httpx.Client, url: str, offset: int, if_range: str | None, timeout: httpx.Timeout
) -> httpx.Request:
    """A GET of `url` from byte `offset` (If-Range: `if_range`), unencoded, without the
    admin key: it must never travel to the storage host, and S3 refuses two auth schemes."""
    request = http.build_request("GET", url, timeout=timeout)
    for name in ("Authorization", "Cookie"):
        if name in request.headers:
            del request.headers[name]
    request.headers["Accept-Encoding"] = "identity"
    if offset > 0:
        request.headers["Range"] = f"bytes={offset}-"
        if if_range:
            request.headers["If-Range"] = if_range
    return request


def refuse_scheme(url: str, what: str, job_id: str) -> None:
    """LinkFailed unless `url` is http(s): nothing else is followed."""
    if not followable(url):
        scheme = urlsplit(url).scheme or "(none)"
        raise LinkFailed(
            f"the {what} of job {job_id} uses the scheme {scheme!r}; only http "
            "and https are followed, so this link is dropped and the next try asks the "
            "vendor for a fresh one"
        )


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


def _refuse(response: httpx.Response, link: BundleLink, now: Callable[[], datetime]) -> None:
    """Raise what a storage host's refusal means: refresh, retry, or give up for good."""
    status = response.status_code
    body = _read_limited(response)
    where = safe_url(link.url)
    if status == 403 and is_expired_answer(status, body):
        raise _Refresh()
    if status in (408, 425, 429) or status >= 500:
        raise _Retry(
            f"HTTP {status}", parse_retry_after(response.headers.get("Retry-After"), now())
        )
    detail = s3_error(body).detail() or f"HTTP {status}"
    if status == 404:
        raise NotFound(
            f"the bundle of job {link.job_id} is gone from {where} ({detail}); run the export again"
        )
    if status in (401, 403):
        raise AuthError(
            f"the storage host refused the bundle link of job {link.job_id} "
            f"({detail}); run the export again for a fresh link"
        )
    raise _Retry(f"HTTP {status} ({detail})")


def _read_limited(response: httpx.Response) -> str:
    data = b""
    for chunk in response.iter_raw():
        data += chunk
        if len(data) >= _ERROR_BODY_LIMIT:
            break
    return data[:_ERROR_BODY_LIMIT].decode("utf-8", "replace")


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
    first = _Download(http, link, dest, options)
    try:
        return first.run()
    except IntegrityError as exc:
        if not first.continued:
            raise
        _drop_after_failed_resume(link.job_id, dest, exc)
    return _Download(http, link, dest, options).run()
