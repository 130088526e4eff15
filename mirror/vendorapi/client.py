"""The vendor's admin API: static-export jobs and agent jobs, over one injected httpx client.

What callers can rely on:

- The answers are plain frozen dataclasses (`ExportJob`, `BundleLink`, `AgentJob`) parsed
  tolerantly: an unknown or missing job state means "still running"; `progress` and
  `pageCount` may be numbers, numeric strings ("42", "42%") or absent (then None); a missing
  `sizeBytes` or `expiresAt` is fine; any 2xx answer is success. A count (`pageCount`,
  `sizeBytes`) has one bound, `parse_count`'s (below BIGINT's limit), checked here before it
  reaches the index; every column that stores one is BIGINT, on SQLite and PostgreSQL alike,
  so a count the parser lets in is stored the same on both (a huge `pageCount` is then refused
  by the completeness check, exit 5, never by the database). A number past the bound (or
  negative) is refused here, exit 5 as well, never taken for "not reported".
- Both path styles (`api.export_flow`): "global" (`/v1/static-export/jobs`, `.../{id}`,
  `.../{id}/bundle`) and "project" (`/v1/static-export/{project_id}/jobs[/{id}]`, where the
  completed job's status carries the link). Whatever the flow, a status that carries a
  `bundleUrl` fills `ExportJob.bundle`, so the caller needs no bundle call then, and a
  fresh link comes from where the first came from: the status again when it carried the
  link, or when POST .../bundle answers 404/405 (the vendor's newer revision has no such call).
- Answers are read streamed with a cap: a 2xx body over 1 MiB is refused (MirrorError), an
  error body over 64 KiB is cut and said to be; memory stays flat whatever the vendor sends.
- A job id the vendor answers a start with is refused (OperationFailed, exit 1) when it is
  empty, `.` or `..`, over 256 characters or holds control characters: it would put the
  status call on another path.
- Errors are `mirror.errors` classes with one-line messages: 401/403 -> AuthError (never
  retried); 404 -> NotFound; 400 -> ConfigError; everything worth trying again later ->
  TemporaryFailure (exit 75). The admin API key only ever travels in the Authorization header
  of requests to `api.base_url` (never on the shared client, so presigned download links never
  see it); it is registered with `logs.register_secret` and scrubbed from every message.

Retry policy, and why it is a small loop rather than `stamina.retry_context`:
  Reads (job status, bundle link, agent job) are retried on connection errors, timeouts, 408,
  429 and 5xx with `mirror.vendorapi.retry`'s backoff (stamina's formula: exponential from
  `wait_initial`, capped at `wait_max`, plus up to `wait_jitter` of random jitter). A
  `Retry-After` header (delta seconds or an HTTP date) is the minimum wait for that attempt.
  The whole call is bounded by `retry_attempts` attempts and `retry_timeout` seconds in total;
  a wait that would pass the deadline is not started. Exhaustion raises TemporaryFailure
  naming the endpoint and the last failure, with `retry_after` set when the vendor gave one.
  stamina's `retry_context` sleeps through tenacity's own `time.sleep`/`time.monotonic` and
  treats a hook's backoff as a replacement for (not a floor under) its computed wait, so the
  clock and sleep could not be injected and `Retry-After` could not be a minimum. The loop
  below keeps stamina's semantics where it matters: the same jittered backoff formula,
  `stamina.is_active()` turns retries off, and every scheduled retry is reported to
  stamina's instrumentation hooks (`mirror.logs.log_retry`
  writes one readable line; stamina's Prometheus counter `stamina_retries_total`).
  A host name that does not resolve (socket.gaierror under httpx.ConnectError) is a
  misconfiguration or a resolver outage, not a busy vendor: it is tried `DNS_ATTEMPTS` times
  at most, `DNS_WAIT_MAX` seconds apart, then TemporaryFailure names the host.

Starting an export is not idempotent: a start that reached the vendor may have created a job
even when the answer got lost. So a start is retried only when the request provably was not
acted on: the connection failed before anything was sent (ConnectError, ConnectTimeout,
PoolTimeout), or the vendor answered 408 or 503 (it did not take the request). Any other
transport failure after sending, and 500/502/504, raise TemporaryFailure at once; the
exporter's persisted run state (job id saved before anything else) and the vendor's
one-active-job rule (409) then sort it out without ever starting a second job blindly.
409 and 429 on start are answered at once with TemporaryFailure(retry_after=...): the caller
defers the whole run, the client never waits them out. A failed start that provably created no
job raises the subclass StartRefused; any other TemporaryFailure from a start may hide a job.
"""

