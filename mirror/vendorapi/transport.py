"""The request side of the vendor's admin API: one request with the key, its answer read
capped, and the retry policy around it (described in `mirror.vendorapi.client`'s docstring).

Promises: the API key travels only in the Authorization header of requests to `base_url`
and is scrubbed from every message; `exchange` answers with a 2xx or an answer retrying
cannot change, or raises one TemporaryFailure (StartRefused for a start that provably
created no job) naming the endpoint and the last failure; a start is retried only when
the request provably was not acted on.
"""

from __future__ import annotations

import logging
import socket
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NoReturn

import httpx
import stamina
from stamina.instrumentation import RetryDetails, get_on_retry_hooks

from mirror import __version__
from mirror.errors import ConfigError, MirrorError, TemporaryFailure
from mirror.logs import REDACTED, redact
from mirror.vendorapi.answers import (
    CUT,
    ERROR_BODY_LIMIT,
    RETRYABLE_STATUSES,
    json_object,
    one_line,
    status_error,
    vendor_text,
)
from mirror.vendorapi.retry import Backoff, parse_retry_after

log = logging.getLogger("mirror.vendorapi.client")  # one logger for the vendor API
RETRY_NAME = "mirror.vendorapi.client.VendorClient"  # a Prometheus label: fixed, no job ids

USER_AGENT = f"mirror/{__version__}"
START_RETRYABLE_STATUSES = frozenset({408, 503})
NOT_SENT_ERRORS: tuple[type[httpx.TransportError], ...] = (
    httpx.ConnectError,
    httpx.ConnectTimeout,
    httpx.PoolTimeout,
)
RETRYABLE_ERRORS: tuple[type[httpx.TransportError], ...] = (
    httpx.TimeoutException,
    httpx.NetworkError,
    httpx.RemoteProtocolError,
    httpx.ProxyError,
)
DNS_ATTEMPTS = 3
DNS_WAIT_MAX = 1.0
JSON_BODY_LIMIT = 1024 * 1024


def name_resolution_error(exc: BaseException) -> socket.gaierror | None:
    """The socket.gaierror behind a transport error (httpx chains it as a cause), if any."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, socket.gaierror):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


class StartRefused(TemporaryFailure):
    """A start that provably created no job at the vendor: it answered 409, 429, 408 or 503,
    or the connection failed before the request was sent. Safe to start again later."""


class RetryableStatus(Exception):
    """A retryable HTTP answer (408, 429, 5xx): the cause reported to stamina's retry hooks."""

    def __init__(self, status: int, endpoint: str) -> None:
        super().__init__(f"HTTP {status} from {endpoint}")
        self.status = status


@dataclass(frozen=True)
class _Failed:
    """One attempt that is worth retrying: what went wrong, for the log and the last error."""

    last: str
    cause: Exception
    retry_after: float | None = None
    unresolved: socket.gaierror | None = None


