"""What a daemon run comes to, whatever it raised (mirror.export.worker.Worker.result_of)."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from sqlalchemy.exc import OperationalError

from mirror.errors import AuthError, Interrupted, OperationFailed, TemporaryFailure
from mirror.export.lease import HeldByOther, NotDue
from mirror.export.metrics import DaemonMetrics
from mirror.export.runner import JobTimedOut
from mirror.export.worker import DB_RETRY_SECONDS, Worker
from mirror.store.app import App
from mirror.timestamps import utcnow

DOMAIN = "docs.worker.test"


@pytest.fixture
def worker(app: App) -> Worker:
    errors: list[str] = []
    return Worker(
        app,
        "node-a:1:aaaa",
        threading.Event(),
        DaemonMetrics(),
        on_event=lambda _e: None,
        on_error=lambda where, _exc: errors.append(where),
    )


def test_each_error_maps_to_one_outcome(worker: Worker) -> None:
    later = utcnow() + timedelta(seconds=30)
    cases = [
        (Interrupted("stopped"), "interrupted", True),
        (HeldByOther("held", until=later, owner="node-b:2:bbbb"), "deferred", False),
        (NotDue("not due", due=later), "deferred", False),
        (TemporaryFailure("busy", retry_after=12.0), "deferred", True),
        (OperationFailed("job failed"), "failed", True),
        (AuthError("refused"), "failed", True),
        (ValueError("bug"), "failed", True),
    ]
    for exc, outcome, shared in cases:
        result = worker.result_of(DOMAIN, exc)
        assert (result.outcome, result.shared) == (outcome, shared), exc
    assert worker.result_of(DOMAIN, TemporaryFailure("busy", retry_after=12.0)).retry_after == 12
    index = worker.result_of(DOMAIN, OperationalError("SELECT", {}, Exception("locked")))
    assert (index.outcome, index.retry_after) == ("deferred", DB_RETRY_SECONDS)


def test_a_job_timeout_is_counted_and_a_cancel_makes_every_error_an_interruption(
    worker: Worker,
) -> None:
    assert worker.result_of(DOMAIN, JobTimedOut("slow")).outcome == "deferred"
    timeouts = worker.metrics.registry.get_sample_value(
        "mirror_job_timeouts_total", {"domain": DOMAIN}
    )
    assert timeouts == 1
    worker.cancel.set()
    for exc in (TemporaryFailure("cut"), OperationFailed("x"), OSError("disk")):
        assert worker.result_of(DOMAIN, exc).outcome == "interrupted"