from __future__ import annotations

import logging
import math
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal, NoReturn
from urllib.parse import quote

import httpx

from mirror.errors import (
    AuthError,
    ConfigError,
    IntegrityError,
    MirrorError,
    OperationFailed,
    TemporaryFailure,
)
from mirror.logs import REDACTED, install_wanted_retry_log, register_secret
from mirror.timestamps import utcnow
from mirror.vendorapi.answers import (
    AUTH_HINT,
    vendor_text,
)
from mirror.vendorapi.retry import Backoff
from mirror.vendorapi.transport import (
    AdminTransport,
    StartRefused,
    build_http_client,
)

if TYPE_CHECKING:
    from mirror.config import Settings

log = logging.getLogger(__name__)
install_wanted_retry_log()  # every retry below is one readable warning (mirror.logs)

ExportFlow = Literal["global", "project"]
JOB_ID_MAX_LENGTH = 256


@dataclass(frozen=True)
class BundleLink:
    """A presigned link to a completed job's archive. It expires; ask `fresh_link` for another."""

    job_id: str
    url: str
    size_bytes: int | None
    expires_at: datetime | None

    def expired(self, now: datetime, margin: float = 0.0) -> bool:
        """Whether the link has expired at `now` (or will within `margin` seconds)."""
        if self.expires_at is None:
            return False
        return (self.expires_at - now).total_seconds() <= margin


@dataclass(frozen=True)
class ExportJob:
    """One reading of a static-export job. Any status but completed/failed means still running."""

    job_id: str
    status: str
    progress: float | None
    page_count: int | None
    error: str | None
    bundle: BundleLink | None

    @property
    def completed(self) -> bool:
        return self.status == "completed"

    @property
    def failed(self) -> bool:
        return self.status == "failed"


AGENT_TERMINAL = frozenset({"completed", "archived", "failed"})


@dataclass(frozen=True)
class AgentJob:
    """One reading of an agent job. Polling stops on completed, archived or failed."""

    id: str
    status: str
    repository: str
    ref: str | None
    model: str
    pr_link: str | None
    created_at: datetime | None
    archived_at: datetime | None

    @property
    def terminal(self) -> bool:
        return self.status in AGENT_TERMINAL

    @property
    def failed(self) -> bool:
        return self.status == "failed"


# --- tolerant parsing (pure) -------------------------------------------------------------------

_NUMBER = re.compile(r"\s*([-+]?\d+(?:\.\d+)?)\s*%?\s*")


def parse_number(value: object) -> float | None:
    """A finite number from a number or a numeric string ("42", "42.5", "42%"); else None."""
    number = _magnitude(value)
    return number if number is not None and math.isfinite(number) else None


def _magnitude(value: object) -> float | None:
    """The number `value` holds, infinite when it is past every float (an int of 400 digits,
    or a string of them: never an OverflowError); None when it holds none ("n/a", a bool)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, float):
        return value
    if isinstance(value, int):
        try:
            return float(value)
        except OverflowError:
            return math.inf if value > 0 else -math.inf
    if isinstance(value, str) and (match := _NUMBER.fullmatch(value)):
        return float(match.group(1))  # digits past every float are inf, not an error
    return None


_MAX_COUNT = float(2**63 - 1024)  # below BIGINT's limit, exactly representable


def parse_count(value: object, name: str = "count") -> int | None:
    """A whole count from a number or a numeric string; None when absent or not a number
    ("n/a"). A number no count can be (negative, infinite, or past the one bound every count
    from the vendor has, below BIGINT's limit so that it is stored alike on SQLite and
    PostgreSQL) is an answer that cannot be believed: IntegrityError (exit 5) naming the
    field `name`, the refusal a count within the bound the site does not match meets. Never
    "not reported": a `pageCount` of 2**63 read as absent turned the completeness check off,
    and so did one written as a string of 400 digits (trial37 D1)."""
    number = _magnitude(value)
    if number is None:
        return None
    if not 0 <= number < _MAX_COUNT:  # NaN fails this too
        raise IntegrityError(
            f"the vendor reported {name} {_shown(value)}, which no count can be (0 to "
            f"{int(_MAX_COUNT) - 1}); its answer is not believed: refused",
            hint="ask the vendor why; run again once it reports a real count",
        )
    return int(number)


def _shown(value: object) -> str:
    """A number from the vendor as a message shows it: at most 40 characters (str() of an
    int of more than 4,300 digits is itself an error)."""
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, int) and value.bit_length() > 128:
        return f"(a number of about {int(value.bit_length() * 0.30103)} digits)"
    return str(value)[:40]


_YEARS = range(1970, 9000)  # the one bound of a vendor's time: arithmetic on it never overflows


def parse_timestamp(value: object) -> datetime | None:
    """An aware UTC datetime from ISO 8601 text (with "Z" or an offset; naive means UTC);
    None for anything else, a time outside the years 1970-8999 included (year 9999 with a
    negative offset is past datetime's range: it ended a run in an OverflowError)."""
    if not isinstance(value, str) or not value.strip():
        return None
    text = value.strip()
    if text.endswith(("z", "Z")):
        text = text[:-1] + "+00:00"
    try:
        parsed = datetime.fromisoformat(text)
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=UTC)
        parsed = parsed.astimezone(UTC)
    except (ValueError, OverflowError):
        return None
    return parsed if parsed.year in _YEARS else None


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value != "" else None


