"""One GET of a bundle link, and what its answer means for the partial file.

Promises:

- the GET asks for the rest of the file (`Range: bytes=N-`, `If-Range` with the first
  answer's validator), unencoded, and never carries the admin key: it must never travel
  to the storage host, and S3 refuses two auth schemes;
- only http and https links and redirects are followed, at most `MAX_REDIRECTS` of them,
  by hand; any other scheme is a `LinkFailed` at once;
- a 206 continues the file only from the byte asked for, from the same object
  (`ResumeGuard`); a 200 to a range request starts the file over; a 416 whose total is
  what the file holds means it is whole; anything else is what the storage host's refusal
  means: `Refresh` (expired), `Retry` (408/425/429/5xx, honouring `Retry-After`),
  NotFound, AuthError. The presigned query string is never put in an error.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime
from urllib.parse import urlsplit

import httpx

from mirror.errors import AuthError, NotFound
from mirror.links import is_expired_answer, s3_error, safe_url
from mirror.vendorapi.attempts import LinkFailed, Refresh, Retry
from mirror.vendorapi.client import BundleLink
from mirror.vendorapi.partial import PartialFile
from mirror.vendorapi.receiver import Receiver
from mirror.vendorapi.retry import parse_retry_after
from mirror.vendorapi.validators import Restart, ResumeGuard, Validator, parse_content_range

log = logging.getLogger("mirror.vendorapi.download")  # one logger for the whole download

_ERROR_BODY_LIMIT = 64 * 1024
MAX_REDIRECTS = 10
FOLLOWED_SCHEMES = frozenset({"http", "https"})
_REDIRECTS = frozenset({301, 302, 303, 307, 308})


def followable(url: str) -> bool:
    """Only http and https links are fetched."""
    return urlsplit(url).scheme.lower() in FOLLOWED_SCHEMES


class Exchange:
    """GETs of one download's link; `restart()` empties the file when the object changed."""

    def __init__(
        self,
        http: httpx.Client,
        file: PartialFile,
        guard: ResumeGuard,
        receiver: Receiver,
        *,
        restart: Callable[[], None],
        now: Callable[[], datetime],
    ) -> None:
        self.http = http
        self.file = file
        self.guard = guard
        self.receiver = receiver
        self.restart = restart
        self.now = now
        self.resumes = 0

    def fetch(self, link: BundleLink) -> None:
        """One GET, following up to MAX_REDIRECTS http(s) redirects by hand; returns once
        the file holds the whole object (as far as the answer tells)."""
        url = link.url
        refuse_scheme(url, "bundle link", link.job_id)
        for _ in range(MAX_REDIRECTS + 1):
            response = self.http.send(self.request(url), stream=True, follow_redirects=False)
            try:
                location = response.headers.get("Location")
                if response.status_code not in _REDIRECTS or not location:
                    self.answer(response, link)
                    return
            finally:
                response.close()
            try:
                url = str(httpx.URL(url).join(location))
            except (httpx.InvalidURL, ValueError):
                url = location
            refuse_scheme(url, "redirect of the bundle link", link.job_id)
        raise Retry(f"more than {MAX_REDIRECTS} redirects")

    def request(self, url: str) -> httpx.Request:
        offset = self.file.offset
        timeout = self.receiver.speed.timeout(self.http.timeout)
        if_range = self.guard.if_range() if offset > 0 else None
        return range_request(self.http, url, offset, if_range, timeout)

    def answer(self, response: httpx.Response, link: BundleLink) -> None:
        status, offset = response.status_code, self.file.offset
        if status == 206:
            first, total = parse_content_range(response.headers.get("Content-Range"))
            if first != offset:
                raise Restart(
                    f"asked for bytes from {offset}, the server sent a range from {first}"
                )
            self.guard.accept(Validator.of(response, total), offset, link.job_id)
            if offset > 0:
                self.resumes += 1
                log.info("resuming download of %s at byte %d", self.file.dest.name, offset)
        elif status == 200:
            if offset > 0:
                log.warning(
                    "the server sent the whole object for %s (range ignored, or the object "
                    "changed); restarting from zero",
                    self.file.dest.name,
                )
                self.restart()
            length = response.headers.get("Content-Length")
            total = int(length) if length and length.isdigit() else None
            self.guard.accept(Validator.of(response, total), self.file.offset, link.job_id)
        elif status == 416:
            self.whole_already(response, link)
            return
        else:
            refuse(response, link, self.now)
        self.receiver.receive(response, link)

    def whole_already(self, response: httpx.Response, link: BundleLink) -> None:
        """A 416 is the end only when its total is what the file holds; else start over."""
        offset = self.file.offset
        _, total = parse_content_range(response.headers.get("Content-Range"))
        if self.guard.complete_at(total, offset) and total is not None:
            self.guard.check_announced(total, "the server", link.job_id)
            return
        raise Restart(f"the server cannot serve bytes from {offset} (416)")


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


def refuse(response: httpx.Response, link: BundleLink, now: Callable[[], datetime]) -> None:
    """Raise what a storage host's refusal means: refresh, retry, or give up for good."""
    status = response.status_code
    body = _read_limited(response)
    where = safe_url(link.url)
    if status == 403 and is_expired_answer(status, body):
        raise Refresh()
    if status in (408, 425, 429) or status >= 500:
        raise Retry(f"HTTP {status}", parse_retry_after(response.headers.get("Retry-After"), now()))
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
    raise Retry(f"HTTP {status} ({detail})")


def _read_limited(response: httpx.Response) -> str:
    data = b""
    for chunk in response.iter_raw():
        data += chunk
        if len(data) >= _ERROR_BODY_LIMIT:
            break
    return data[:_ERROR_BODY_LIMIT].decode("utf-8", "replace")
