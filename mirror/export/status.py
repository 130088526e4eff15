"""Per-domain status read from the index, and the scheduler's view of each domain.

Works with or without a running daemon: everything comes from the database
(runs, versions, DomainSchedule), and the next due time is computed with the
same pure function the daemon uses (`scheduler.eligible_at`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session, aliased

from mirror.config import ExportSettings
from mirror.export.scheduler import DEFAULT_FAILURE_RETRY, ActiveRun, DomainState, eligible_at
from mirror.export.sitecheck import check_summary, checks_by_bundle
from mirror.store.app import App
from mirror.store.bundles import newest_version
from mirror.store.models import DomainSchedule, ExportRun, RunState, Version
from mirror.store.sitestate import first_delivered
from mirror.timestamps import rfc3339_or_none, utcnow

_IN_CHUNK = 500


def _chunks(items: Sequence[str]) -> Iterable[Sequence[str]]:
    for start in range(0, len(items), _IN_CHUNK):
        yield items[start : start + _IN_CHUNK]


@dataclass
class _Facts:
    """What the index says about a set of domains, by domain."""

    last_finished: dict[str, ExportRun] = field(default_factory=dict)
    failures: dict[str, int] = field(default_factory=dict)
    latest_version_at: dict[str, datetime] = field(default_factory=dict)
    schedules: dict[str, DomainSchedule] = field(default_factory=dict)
    active: dict[str, ExportRun] = field(default_factory=dict)


def _read_facts(session: Session, chunk: Sequence[str], facts: _Facts) -> None:
    last_ids = (
        select(func.max(ExportRun.id))
        .where(ExportRun.domain.in_(chunk), ExportRun.active.is_(False))
        .group_by(ExportRun.domain)
    )
    for run in session.scalars(select(ExportRun).where(ExportRun.id.in_(last_ids))):
        facts.last_finished[run.domain] = run
    success = aliased(ExportRun)
    last_success_id = (
        select(func.coalesce(func.max(success.id), 0))
        .where(success.domain == ExportRun.domain, success.state.in_(RunState.SUCCESS))
        .scalar_subquery()
    )
    failure_counts = session.execute(
        select(ExportRun.domain, func.count())
        .where(
            ExportRun.domain.in_(chunk),
            ExportRun.state == RunState.FAILED,
            ExportRun.id > last_success_id,
        )
        .group_by(ExportRun.domain)
    )
    for domain, count in failure_counts:
        facts.failures[domain] = int(count)
    for domain, created in session.execute(
        select(Version.domain, func.max(Version.created_at))
        .where(Version.domain.in_(chunk))
        .group_by(Version.domain)
    ):
        if created is not None:
            facts.latest_version_at[domain] = _aware(created)
    for row in session.scalars(select(DomainSchedule).where(DomainSchedule.domain.in_(chunk))):
        facts.schedules[row.domain] = row
    for run in session.scalars(
        select(ExportRun).where(ExportRun.domain.in_(chunk), ExportRun.active.is_(True))
    ):
        facts.active[run.domain] = run


def _active_run(current: ExportRun | None) -> ActiveRun | None:
    if current is None:
        return None
    return ActiveRun(
        run_id=current.id,
        state=current.state,
        has_vendor_job=current.vendor_job_id is not None,
        created_at=current.created_at,
        bytes_done=current.bytes_done or 0,
        lease_owner=current.lease_owner,
        lease_expires_at=current.lease_expires_at,
    )


def load_states(
    session: Session, exports: Sequence[ExportSettings], known_since: dict[str, datetime]
) -> dict[str, DomainState]:
    """The scheduler state of each export, from the index (a few grouped queries)."""
    facts = _Facts()
    for chunk in _chunks([export.domain for export in exports]):
        _read_facts(session, chunk, facts)
    states: dict[str, DomainState] = {}
    for export in exports:
        domain = export.domain
        last = facts.last_finished.get(domain)
        schedule = facts.schedules.get(domain)
        states[domain] = DomainState(
            domain=domain,
            every=export.every,
            known_since=known_since.get(domain) or utcnow(),
            last_run_id=last.id if last else None,
            last_run_started_at=(last.vendor_started_at or last.created_at) if last else None,
            last_run_state=last.state if last else None,
            consecutive_failures=facts.failures.get(domain, 0),
            latest_version_at=facts.latest_version_at.get(domain),
            not_before=schedule.not_before if schedule else None,
            active=_active_run(facts.active.get(domain)),
        )
    return states


def due_check(
    export: ExportSettings,
    known_since: datetime,
    *,
    jitter: float,
    seed: int = 0,
    failure_retry: float = DEFAULT_FAILURE_RETRY,
) -> Callable[[Session, datetime], datetime | None]:
    """A claim's re-check (see exporter.DueCheck): the daemon's due rule applied to the
    index as the claim's transaction sees it; None when due, else when it will be."""

    def check(session: Session, now: datetime) -> datetime | None:
        state = load_states(session, [export], {export.domain: known_since})[export.domain]
        due = eligible_at(state, jitter=jitter, seed=seed, failure_retry=failure_retry)
        return due if due > now else None

    return check


def _aware(value: datetime) -> datetime:
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