def parse_bundle_link(body: Mapping[str, Any], job_id: str) -> BundleLink | None:
    """The link in a bundle answer or a completed status; None when it carries no `bundleUrl`."""
    url = _text(body.get("bundleUrl"))
    if url is None:
        return None
    return BundleLink(
        job_id=_text(body.get("jobId")) or job_id,
        url=url,
        size_bytes=parse_count(body.get("sizeBytes"), "sizeBytes"),
        expires_at=parse_timestamp(body.get("expiresAt")),
    )


def parse_export_job(
    body: Mapping[str, Any], job_id: str | None = None, default_status: str = "unknown"
) -> ExportJob | None:
    """A job reading from a status answer (`job_id` asked about) or a start answer (`job_id`
    None: the body's `jobId`); None when no job id can be found."""
    found_id = job_id or _text(body.get("jobId")) or _text(body.get("id"))
    if found_id is None:
        return None
    status = _text(body.get("status"))
    return ExportJob(
        job_id=found_id,
        status=status.strip().lower() if status else default_status,
        progress=parse_number(body.get("progress")),
        page_count=parse_count(body.get("pageCount"), "pageCount"),
        error=_text(body.get("error")),
        bundle=parse_bundle_link(body, found_id),
    )


def parse_agent_job(body: Mapping[str, Any], job_id: str) -> AgentJob:
    """An agent job reading; missing fields become empty or None, a missing status "unknown"."""
    source = body.get("source")
    source = source if isinstance(source, Mapping) else {}
    status = _text(body.get("status"))
    return AgentJob(
        id=_text(body.get("id")) or job_id,
        status=status.strip().lower() if status else "unknown",
        repository=_text(source.get("repository")) or "",
        ref=_text(source.get("ref")),
        model=_text(body.get("model")) or "",
        pr_link=_text(body.get("prLink")),
        created_at=parse_timestamp(body.get("createdAt")),
        archived_at=parse_timestamp(body.get("archivedAt")),
    )


def job_id_problem(job_id: str) -> str | None:
    """Why `job_id` cannot name a job in a URL path; None when it can.

    `.` and `..` are dot segments a client or proxy collapses (RFC 3986 5.2.4), so the
    status call would reach another resource; control characters and huge ids are no ids.
    """
    if not job_id.strip():
        return "it is empty"
    if job_id.strip() in (".", ".."):
        return "a dot segment would send the calls to another path"
    if len(job_id) > JOB_ID_MAX_LENGTH:
        return f"it is longer than {JOB_ID_MAX_LENGTH} characters"
    if any(ord(c) < 32 or 127 <= ord(c) < 160 for c in job_id):
        return "it holds control characters"
    return None


def shown_id(job_id: str) -> str:
    """A job id as it may appear in a one-line message (escaped, shortened)."""
    text = repr(job_id)
    return text if len(text) <= 80 else text[:77] + "..."


# --- the client --------------------------------------------------------------------------------


def _no_job_id(answered: object) -> str:
    return "no jobId" if answered is None else f"a jobId that is not text ({answered!r:.40})"