class AdminTransport:
    """Requests to the admin API at `base_url` with the key, under the retry policy."""

    def __init__(
        self,
        http: httpx.Client,
        *,
        base_url: str,
        key: str,
        retry_attempts: int,
        retry_timeout: float,
        backoff: Backoff,
        sleep: Callable[[float], None],
        clock: Callable[[], float],
        wall_clock: Callable[[], datetime],
    ) -> None:
        self.http = http
        self.base_url = base_url
        self.retry_attempts = max(1, retry_attempts)
        self.retry_timeout = retry_timeout
        self.backoff = backoff
        self._key = key
        self._sleep = sleep
        self._clock = clock
        self._wall_clock = wall_clock

    def send(self, method: str, path: str, body: dict[str, Any] | None) -> httpx.Response:
        """One request with the key, its answer read capped; no retry."""
        started = time.monotonic()
        try:
            request = self.http.build_request(
                method,
                self.base_url + path,
                json=body,
                headers={"Authorization": f"Bearer {self._key}", "Accept": "application/json"},
            )
            response = _read_capped(self.http.send(request, stream=True), f"{method} {path}")
        except httpx.TransportError as exc:
            log.debug(
                "vendor API %s %s failed after %.3fs: %s",
                method,
                path,
                time.monotonic() - started,
                type(exc).__name__,
                extra={"method": method, "path": path, "error": type(exc).__name__},
            )
            raise
        elapsed = time.monotonic() - started
        log.debug(
            "vendor API %s %s -> %d in %.3fs",
            method,
            path,
            response.status_code,
            elapsed,
            extra={
                "method": method,
                "path": path,
                "status": response.status_code,
                "elapsed": round(elapsed, 3),
            },
        )
        return response

    def exchange(
        self,
        method: str,
        path: str,
        *,
        what: str,
        operation: str,
        body: dict[str, Any] | None = None,
        start: bool = False,
    ) -> httpx.Response:
        """Send with the retry policy; the answer is 2xx or one that retrying cannot change."""
        endpoint = f"{method} {path}"
        started = self._clock()
        attempt, waited = 0, 0.0
        while True:
            attempt += 1
            tried = self._try_once(method, path, body, what=what, start=start)
            if isinstance(tried, httpx.Response):
                return tried
            wait = self.backoff.delay(attempt, tried.retry_after)
            attempts = self.retry_attempts
            if tried.unresolved is not None:
                wait = min(wait, DNS_WAIT_MAX)
                attempts = min(attempts, DNS_ATTEMPTS)
            elapsed = self._clock() - started
            spent = attempt >= attempts or elapsed + wait > self.retry_timeout
            if spent or not stamina.is_active():
                self._give_up(tried, endpoint, what, start=start, attempt=attempt, elapsed=elapsed)
            described = {"what": self.scrub(f"vendor API {endpoint} ({what})")}
            described["reason"] = self.scrub(tried.last)
            report_retry(operation, attempt, wait, waited, tried.cause, described, attempts)
            self._sleep(wait)
            waited += wait

    def _try_once(
        self, method: str, path: str, body: dict[str, Any] | None, *, what: str, start: bool
    ) -> httpx.Response | _Failed:
        """One attempt: the final answer, or what failed when a retry may help."""
        endpoint = f"{method} {path}"
        try:
            response = self.send(method, path, body)
        except httpx.TransportError as exc:
            hopeless = hopeless_error(exc, endpoint, what, start=start, base_url=self.base_url)
            if hopeless is not None:
                raise hopeless from exc
            last = f"{type(exc).__name__}: {one_line(str(exc)) or 'no detail'}"
            return _Failed(last, exc, unresolved=name_resolution_error(exc))
        if not retryable(response.status_code, start=start):
            return response
        text = vendor_text(response)
        return _Failed(
            f"HTTP {response.status_code}{': ' + text if text else ''}",
            RetryableStatus(response.status_code, endpoint),
            retry_after=self.retry_after(response),
        )

    def _give_up(
        self, tried: _Failed, endpoint: str, what: str, *, start: bool, attempt: int, elapsed: float
    ) -> NoReturn:
        unresolved = tried.unresolved
        error = exhausted_error(
            StartRefused if start else TemporaryFailure,
            f"{endpoint}, {what}" if unresolved is not None else f"{endpoint} ({what})",
            attempt=attempt,
            elapsed=elapsed,
            last=self.scrub(tried.last),
            retry_after=tried.retry_after,
            unresolved=unresolved,
            host=httpx.URL(self.base_url).host,
        )
        quiet = unresolved is not None or isinstance(tried.cause, RetryableStatus)
        raise error from (None if quiet else tried.cause)

    def check(self, response: httpx.Response, method: str, path: str, *, what: str) -> Any:
        """The JSON object of a 2xx answer; anything else becomes the matching MirrorError."""
        endpoint = f"{method} {path}"
        if 200 <= response.status_code < 300:
            return json_object(response, endpoint, what)
        raise status_error(
            response, endpoint, what, retry_after=self.retry_after(response), scrub=self.scrub
        )

    def retry_after(self, response: httpx.Response) -> float | None:
        return parse_retry_after(response.headers.get("Retry-After"), self._wall_clock())

    def scrub(self, text: str) -> str:
        return redact(text.replace(self._key, REDACTED))


def retryable(status: int, *, start: bool) -> bool:
    """Whether an answer is worth asking again: 408, 429 and 5xx for a read; for a start only
    408 and 503, the answers that say the vendor did not take the request."""
    if start:
        return status in START_RETRYABLE_STATUSES
    return status in RETRYABLE_STATUSES or status >= 500


def hopeless_error(
    exc: httpx.TransportError, endpoint: str, what: str, *, start: bool, base_url: str
) -> MirrorError | None:
    """The error for a transport failure no retry can help (None: worth retrying).

    An untrusted TLS certificate is a ConfigError; a failure that is no network trouble
    (an invalid URL, say) a MirrorError; a start whose request may have reached the
    vendor a TemporaryFailure, since retrying it could start a second job.
    """
    detail = redact(one_line(str(exc)) or type(exc).__name__)
    if "CERTIFICATE_VERIFY_FAILED" in str(exc):
        return ConfigError(
            f"TLS certificate of {base_url} not trusted ({endpoint}): {detail}",
            hint="set api.ca_bundle to the CA file of your TLS-intercepting proxy",
        )
    if not isinstance(exc, RETRYABLE_ERRORS):
        return MirrorError(
            f"cannot call vendor API {endpoint} ({what}): {type(exc).__name__}: {detail}; "
            "check api.base_url"
        )
    if start and not isinstance(exc, NOT_SENT_ERRORS):
        return TemporaryFailure(
            f"{what}: the connection failed after the request was sent "
            f"({type(exc).__name__}: {detail}); the vendor may or may not have started a job",
            hint="not retried to avoid a second job; the next run picks it up",
        )
    return None


