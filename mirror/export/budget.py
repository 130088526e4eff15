"""The start budget: `api.max_starts_per_hour` vendor starts per rolling hour, shared by
all domains and all replicas sharing the index.

Promises: a start counts from its `vendor_started_at` stamp, stamped before the vendor is
asked (an unknown start is never free); a check and its stamp are serialised by an
advisory lock on PostgreSQL and by the write lock on SQLite, so two replicas never both
take the last start.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from sqlalchemy import select, text
from sqlalchemy.orm import Session

from mirror.errors import TemporaryFailure
from mirror.store.models import ExportRun

_BUDGET_LOCK_KEY = 0x6D69_7272_6F72  # "mirror": serialises start-budget checks on PostgreSQL


def budget_wait(started: Sequence[datetime], now: datetime, per_hour: int) -> float:
    """Seconds until another start fits in `per_hour` starts per rolling hour (0 = now).

    `started` are the start times within the last hour, oldest first.
    """
    if per_hour <= 0 or len(started) < per_hour:
        return 0.0
    frees_at = started[len(started) - per_hour] + timedelta(hours=1)
    return max((frees_at - now).total_seconds(), 0.001)


def start_budget_wait(
    session: Session, now: datetime, per_hour: int, *, exclude_run_id: int | None = None
) -> float:
    """Seconds until a start is allowed (0 = now), from the vendor starts of the last hour.

    The budget is shared by all domains (and all replicas sharing the database).
    """
    query = (
        select(ExportRun.vendor_started_at)
        .where(ExportRun.vendor_started_at > now - timedelta(hours=1))
        .order_by(ExportRun.vendor_started_at)
    )
    if exclude_run_id is not None:
        query = query.where(ExportRun.id != exclude_run_id)
    started = [when for when in session.scalars(query) if when is not None]
    return budget_wait(started, now, per_hour)


def check_start_budget(
    session: Session, now: datetime, per_hour: int, domain: str, run_id: int | None
) -> None:
    """Raise TemporaryFailure when the shared start budget has no room now (locks it on
    PostgreSQL until the transaction ends; SQLite's write lock already serialises it)."""
    if session.get_bind().dialect.name == "postgresql":
        session.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _BUDGET_LOCK_KEY})
    wait = start_budget_wait(session, now, per_hour, exclude_run_id=run_id)
    if wait > 0:
        raise TemporaryFailure(
            f"the start budget of {per_hour} vendor exports per hour is spent; "
            f"{domain} starts in {wait:.0f}s",
            hint="api.max_starts_per_hour is shared by all domains",
            retry_after=wait,
        )


def budget_outlook(
    session: Session, now: datetime, per_hour: int, in_flight: int
) -> tuple[int, float, bool]:
    """For the scheduler: (starts allowed now, seconds until the next is, whether the index
    says the budget is spent); `in_flight` runs are about to start and count as spent."""
    starts = [
        started
        for started in session.scalars(
            select(ExportRun.vendor_started_at)
            .where(ExportRun.vendor_started_at >= now - timedelta(hours=1))
            .order_by(ExportRun.vendor_started_at)
        )
        if started is not None
    ]
    remaining = per_hour - len(starts) - in_flight
    spent = len(starts) >= per_hour
    if spent:
        return remaining, budget_wait(starts, now, per_hour) + 1.0, True
    return remaining, 5.0 if remaining <= 0 else 0.0, False
