"""The claim on a domain's export run: which process holds it, and every write guarded by that.

Promises:

- `RunClaim.claim()` gives this process the domain's active run, or creates one: a live
  lease of someone else raises HeldByOther; an expired lease, or one of a dead process on
  this host, is taken over (compare-and-set on the owner we saw, so two claimers never both
  win); a new run is created in one transaction that holds the domain's schedule row lock,
  re-checks with `due_check` that the domain is still due (NotDue otherwise) and reserves
  the vendor start in the shared budget.
- Every write to the run row (`save`) is guarded by the lease and renews it; a write that
  finds the lease gone raises LostLease, so a process that lost its run stops instead of
  overwriting its successor's work. A heartbeat thread (`lease.Heartbeat`) keeps the lease
  between writes; `release()` stops it and gives the lease up, the run staying resumable.
- The start budget (`api.max_starts_per_hour`, shared by all domains and replicas) is
  checked and stamped in one transaction, serialised by an advisory lock on PostgreSQL and
  the write lock on SQLite.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields, replace
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy.exc
from sqlalchemy import CursorResult, select, text, update
from sqlalchemy.orm import Session

from mirror.errors import TemporaryFailure
from mirror.export.deferrals import lock_domain
from mirror.export.lease import (
    Heartbeat,
    HeldByOther,
    NotDue,
    lease_held_by_other,
    owner_host,
)
from mirror.fsutil import pid_alive
from mirror.store.app import App
from mirror.store.models import ExportRun, RunState
from mirror.timestamps import rfc3339
from mirror.vendorapi.client import BundleLink

log = logging.getLogger(__name__)

_BUDGET_LOCK_KEY = 0x6D69_7272_6F72  # "mirror": serialises start-budget checks on PostgreSQL

DueCheck = Callable[[Session, datetime], datetime | None]
"""Given the claim's transaction and now: None when the domain is due, else when it will be."""


@dataclass(frozen=True)
class RunSnapshot:
    """The columns of an `export_runs` row that drive the state machine."""

    id: int
    domain: str
    state: str
    active: bool
    requested_version: str | None
    requested_paths: list[str] | None
    vendor_job_id: str | None
    vendor_started_at: datetime | None
    bundle_url: str | None
    bundle_expires_at: datetime | None
    expected_size: int | None
    partial_name: str | None
    bytes_done: int
    sha256: str | None
    version_label: str | None
    error: str | None
    lease_owner: str | None
    lease_expires_at: datetime | None
    finished_at: datetime | None
    page_count: int | None = None

    @classmethod
    def of(cls, row: ExportRun) -> RunSnapshot:
        return cls(**{f.name: getattr(row, f.name) for f in fields(cls)})

    def link(self) -> BundleLink | None:
        if not self.bundle_url or not self.vendor_job_id:
            return None
        return BundleLink(
            job_id=self.vendor_job_id,
            url=self.bundle_url,
            size_bytes=self.expected_size,
            expires_at=self.bundle_expires_at,
        )


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


class LostLease(TemporaryFailure):
    """Another process took the run over (our lease expired): this one stops."""