def exhausted_error(
    failure: type[TemporaryFailure],
    call: str,
    *,
    attempt: int,
    elapsed: float,
    last: str,
    retry_after: float | None,
    unresolved: socket.gaierror | None,
    host: str,
) -> TemporaryFailure:
    """The error once the retries of `call` are spent (a host that never resolved says so)."""
    if unresolved is not None:
        return failure(
            f"cannot resolve the vendor API host {host!r} ({call}): "
            f"{unresolved.strerror or unresolved}, tried {_times(attempt)}",
            hint="check api.base_url and this host's DNS resolver",
        )
    return failure(
        f"vendor API {call} still failing after {attempt} "
        f"attempt{'s' if attempt != 1 else ''} in {elapsed:.0f}s; last: {last}",
        hint="the vendor or the network is having trouble; try again later",
        retry_after=retry_after,
    )


def report_retry(
    operation: str,
    attempt: int,
    wait: float,
    waited: float,
    cause: Exception,
    described: dict[str, str],
    attempts: int,
) -> None:
    """Tell stamina's instrumentation hooks (log line, Prometheus counter) of a retry."""
    # A fixed name per operation: it is a Prometheus label, so no job ids in it.
    # `kwargs` describe the call for mirror.logs.log_retry's line.
    details = RetryDetails(
        name=f"{RETRY_NAME}.{operation}",
        args=(),
        kwargs={**described, "attempts": attempts},
        retry_num=attempt,
        wait_for=wait,
        waited_so_far=waited,
        caused_by=cause,
    )
    for hook in get_on_retry_hooks():
        hook(details)


def _times(count: int) -> str:
    return f"{count} time{'s' if count != 1 else ''}"


def _read_capped(response: httpx.Response, endpoint: str) -> httpx.Response:
    """The answer with its body read streamed, at most JSON_BODY_LIMIT bytes (2xx) or
    ERROR_BODY_LIMIT (anything else), so memory stays flat whatever the vendor sends.

    A longer 2xx body is refused (MirrorError); a longer error body is cut, and its
    answer is marked so the message says so instead of quoting it.
    """
    limit = JSON_BODY_LIMIT if 200 <= response.status_code < 300 else ERROR_BODY_LIMIT
    body = bytearray()
    cut = False
    try:
        for chunk in response.iter_bytes():
            body += chunk
            if len(body) > limit:
                cut = True
                break
    finally:
        response.close()
    if cut and limit == JSON_BODY_LIMIT:
        raise MirrorError(
            f"vendor API {endpoint} answered HTTP {response.status_code} with a body of over "
            f"{JSON_BODY_LIMIT // (1024 * 1024)} MiB; it was cut unread (no job answer is that "
            "big); check api.base_url or report it to the vendor"
        )
    headers = [
        (name, value)
        for name, value in response.headers.multi_items()
        if name.lower() not in ("content-encoding", "content-length", "transfer-encoding")
    ]
    capped = httpx.Response(
        response.status_code,
        headers=headers,
        content=bytes(body[:limit]),
        request=response.request,
        extensions={**response.extensions, CUT: cut},
    )
    return capped


def build_http_client(*, timeout: float, ca_bundle: str = "") -> httpx.Client:
    """The shared httpx client: timeouts, the default CAs plus `ca_bundle`, the User-Agent.

    It carries no credentials: the API key is added per request to the vendor's API only,
    so the same client can fetch presigned links on other hosts.
    """
    verify: ssl.SSLContext | bool = True
    if ca_bundle:
        import certifi

        context = ssl.create_default_context(cafile=certifi.where())
        try:
            context.load_verify_locations(cafile=ca_bundle)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(
                f"api.ca_bundle: cannot load CA file {ca_bundle}: "
                f"{getattr(exc, 'strerror', None) or exc}"
            ) from None
        verify = context
    return httpx.Client(
        timeout=httpx.Timeout(timeout),
        verify=verify,
        headers={"User-Agent": USER_AGENT},
        follow_redirects=False,
    )
