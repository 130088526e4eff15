"""The daemon's view of every domain it schedules, and what it records after each run.

Promises:

- `load()` re-reads every configured domain (and every transient one: unconfigured but
  with an unfinished run to finish) from the index, so what CLI runs and other replicas did
  shows up; `load(domains)` re-reads just those. A transient domain leaves the book once
  its run is finished; a domain removed from the config leaves it at the next full load.
- `still_free` drops the domains another replica's lease still holds, after reading a
  lease that looked expired once more (its heartbeat may have renewed it meanwhile).
- `record(result)` is the one place a run's outcome becomes schedule state: a success
  clears the domain's deferral and failure count; a deferral waits the vendor's
  Retry-After (or `busy_defer`); a failure backs off by `failure_backoff`; a run left to
  another replica or interrupted changes nothing. Deferrals are written to the index
  (`deferrals.defer`) so every replica honours them, and to the book at once.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from mirror.config import ExportSettings, Settings
from mirror.export.deferrals import clear as clear_deferral
from mirror.export.deferrals import defer
from mirror.export.metrics import DaemonMetrics, newest_refused, newest_sites
from mirror.export.scheduler import DomainState, defer_seconds, eligible_at, failure_backoff
from mirror.export.status import load_states
from mirror.export.worker import RunResult
from mirror.store.app import App
from mirror.timestamps import utcnow

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Pacing:
    """How the daemon spaces runs out (from settings and `DaemonOptions`)."""

    jitter: float
    seed: int
    failure_retry: float
    busy_defer: float


class DomainBook:
    """Scheduler states by domain, as this daemon last read them from the index."""

    def __init__(self, app: App, metrics: DaemonMetrics, identity: str) -> None:
        self.app = app
        self.metrics = metrics
        self.identity = identity
        self.states: dict[str, DomainState] = {}
        self.known_since: dict[str, datetime] = {}
        self.transient: set[str] = set()
        self.failures: dict[str, int] = {}
        self.refreshed_at = 0.0

    @property
    def settings(self) -> Settings:
        return self.app.settings

    def start(self, unfinished: Iterable[str], now: datetime) -> set[str]:
        """Known from now on: the configured domains, and those with an unfinished run."""
        for export in self.settings.exports:
            self.known_since.setdefault(export.domain, now)
        configured = {export.domain for export in self.settings.exports}
        self.transient = set(unfinished) - configured
        self.load()
        return configured

    def reconfigure(self, old: Settings, running: Iterable[str], now: datetime) -> set[str]:
        """After a reload: new domains are known from now; removed ones that still run stay
        until their run ends. Returns the added domains."""
        before = {export.domain for export in old.exports}
        after = {export.domain for export in self.settings.exports}
        for domain in after - before:
            self.known_since[domain] = now
        for domain in before - after:
            self.known_since.pop(domain, None)
            if domain in running:
                self.transient.add(domain)
        self.load()
        return after - before

    def load(self, domains: Iterable[str] | None = None) -> None:
        """(Re)load scheduler states from the index: all of them, or just `domains`."""
        if domains is None:
            self.refreshed_at = time.monotonic()
        configured = {export.domain: export for export in self.settings.exports}
        wanted = list(configured) + sorted(self.transient) if domains is None else list(domains)
        exports: list[ExportSettings] = []
        for domain in wanted:
            if domain in configured:
                exports.append(configured[domain])
            elif domain in self.transient:
                exports.append(ExportSettings(domain=domain))
            else:
                self.states.pop(domain, None)
        with self.app.db.session() as session:
            fresh = load_states(session, exports, self.known_since)
        for domain, state in fresh.items():
            if domain in self.transient and state.active is None:
                self.transient.discard(domain)
                self.states.pop(domain, None)
                continue
            self.states[domain] = state
        if domains is None:
            for domain in list(self.states):
                if domain not in configured and domain not in self.transient:
                    del self.states[domain]

    def idle(self) -> bool:
        """True when no run is active and every domain has finished at least one run."""
        return all(
            state.active is None
            and (state.last_run_id is not None or state.latest_version_at is not None)
            for state in self.states.values()
        )

    def still_free(self, domains: list[str], now: datetime, pacing: Pacing) -> list[str]:
        """`domains` minus runs another replica still holds."""
        leased = [d for d in domains if (active := self.states[d].active) and active.lease_owner]
        if not leased:
            return domains
        self.load(leased)
        held = {
            domain
            for domain in leased
            if domain not in self.states
            or eligible_at(
                self.states[domain],
                jitter=pacing.jitter,
                seed=pacing.seed,
                failure_retry=pacing.failure_retry,
            )
            > now
        }
        return [domain for domain in domains if domain not in held]

    def defer(self, domains: list[str], until: datetime, reason: str) -> None:
        for domain in domains:
            state = self.states.get(domain)
            if state is not None and (state.not_before is None or state.not_before < until):
                self.states[domain] = replace(state, not_before=until)
        defer(self.app.db, domains, until, reason)

    def record(self, result: RunResult, pacing: Pacing) -> None:
        domain = result.domain
        self.metrics.record_outcome(domain, result.outcome)
        extra = {"domain": domain, "outcome": result.outcome, "replica": self.identity}
        now = utcnow()
        with self.app.db.session() as session:  # a refusal for completeness ends "failed"
            sites = newest_sites(session, [domain]) if result.outcome == "stored" else {}
            self.metrics.set_sites(sites, newest_refused(session, [domain]))
        if result.outcome in ("stored", "unchanged"):
            self.failures.pop(domain, None)
            log.info("run finished", extra={**extra, "version": result.version})
            clear_deferral(self.app.db, domain)
        elif result.outcome == "deferred" and not result.shared:
            log.info("run left to another replica", extra={**extra, "reason": result.message})
        elif result.outcome == "deferred":
            delay = defer_seconds(result.retry_after, pacing.busy_defer)
            log.info(
                "run deferred",
                extra={**extra, "seconds": round(delay, 1), "reason": result.message},
            )
            self.defer([domain], now + timedelta(seconds=delay), result.message)
        elif result.outcome == "failed":
            failures = self.failures.get(domain, 0) + 1
            self.failures[domain] = failures
            every = self.settings.export_for(domain).every
            delay = failure_backoff(failures, every, pacing.failure_retry)
            log.warning(
                "run failed",
                extra={**extra, "error": result.message, "retry_in_seconds": round(delay)},
            )
            self.defer([domain], now + timedelta(seconds=delay), result.message)
        else:
            log.info("run interrupted; it resumes at the next start", extra=extra)