@dataclass(frozen=True)
class DomainStatus:
    """One line of `mirror status`."""

    domain: str
    every: float
    last_run: dict[str, Any] | None
    latest_version: dict[str, Any] | None
    next_due: datetime | None
    running: bool
    not_before: datetime | None
    error: str | None
    owner: str | None = None
    lease_expires_at: datetime | None = None
    heartbeat_at: datetime | None = None
    now: datetime | None = None

    @property
    def lease_live(self) -> bool:
        """A live process holds the active run (its lease has not expired)."""
        return bool(
            self.running
            and self.owner
            and self.lease_expires_at is not None
            and self.now is not None
            and self.lease_expires_at > self.now
        )

    @property
    def heartbeat_age(self) -> float | None:
        if self.heartbeat_at is None or self.now is None or not self.running:
            return None
        return max(0.0, (self.now - self.heartbeat_at).total_seconds())

    def as_dict(self) -> dict[str, Any]:
        return {
            "domain": self.domain,
            "every_seconds": self.every,
            "last_run": self.last_run,
            "latest_version": self.latest_version,
            "running": self.running,
            "next_due_at": _iso(self.next_due),
            "deferred_until": _iso(self.not_before),
            "error": self.error,
            "owner": self.owner if self.running else None,
            "lease_expires_at": _iso(self.lease_expires_at) if self.running else None,
            "lease_live": self.lease_live,
            "heartbeat_age_seconds": _round(self.heartbeat_age),
        }


def _round(value: float | None) -> float | None:
    return round(value, 1) if value is not None else None


def _iso(value: datetime | None) -> str | None:
    return rfc3339_or_none(value)


def domain_status(app: App, *, now: datetime | None = None, seed: int = 0) -> list[DomainStatus]:
    """Status of every configured domain, read from the index."""
    now = now or utcnow()
    exports = app.settings.exports
    jitter = app.settings.daemon.jitter
    domains = [export.domain for export in exports]
    result: list[DomainStatus] = []
    with app.db.session() as session:
        states = load_states(session, exports, dict.fromkeys(domains, now))
        last_runs, versions, schedules = _read_rows(session, domains)
        sites = {key: check_summary(check) for key, check in checks_by_bundle(session).items()}
        delivered = first_delivered(session)
    for export in exports:
        state = states[export.domain]
        run = last_runs.get(export.domain)
        version = newest_version(versions.get(export.domain, ()))
        running = state.active is not None
        not_before = state.not_before if state.not_before and state.not_before > now else None
        next_due = None if running else max(now, eligible_at(state, jitter=jitter, seed=seed))
        active = run if run is not None and run.active else None
        error = _error(run, schedules.get(export.domain), now)
        result.append(
            DomainStatus(
                domain=export.domain,
                every=export.every,
                last_run=_run_json(run) if run is not None else None,
                latest_version=_version_json(version, delivered, sites) if version else None,
                next_due=next_due,
                running=running,
                not_before=not_before,
                error=error,
                owner=active.lease_owner if active is not None else None,
                lease_expires_at=active.lease_expires_at if active is not None else None,
                heartbeat_at=active.heartbeat_at if active is not None else None,
                now=now,
            )
        )
    return result


def _read_rows(
    session: Session, domains: Sequence[str]
) -> tuple[dict[str, ExportRun], dict[str, list[Version]], dict[str, DomainSchedule]]:
    """Each domain's last run, versions and schedule row, read in chunks of _IN_CHUNK."""
    last_runs: dict[str, ExportRun] = {}
    versions: dict[str, list[Version]] = {}
    schedules: dict[str, DomainSchedule] = {}
    for chunk in _chunks(domains):
        last_ids = (
            select(func.max(ExportRun.id))
            .where(ExportRun.domain.in_(chunk))
            .group_by(ExportRun.domain)
        )
        for run_row in session.scalars(select(ExportRun).where(ExportRun.id.in_(last_ids))):
            last_runs[run_row.domain] = run_row
        for row in session.scalars(select(Version).where(Version.domain.in_(chunk))):
            versions.setdefault(row.domain, []).append(row)
        for schedule_row in session.scalars(
            select(DomainSchedule).where(DomainSchedule.domain.in_(chunk))
        ):
            schedules[schedule_row.domain] = schedule_row
    return last_runs, versions, schedules


def _error(run: ExportRun | None, schedule: DomainSchedule | None, now: datetime) -> str | None:
    """The domain's standing error: its last run's, else the schedule's; none while a live
    process holds an active run (it is running, whatever was said before)."""
    error = run.error if run is not None and run.error else None
    if error is None and schedule is not None and schedule.last_error:
        error = schedule.last_error
    if run is not None and run.active and _live(run.lease_expires_at, now):
        return None
    return error


def _live(expires_at: datetime | None, now: datetime) -> bool:
    return expires_at is not None and _aware(expires_at) > now


def _run_json(run: ExportRun) -> dict[str, Any]:
    return {
        "id": run.id,
        "state": run.state,
        "active": run.active,
        "job_id": run.vendor_job_id,
        "started_at": _iso(run.created_at),
        "finished_at": _iso(run.finished_at),
        "bytes_done": run.bytes_done,
        "version": run.version_label,
        "error": run.error,
    }


def _version_json(
    version: Version, delivered: dict[int, datetime], sites: dict[tuple[str, str], str]
) -> dict[str, Any]:
    return {
        "version": version.label,
        "sha256": version.bundle_sha256,
        "created_at": _iso(version.created_at),
        "delivered_at": _iso(delivered.get(version.id)),
        "site": sites.get((version.domain, version.label)),
    }
