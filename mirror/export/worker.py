"""One daemon run in a worker thread: a vendor client of its own, `run_export`, one result.

Promises: `run_in_worker` never raises. Its RunResult says what the daemon records:
stored/unchanged (with the version), deferred (with the vendor's or the lease's wait;
`shared=False` when another replica holds the run or the domain is no longer due, so
nothing is persisted), failed, or interrupted (whenever the cancel event is set, whatever
the error on the way out). An index error defers the run by DB_RETRY_SECONDS; a job
timeout is counted in `mirror_job_timeouts_total`. The client and its connections are
closed in every case.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from sqlalchemy.exc import SQLAlchemyError

from mirror.config import Settings
from mirror.errors import Interrupted, MirrorError, TemporaryFailure
from mirror.export.claim import DueCheck
from mirror.export.lease import HeldByOther, NotDue
from mirror.export.metrics import DaemonMetrics
from mirror.export.outcome import RunEvent
from mirror.export.runner import JobTimedOut, run_export
from mirror.store.app import App
from mirror.vendorapi.client import VendorClient
from mirror.vendorapi.transport import build_http_client

log = logging.getLogger(__name__)

DB_RETRY_SECONDS = 5.0
Outcome = Literal["stored", "unchanged", "failed", "deferred", "interrupted"]


@dataclass(frozen=True)
class RunResult:
    domain: str
    outcome: Outcome
    message: str = ""
    retry_after: float | None = None
    version: str | None = None
    shared: bool = True  # False: held by another replica or not due; nothing to persist


@dataclass(frozen=True)
class Worker:
    """What every run of one daemon shares."""

    app: App
    owner: str
    cancel: threading.Event
    metrics: DaemonMetrics
    on_event: Callable[[RunEvent], None]
    on_error: Callable[[str, BaseException], None]

    def sleep(self, seconds: float) -> None:
        self.cancel.wait(seconds)

    def client(self, settings: Settings) -> VendorClient:
        api = settings.api
        return VendorClient(
            build_http_client(timeout=api.timeout, ca_bundle=api.ca_bundle),
            base_url=api.base_url,
            key=settings.api_key(),
            project_id=api.project_id,
            export_flow=api.export_flow,
            retry_attempts=api.retry_attempts,
            retry_timeout=api.retry_timeout,
            sleep=self.sleep,
        )

    def run(self, domain: str, settings: Settings, due_check: DueCheck) -> RunResult:
        """One run of `domain`; never raises."""
        client: VendorClient | None = None
        try:
            client = self.client(settings)
            outcome = run_export(
                self.app,
                client,
                domain,
                cancel=self.cancel,
                on_event=self.on_event,
                sleep=self.sleep,
                owner=self.owner,
                due_check=due_check,
            )
            return RunResult(domain, outcome.state, version=outcome.ref.label)
        except Exception as exc:
            return self.result_of(domain, exc)
        finally:
            if client is not None:
                client.close()
                client.http.close()

    def result_of(self, domain: str, exc: Exception) -> RunResult:
        """What a run that raised `exc` comes to."""
        if isinstance(exc, Interrupted):
            return RunResult(domain, "interrupted", str(exc))
        if isinstance(exc, HeldByOther | NotDue):
            return RunResult(domain, "deferred", str(exc), exc.retry_after, shared=False)
        if isinstance(exc, SQLAlchemyError):
            self.on_error(f"the run of {domain}", exc)
            return RunResult(domain, "deferred", f"index error: {short(exc)}", DB_RETRY_SECONDS)
        if self.cancel.is_set():
            detail = str(exc) if isinstance(exc, MirrorError) else f"{type(exc).__name__}: {exc}"
            return RunResult(domain, "interrupted", detail)
        if isinstance(exc, TemporaryFailure):
            if isinstance(exc, JobTimedOut):
                self.metrics.job_timeouts.labels(domain=domain).inc()
            return RunResult(domain, "deferred", str(exc), retry_after=exc.retry_after)
        if isinstance(exc, MirrorError):
            return RunResult(domain, "failed", str(exc))
        log.exception("unexpected error in the run of %s", domain, extra={"domain": domain})
        return RunResult(domain, "failed", f"unexpected error: {type(exc).__name__}: {exc}")


def short(exc: BaseException, limit: int = 300) -> str:
    """An error's text on one line, cut to `limit` characters."""
    text = " ".join(str(exc).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
