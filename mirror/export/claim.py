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

The run once held, and every write to it, is `heldrun.HeldRun`; the budget's arithmetic
and lock are `budget`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime

import sqlalchemy.exc
from sqlalchemy import CursorResult, select, update
from sqlalchemy.orm import Session

from mirror.errors import TemporaryFailure
from mirror.export.budget import (
    budget_outlook,
    budget_wait,
    check_start_budget,
    start_budget_wait,
)
from mirror.export.deferrals import lock_domain
from mirror.export.heldrun import HeldRun, LostLease, RunSnapshot
from mirror.export.lease import (
    Heartbeat,
    HeldByOther,
    NotDue,
    lease_held_by_other,
    owner_host,
)
from mirror.fsutil import pid_alive
from mirror.store.app import App
from mirror.store.binding import StoreBinding
from mirror.store.models import ExportRun, RunState
from mirror.timestamps import rfc3339

__all__ = [
    "DueCheck",
    "LostLease",
    "RunClaim",
    "RunSnapshot",
    "budget_outlook",
    "budget_wait",
    "start_budget_wait",
    "warn_unknown_start",
]

log = logging.getLogger(__name__)

DueCheck = Callable[[Session, datetime], datetime | None]
"""Given the claim's transaction and now: None when the domain is due, else when it will be."""


class RunClaim:
    """The domain's active run as held by `owner`: claimed (taken over, or created when the
    domain is still due and the start budget has room), written under the lease, released."""

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
        self.per_hour = app.settings.api.max_starts_per_hour
        self.held = HeldRun(
            app.db, domain, owner=owner, now=now, lease_seconds=app.settings.daemon.lease
        )
        self.save = self.held.save  # every write to the run row is guarded by the lease
        self.release = self.held.release
        self.reserved_at_claim = False
        self.resumed = False

    @property
    def current(self) -> RunSnapshot:
        return self.held.current

    @property
    def heartbeat(self) -> Heartbeat | None:
        """The thread keeping our lease alive while the run is held."""
        return self.held.heartbeat

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
        binding = self.app.binding  # read (or bound) in its own transaction, before this one
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
                check_start_budget(session, now, self.per_hour, self.domain, None)
                created = self.add_run(session, now, binding)
        except sqlalchemy.exc.IntegrityError:
            return False  # another process created the domain's active run just now
        self.reserved_at_claim = True
        self.held.hold(created)
        return True

    def add_run(self, session: Session, now: datetime, binding: StoreBinding) -> RunSnapshot:
        """The new run's row, PENDING, its start stamped (budgeted) and leased to us."""
        row = ExportRun(
            domain=self.domain,
            active=True,
            state=RunState.PENDING,
            requested_version=self.version,
            requested_paths=list(self.paths) if self.paths is not None else None,
            vendor_started_at=now,
            bytes_done=0,
            lease_owner=self.owner,
            lease_expires_at=self.held.lease_until(),
            heartbeat_at=now,
            created_at=now,
            updated_at=now,
        )
        session.add(row)
        session.flush()
        row.partial_name = binding.partial_name(row.id)
        session.flush()
        return RunSnapshot.of(row)

    def check_due(self, session: Session, now: datetime) -> None:
        """Raise NotDue when `due_check` finds the domain exported since the caller looked."""
        due = self.due_check(session, now) if self.due_check is not None else None
        if due is not None:
            raise NotDue(
                f"{self.domain} is not due until {due.isoformat(timespec='seconds')} "
                "(another process exported it since this one looked)",
                due=due,
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
            check_start_budget(session, now, self.per_hour, self.domain, run.id)
            self.save(session, vendor_started_at=now)
        return run.vendor_started_at

    def take_over(self, existing: RunSnapshot) -> bool:
        """Take `existing` over when its lease is still the one we saw (compare-and-set)."""
        owner_match = (
            ExportRun.lease_owner.is_(None)
            if existing.lease_owner is None
            else ExportRun.lease_owner == existing.lease_owner
        )
        until = self.held.lease_until()
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
        self.held.hold(replace(existing, lease_owner=self.owner, lease_expires_at=until))
        self.resumed = True
        log_take_over(existing, self.owner)
        return True


def log_take_over(existing: RunSnapshot, owner: str) -> None:
    """Say whose run `owner` took over (when it was another's), and that it resumes."""
    domain = existing.domain
    if existing.lease_owner not in (None, owner):
        log.warning(
            "taking over the export run %d of %s from %s (its lease expired or its "
            "process is gone)",
            existing.id,
            domain,
            existing.lease_owner,
            extra={
                "domain": domain,
                "run_id": existing.id,
                "replica": owner,
                "previous_owner": existing.lease_owner,
                "lease_expired_at": _iso(existing.lease_expires_at),
            },
        )
    log.info(
        "resuming export run %d of %s in state %s",
        existing.id,
        domain,
        existing.state,
        extra={"domain": domain, "run_id": existing.id, "state": existing.state, "replica": owner},
    )


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
