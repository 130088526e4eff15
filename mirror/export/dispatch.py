"""The daemon's work in each pass: which due domains start now, and the runs that ended.

Promises:

- a pass starts what `scheduler.plan` chose, only after `DomainBook.still_free` re-checked
  each domain in the index, within the free worker slots and the shared start budget;
  domains the spent budget holds back are deferred until it has room, with the reason;
- every run started carries the claim's re-check (`due_check`: the scheduler's own due
  rule on the index as it is at the claim), so a replica with a stale view never exports
  a domain twice in one interval;
- after a run stored a version, `store.keep` is applied and the store measured again; a
  failure of either is logged, never fatal.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from mirror.config import ExportSettings, Settings
from mirror.export.claim import DueCheck, budget_outlook
from mirror.export.domains import DomainBook, Pacing
from mirror.export.inflight import InFlight
from mirror.export.metrics import DaemonMetrics
from mirror.export.scheduler import DEFAULT_FAILURE_RETRY, DomainState, Plan, plan
from mirror.export.status import due_check
from mirror.fsutil import free_bytes
from mirror.store.app import App
from mirror.store.sitestate import site_summaries
from mirror.timestamps import utcnow

log = logging.getLogger("mirror.export.daemon")  # one logger for the whole daemon


@dataclass(frozen=True)
class DaemonOptions:
    """Knobs beyond the settings file (mostly for tests; see `mirror daemon --help`)."""

    usable: Callable[[Settings], None] | None = None
    """Raises when reloaded settings cannot serve the daemon (`mirror.cli.preflight`, handed in
    by the command): the reload is refused and the old settings kept."""
    exit_when_idle: bool = False
    seed: int = 0
    max_sleep: float = 30.0
    failure_retry: float = DEFAULT_FAILURE_RETRY
    busy_defer: float | None = None


class Dispatcher:
    """Starts the due domains' runs on `runs` and collects the ended ones into `book`."""

    def __init__(
        self,
        app: App,
        options: DaemonOptions,
        identity: str,
        book: DomainBook,
        runs: InFlight,
        metrics: DaemonMetrics,
    ) -> None:
        self.app = app
        self.options = options
        self.identity = identity
        self.book = book
        self.runs = runs
        self.metrics = metrics

    @property
    def settings(self) -> Settings:
        return self.app.settings

    def start_due(self, now: datetime, only: set[str] | None = None) -> Plan:
        """Start what is due now (of `only`, when given); the plan says when to look again."""
        budget_remaining, budget_wait, spent = self.budget(now)
        running = self.runs.domains()
        states: Iterable[DomainState] = self.book.states.values()
        if only is not None:
            states = [s for s in states if s.domain in only]
        decision = plan(
            states,
            now=now,
            running=running,
            free_slots=self.settings.daemon.concurrency - len(running),
            budget_remaining=budget_remaining,
            budget_wait=budget_wait,
            jitter=self.settings.daemon.jitter,
            seed=self.options.seed,
            failure_retry=self.options.failure_retry,
            spread=self.identity,
        )
        starting = self.book.still_free(decision.start, now, self.pacing())
        if decision.budget_deferred and spent:
            self.book.defer(
                decision.budget_deferred,
                now + timedelta(seconds=budget_wait),
                f"start budget of {self.settings.api.max_starts_per_hour} per hour spent",
            )
        for domain in starting:
            self.submit(domain)
        self.metrics.start_budget_remaining.set(max(0, budget_remaining - len(starting)))
        return decision

    def budget(self, now: datetime) -> tuple[int, float, bool]:
        """(starts allowed now, seconds until the next is, whether the index says it is spent)."""
        per_hour = self.settings.api.max_starts_per_hour
        with self.app.db.session() as session:
            return budget_outlook(session, now, per_hour, self.runs.live.awaiting_start())

    def submit(self, domain: str) -> None:
        state = self.book.states[domain]
        export = self.settings.export_for(domain)
        log.info(
            "run scheduled",
            extra={
                "replica": self.identity,
                "domain": domain,
                "resume": state.active is not None,
                "run_id": state.active.run_id if state.active else None,
            },
        )
        self.runs.submit(domain, self.settings, self.due_check(export))

    def due_check(self, export: ExportSettings) -> DueCheck:
        """The claim's re-check: the scheduler's own due rule on the index as it is now."""
        return due_check(
            export,
            self.book.known_since.get(export.domain) or utcnow(),
            jitter=self.settings.daemon.jitter,
            seed=self.options.seed,
            failure_retry=self.options.failure_retry,
        )

    def collect(self) -> None:
        """Take in the runs that ended; after a stored one, apply retention and measure."""
        done, stored = self.runs.collect(self.pacing())
        if not done:
            return
        if stored:
            apply_retention(self.app)
            measure_store(self.app, self.metrics)
        self.book.load(done)

    def pacing(self) -> Pacing:
        busy = self.options.busy_defer
        if busy is None:
            busy = min(300.0, max(5.0, 2 * self.settings.api.poll_interval))
        return Pacing(
            jitter=self.settings.daemon.jitter,
            seed=self.options.seed,
            failure_retry=self.options.failure_retry,
            busy_defer=busy,
        )


def apply_retention(app: App) -> None:
    """`store.keep` after a stored run; a failure is logged, and the next stored run retries."""
    from mirror.store.retention import gc

    try:
        report = gc(app, keep=app.settings.store.keep)
    except Exception as exc:  # retention must never take the daemon down; next run retries
        log.warning("store gc failed; it is retried after the next stored run: %s", exc)
        return
    if report.versions or report.blobs:
        log.info(
            "retention applied",
            extra={
                "keep": report.keep,
                "versions_removed": len(report.versions),
                "bytes_freed": report.bytes_freed,
            },
        )


def measure_store(app: App, metrics: DaemonMetrics) -> None:
    """The store's size and what each air-gapped site still needs (at start and after each
    stored version)."""
    try:
        metrics.store_bytes.set(app.store.used_bytes())
        free = free_bytes(app.settings.store.path)
        if free is not None:
            metrics.store_free_bytes.set(free)
    except OSError as exc:
        log.warning("cannot measure the store: %s", exc.strerror or exc)
    with app.db.session() as session:
        summaries = site_summaries(session, app.settings.site_list(), utcnow())
    metrics.set_transfer_sites(summaries)