class RunClaim:
    """The domain's active run as held by `owner`: claimed, written under the lease, released."""

    def __init__(
        self,
        app: App,
        domain: str,
        *,
        owner: str,
        now: Callable[[], datetime],
        version: str | None = None,
        paths: list[str] | None = None,
        due_check: DueCheck | None = None,
    ) -> None:
        self.app = app
        self.db = app.db
        self.domain = domain
        self.owner = owner
        self.now = now
        self.version = version
        self.paths = paths
        self.due_check = due_check
        self.lease_seconds = app.settings.daemon.lease
        self.per_hour = app.settings.api.max_starts_per_hour
        self.heartbeat: Heartbeat | None = None
        self.reserved_at_claim = False
        self.resumed = False
        self.run: RunSnapshot | None = None

    @property
    def current(self) -> RunSnapshot:
        assert self.run is not None
        return self.run

    def lease_until(self) -> datetime:
        return self.now() + timedelta(seconds=self.lease_seconds)

    def save(self, session: Session | None = None, **values: Any) -> RunSnapshot:
        """Write `values` to the run row, guarded by our lease (and renewing it)."""
        values.setdefault("lease_expires_at", self.lease_until())
        values["updated_at"] = self.now()
        run = self.current
        statement = (
            update(ExportRun)
            .where(ExportRun.id == run.id, ExportRun.lease_owner == self.owner)
            .values(**values)
            .execution_options(synchronize_session=False)
        )
        if session is None:
            with self.db.session() as own:
                result = own.execute(statement)
                self._check_owned(result)
        else:
            self._check_owned(session.execute(statement))
        values.pop("updated_at")
        self.run = replace(run, **values)
        return self.run

    def _check_owned(self, result: Any) -> None:
        if not isinstance(result, CursorResult) or result.rowcount != 1:
            raise LostLease(
                f"export of {self.domain} (run {self.current.id}) was taken over by another "
                "process; this one stops",
                retry_after=self.lease_seconds,
            )

    def claim(self) -> None:
        """Take the domain's active run (or create one) under our lease."""
        for _ in range(5):
            with self.db.session() as session:
                row = session.scalars(
                    select(ExportRun).where(
                        ExportRun.domain == self.domain, ExportRun.active.is_(True)
                    )
                ).first()
                existing = RunSnapshot.of(row) if row is not None else None
            if existing is None:
                if self.create():
                    return
                continue
            if lease_held_by_other(
                existing.lease_owner,
                existing.lease_expires_at,
                me=self.owner,
                now=self.now(),
                host=owner_host(self.owner),
                pid_alive=pid_alive,
            ):
                assert existing.lease_expires_at is not None and existing.lease_owner
                raise HeldByOther(
                    f"domain {self.domain} is being exported by {existing.lease_owner} "
                    f"(run {existing.id}, {existing.state}); try again later",
                    until=existing.lease_expires_at,
                    owner=existing.lease_owner,
                )
            if self.take_over(existing):
                return
        raise TemporaryFailure(
            f"could not claim the export run of {self.domain}: other processes keep taking it; "
            "try again later"
        )

    def create(self) -> bool:
        """Create the domain's run, if it is still due, with its vendor start budgeted.

        All in one transaction under the domain's schedule row lock (PostgreSQL) or
        the database write lock (SQLite): a replica whose view is stale finds the run
        another one just finished and raises NotDue instead of exporting again.
        """
        binding = self.app.binding
        now = self.now()
        try:
            with self.db.session() as session:
                lock_domain(session, self.domain)
                active = session.scalars(
                    select(ExportRun.id).where(
                        ExportRun.domain == self.domain, ExportRun.active.is_(True)
                    )
                ).first()
                if active is not None:
                    return False  # claim again: take it over or report who holds it
                self.check_due(session, now)
                self.check_budget(session, now)
                row = ExportRun(
                    domain=self.domain,
                    active=True,
                    state=RunState.PENDING,
                    requested_version=self.version,
                    requested_paths=list(self.paths) if self.paths is not None else None,
                    vendor_started_at=now,
                    bytes_done=0,
                    lease_owner=self.owner,
                    lease_expires_at=self.lease_until(),
                    heartbeat_at=now,
                    created_at=now,
                    updated_at=now,
                )
                session.add(row)
                session.flush()
                row.partial_name = binding.partial_name(row.id)
                session.flush()
                self.run = RunSnapshot.of(row)
        except sqlalchemy.exc.IntegrityError:
            return False  # another process created the domain's active run just now
        self.reserved_at_claim = True
        self.start_heartbeat()
        return True

    def check_due(self, session: Session, now: datetime) -> None:
        """Raise NotDue when `due_check` finds the domain exported since the caller looked."""
        due = self.due_check(session, now) if self.due_check is not None else None
        if due is not None:
            raise NotDue(
                f"{self.domain} is not due until {due.isoformat(timespec='seconds')} "
                "(another process exported it since this one looked)",
                due=due,
            )

    def check_budget(self, session: Session, now: datetime) -> None:
        """Raise TemporaryFailure when the shared start budget has no room now (locks it on
        PostgreSQL until the transaction ends; SQLite's write lock already serialises it)."""
        if session.get_bind().dialect.name == "postgresql":
            session.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _BUDGET_LOCK_KEY})
        run_id = self.run.id if self.run is not None else None
        wait = start_budget_wait(session, now, self.per_hour, exclude_run_id=run_id)
        if wait > 0:
            raise TemporaryFailure(
                f"the start budget of {self.per_hour} vendor exports per hour is spent; "
                f"{self.domain} starts in {wait:.0f}s",
                hint="api.max_starts_per_hour is shared by all domains",
                retry_after=wait,
            )

    def reserve_start(self) -> datetime | None:
        """Check the shared start budget and stamp this run's start, in one transaction.

        Returns the stamp replaced, to put back when the vendor provably started nothing.
        A run this claim created was budgeted then and is not stamped again.
        """
        run = self.current
        if self.reserved_at_claim:
            self.reserved_at_claim = False
            return None
        warn_unknown_start(run, self.owner)
        now = self.now()
        with self.db.session() as session:
            self.save(session)  # first a write: on SQLite it serialises the budget check too
            self.check_budget(session, now)
            self.save(session, vendor_started_at=now)
        return run.vendor_started_at

    def start_heartbeat(self) -> None:
        self.heartbeat = Heartbeat(
            self.db, self.current.id, self.owner, self.lease_seconds, now=self.now
        ).start()

    def take_over(self, existing: RunSnapshot) -> bool:
        """Take `existing` over when its lease is still the one we saw (compare-and-set)."""
        owner_match = (
            ExportRun.lease_owner.is_(None)
            if existing.lease_owner is None
            else ExportRun.lease_owner == existing.lease_owner
        )
        until = self.lease_until()
        with self.db.session() as session:
            result = session.execute(
                update(ExportRun)
                .where(ExportRun.id == existing.id, ExportRun.active.is_(True), owner_match)
                .values(lease_owner=self.owner, lease_expires_at=until, updated_at=self.now())
                .execution_options(synchronize_session=False)
            )
            taken = isinstance(result, CursorResult) and result.rowcount == 1
        if not taken:
            return False
        self.run = replace(existing, lease_owner=self.owner, lease_expires_at=until)
        self.resumed = True
        self.start_heartbeat()
        if existing.lease_owner not in (None, self.owner):
            log.warning(
                "taking over the export run %d of %s from %s (its lease expired or its "
                "process is gone)",
                existing.id,
                self.domain,
                existing.lease_owner,
                extra={
                    "domain": self.domain,
                    "run_id": existing.id,
                    "replica": self.owner,
                    "previous_owner": existing.lease_owner,
                    "lease_expired_at": _iso(existing.lease_expires_at),
                },
            )
        log.info(
            "resuming export run %d of %s in state %s",
            existing.id,
            self.domain,
            existing.state,
            extra={
                "domain": self.domain,
                "run_id": existing.id,
                "state": existing.state,
                "replica": self.owner,
            },
        )
        return True

    def release(self) -> None:
        """Stop the heartbeat and give the lease up (the run stays active and resumable)."""
        if self.heartbeat is not None:
            self.heartbeat.stop()
        if self.run is None or not self.current.active:
            return
        try:
            with self.db.session() as session:
                self.save(session, lease_owner=None, lease_expires_at=None)
        except LostLease:
            pass
        except Exception as exc:  # never hide the error that brought us here
            log.warning("could not release the lease of run %d: %s", self.current.id, exc)


def warn_unknown_start(run: RunSnapshot, owner: str) -> None:
    """Say that an earlier start of `run` may have left an orphaned vendor job."""
    if run.vendor_started_at is None:
        return
    log.warning(
        "an earlier start of run %d of %s (at %s) ended without a job id (the process "
        "stopped or the answer was lost); the vendor may hold an orphaned job, and a "
        "one-active-job vendor refuses this start until it ends",
        run.id,
        run.domain,
        rfc3339(run.vendor_started_at),
        extra={"domain": run.domain, "run_id": run.id, "replica": owner},
    )


def _iso(value: datetime | None) -> str | None:
    return value.isoformat(timespec="seconds") if value is not None else None


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