class VendorClient:
    """The vendor's admin API over an injected (and shared) httpx client."""

    def __init__(
        self,
        http: httpx.Client,
        *,
        base_url: str,
        key: str,
        project_id: str = "",
        export_flow: ExportFlow = "global",
        retry_attempts: int = 6,
        retry_timeout: float = 300.0,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
        wait_initial: float = 1.0,
        wait_max: float = 30.0,
        wait_jitter: float = 1.0,
        wall_clock: Callable[[], datetime] | None = None,
    ) -> None:
        _refuse_unusable(export_flow, key)
        register_secret(key)
        self.http = http
        self.base_url = base_url.rstrip("/")
        self.project_id = project_id.strip()
        self.export_flow: ExportFlow = export_flow
        self.transport = AdminTransport(
            http,
            base_url=self.base_url,
            key=key,
            retry_attempts=retry_attempts,
            retry_timeout=retry_timeout,
            backoff=Backoff(initial=wait_initial, maximum=wait_max, jitter=wait_jitter),
            sleep=sleep,
            clock=clock,
            wall_clock=wall_clock or utcnow,
        )
        self._links_in_status: set[str] = set()

    @classmethod
    def from_settings(cls, settings: Settings, http: httpx.Client | None = None) -> VendorClient:
        """A client for `settings.api`; builds the httpx client (timeout, CA, User-Agent)."""
        api = settings.api
        key = settings.api_key()
        if http is None:
            http = build_http_client(timeout=api.timeout, ca_bundle=api.ca_bundle)
        return cls(
            http,
            base_url=api.base_url,
            key=key,
            project_id=api.project_id,
            export_flow=api.export_flow,
            retry_attempts=api.retry_attempts,
            retry_timeout=api.retry_timeout,
        )

    def __repr__(self) -> str:
        return (
            f"VendorClient(base_url={self.base_url!r}, key={REDACTED!r}, "
            f"project_id={self.project_id!r}, export_flow={self.export_flow!r})"
        )

    # --- static export ---

    def start_export(
        self, domain: str, *, version: str | None = None, paths: list[str] | None = None
    ) -> ExportJob:
        """Start one export job (never retried once it may have reached the vendor)."""
        body: dict[str, Any] = {"domain": domain}
        if version is not None:
            body["version"] = version
        if paths is not None:
            body["paths"] = list(paths)
        path = self._jobs_path()
        what = f"export start for {domain}"
        response = self.transport.exchange(
            "POST", path, what=what, body=body, start=True, operation="start_export"
        )
        if response.status_code in (409, 429):
            self._refuse_start(response, domain)
        data = self.transport.check(response, "POST", path, what=what)
        answered = data.get("jobId", data.get("id"))
        problem = job_id_problem(answered) if isinstance(answered, str) else None
        if isinstance(answered, str) and problem is not None:
            raise OperationFailed(
                f"the vendor answered the export start for {domain} with the job id "
                f"{shown_id(answered)} (POST {path}), which mirror refuses: {problem}"
            )
        job = parse_export_job(data, default_status="queued")
        if job is None:
            raise MirrorError(
                f"the vendor accepted the export start for {domain} but sent "
                f"{_no_job_id(answered)} (POST {path}); check api.base_url and api.export_flow"
            )
        return job

    def export_status(self, job_id: str) -> ExportJob:
        """The job's current state (with its link when the status carries `bundleUrl`)."""
        path = self._job_path(job_id)
        what = f"export job {job_id}"
        response = self.transport.exchange("GET", path, what=what, operation="export_status")
        data = self.transport.check(response, "GET", path, what=what)
        job = parse_export_job(data, job_id)
        assert job is not None
        if job.bundle is not None:
            self._links_in_status.add(job_id)
        return job

    def export_bundle(self, job_id: str) -> BundleLink:
        """A link to the completed job's archive, from wherever the vendor gives it.

        POST .../bundle in the global flow; the status in the project flow, for a job whose
        status carried `bundleUrl`, and when POST .../bundle answers 404 or 405 (the newer
        vendor revision has no such call: its completed status carries the link).
        """
        if self.export_flow == "project" or job_id in self._links_in_status:
            return self._link_from_status(job_id)
        path = self._job_path(job_id) + "/bundle"
        what = f"bundle of export job {job_id}"
        response = self.transport.exchange("POST", path, what=what, operation="export_bundle")
        if response.status_code in (404, 405):
            log.info(
                "POST %s answered HTTP %d: reading the link from the job's status",
                path,
                response.status_code,
            )
            self._links_in_status.add(job_id)
            return self._link_from_status(job_id)
        if response.status_code == 409:
            text = vendor_text(response)
            raise TemporaryFailure(
                self.transport.scrub(
                    f"export job {job_id} has not finished yet, so the vendor has no bundle "
                    f"(HTTP 409 on POST {path}{': ' + text if text else ''})"
                ),
                hint="poll the job until it is completed, then ask for the bundle",
            )
        data = self.transport.check(response, "POST", path, what=what)
        link = parse_bundle_link(data, job_id)
        if link is None:
            raise MirrorError(
                f"the vendor's bundle answer for export job {job_id} carries no bundleUrl "
                f"(POST {path}); try again later or report it to the vendor"
            )
        return link

    def fresh_link(self, job_id: str) -> BundleLink:
        """A new link for a completed job, whichever the flow (the old one expired or failed)."""
        return self.export_bundle(job_id)

    def _link_from_status(self, job_id: str) -> BundleLink:
        job = self.export_status(job_id)
        if job.failed:
            raise OperationFailed(
                f"export job {job_id} failed at the vendor: {job.error or 'no reason given'}"
            )
        if not job.completed:
            raise TemporaryFailure(
                f"export job {job_id} is still {job.status}, so the vendor has no bundle yet",
                hint="poll the job until it is completed",
            )
        if job.bundle is None:
            raise TemporaryFailure(
                f"export job {job_id} is completed but its status carries no bundleUrl yet",
                hint="try again in a moment",
            )
        return job.bundle

    # --- agent jobs ---

    def agent_job(self, job_id: str, project_id: str | None = None) -> AgentJob:
        """One reading of an agent job in `project_id` (default: api.project_id)."""
        project = (project_id or self.project_id).strip()
        if not project:
            raise ConfigError(
                "reading an agent job needs a project id; set api.project_id or pass --project"
            )
        path = f"/v2/agent/{_segment(project)}/job/{_segment(job_id)}"
        what = f"agent job {job_id}"
        response = self.transport.exchange("GET", path, what=what, operation="agent_job")
        data = self.transport.check(response, "GET", path, what=what)
        return parse_agent_job(data, job_id)

    # --- lifecycle ---

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> VendorClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- paths ---

    def _jobs_path(self) -> str:
        if self.export_flow == "global":
            return "/v1/static-export/jobs"
        if not self.project_id:
            raise ConfigError(
                "api.export_flow is 'project' but api.project_id is empty; "
                "set api.project_id (copy it from the vendor's API keys page)"
            )
        return f"/v1/static-export/{_segment(self.project_id)}/jobs"

    def _job_path(self, job_id: str) -> str:
        problem = job_id_problem(job_id)
        if problem is not None:
            raise ConfigError(f"{shown_id(job_id)} is not a usable export job id: {problem}")
        return f"{self._jobs_path()}/{_segment(job_id)}"

    def _refuse_start(self, response: httpx.Response, domain: str) -> NoReturn:
        status = response.status_code
        retry_after = self.transport.retry_after(response)
        text = vendor_text(response)
        reason = (
            "another export job is still active"
            if status == 409
            else "the vendor's start rate limit is reached"
        )
        when = f"in {retry_after:.0f}s" if retry_after is not None else "later"
        raise StartRefused(
            self.transport.scrub(
                f"vendor refused to start an export of {domain} now: {reason} "
                f"(HTTP {status}{': ' + text if text else ''})"
            ),
            hint=f"start it again {when}",
            retry_after=retry_after,
        )


def _segment(value: str) -> str:
    return quote(value.strip(), safe="")


def _refuse_unusable(export_flow: str, key: str) -> None:
    """ConfigError or AuthError for settings no request could work with."""
    if export_flow not in ("global", "project"):
        raise ConfigError(f"api.export_flow must be 'global' or 'project', got {export_flow!r}")
    if not key or not key.isascii() or not key.isprintable() or key.strip() != key:
        raise AuthError(
            "the admin API key is empty or holds characters an HTTP header cannot carry",
            hint=AUTH_HINT,
        )
