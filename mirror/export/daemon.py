"""`mirror daemon`: the long-running service that exports every configured domain on schedule.

One main thread runs the scheduler loop; a small thread pool runs `run_export`
(the same persisted state machine as `mirror export run`). The loop:
- on start: start-up recovery (schema, temp files, orphan blobs), then resumes every
  unfinished run before any new work, and only then sends READY=1;
- each pass: collects finished runs, asks `scheduler.plan` what to start, persists
  deferrals, updates metrics and the STATUS= line, and sends WATCHDOG=1 itself, so
  a stuck loop is killed by systemd;
- sleeps on a self-pipe until the next due time, a finished run or a signal.

Signals (SIGUSR1 dumps every thread's stack to stderr, for a stuck daemon): SIGTERM/SIGINT
stop taking work, set the cancel event every run watches
(downloads stop after the current chunk with offsets saved), wait for the workers
and exit 0. SIGHUP reloads the config (added/removed domains, changed intervals)
without touching running runs; an invalid new config, or one the daemon could not use
(`DaemonOptions.usable`), is logged and the old one kept.

A domain is never run twice at once: in this process by the `running` set, across
processes and replicas by the index's unique active-run index and lease (run_export).
Replicas share the work: each is named `host:pid:nonce` (in every log line), takes
due domains in its own order, leaves runs another live replica leases alone until
that lease expires, and the claim re-checks in the database that a domain is still
due. No error of one pass or one domain ends the loop: it is logged, counted in
`mirror_daemon_loop_errors_total` and retried.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

from sqlalchemy.exc import SQLAlchemyError

from mirror.config import Settings, load_settings
from mirror.errors import MirrorError
from mirror.export.dispatch import DaemonOptions, Dispatcher, apply_retention, measure_store
from mirror.export.domains import DomainBook
from mirror.export.inflight import InFlight
from mirror.export.lease import ReplicaLogFilter, replica_identity
from mirror.export.metrics import (
    DaemonMetrics,
    MetricsServer,
    last_success_times,
    newest_refused,
    newest_sites,
    overdue_leases,
    start_metrics,
)
from mirror.export.notify import Notifier, StatusLine
from mirror.export.recovery import recover
from mirror.export.scheduler import status_line
from mirror.export.wakeup import SignalHandlers, WakeupPipe
from mirror.export.worker import DB_RETRY_SECONDS, short
from mirror.store.app import App
from mirror.timestamps import utcnow

__all__ = ["Daemon", "DaemonOptions", "apply_retention", "measure_store", "run_daemon"]

log = logging.getLogger(__name__)


class Daemon:
    """The service; `run()` returns the process exit code. Its passes' work (what starts,
    what ended) is `dispatch.Dispatcher`; here are the process's life, its signals, the
    config reload and what systemd hears."""

    def __init__(
        self,
        settings: Settings,
        *,
        config_path: str | None = None,
        options: DaemonOptions | None = None,
        notifier: Notifier | None = None,
    ) -> None:
        self.options = options or DaemonOptions()
        self.config_path = config_path if config_path is not None else settings.source
        self.app = App(settings)
        self.identity = replica_identity(settings.daemon.replica_host)
        self._log_filter = ReplicaLogFilter(self.identity)
        self.notifier = notifier or Notifier()
        self._status = StatusLine(self.notifier)
        self.metrics = DaemonMetrics(stuck_after=self._loop_budget() * 3 + 30)
        self.metrics_server: MetricsServer | None = None
        self.cancel = threading.Event()
        self._book = DomainBook(self.app, self.metrics, self.identity)
        self._stop_requested = False
        self._reload_requested = False
        self._pipe = WakeupPipe()
        self._wake = self._pipe.wake
        self._sleep = self._pipe.sleep
        self._runs = InFlight(
            self.app,
            self.identity,
            self.cancel,
            self.metrics,
            self._book,
            self._loop_error,
            on_done=self._wake,
        )
        self._dispatch = Dispatcher(
            self.app, self.options, self.identity, self._book, self._runs, self.metrics
        )
        self._signals = SignalHandlers(
            self._pipe, on_stop=self._flag_stop, on_reload=self._flag_reload
        )

    @property
    def settings(self) -> Settings:
        return self.app.settings

    # --- the process ---

    def run(self) -> int:
        self._signals.install()
        self._log_filter.install()
        try:
            self.metrics_server = start_metrics(self.settings.daemon.listen, self.metrics)
            self._recover_and_resume()
            self.metrics.set_ready()
            self.notifier.ready(self._status_text(utcnow()))
            log.info(
                "daemon ready",
                extra={"domains": len(self.settings.exports), "resumed": len(self._runs)},
            )
            self._loop()
            self._shutdown()
            return 0
        finally:
            self._signals.restore()
            self._close()
            self._log_filter.remove()

    def _loop(self) -> None:
        """Pass after pass until a stop is asked (or, with exit_when_idle, nothing is left)."""
        while not self._stop_requested:
            try:
                if self._reload_requested:
                    self._reload()
                self._dispatch.collect()
                if time.monotonic() - self._book.refreshed_at >= self._loop_budget():
                    self._book.load()
                sleep_for = self._schedule_pass()
            except (SQLAlchemyError, MirrorError) as exc:
                self._loop_error("pass", exc)
                sleep_for = DB_RETRY_SECONDS
            except Exception as exc:  # a replica never ends itself over one bad pass
                self._loop_error("pass", exc, unexpected=True)
                sleep_for = DB_RETRY_SECONDS
            else:
                if self.options.exit_when_idle and not self._runs and self._book.idle():
                    log.info("nothing left to do; exiting (--exit-when-idle)")
                    return
            self._sleep(sleep_for)

    def _loop_error(self, where: str, exc: BaseException, *, unexpected: bool = False) -> None:
        """Log and count an error the loop survives (the pass or the domain is retried)."""
        self.metrics.loop_errors.labels(kind=type(exc).__name__).inc()
        message = f"{where} failed; retried: {type(exc).__name__}: {short(exc)}"
        if unexpected:
            log.error(message, exc_info=exc)
        else:
            log.warning(message)

    def request_stop(self) -> None:
        self._flag_stop()
        self._wake()

    def request_reload(self) -> None:
        self._flag_reload()
        self._wake()

    def _flag_stop(self) -> None:
        self._stop_requested = True

    def _flag_reload(self) -> None:
        self._reload_requested = True

    # --- start-up ---

    def _recover_and_resume(self) -> None:
        report = recover(self.app)
        configured = self._book.start((run.domain for run in report.unfinished), utcnow())
        measure_store(self.app, self.metrics)
        self._seed_metrics(configured)
        self.metrics.domains.set(len(configured))
        resumable = {run.domain for run in report.unfinished}
        if resumable:
            self._schedule_pass(only=resumable)
        self.metrics.tick()

    def _seed_metrics(self, domains: set[str]) -> None:
        """Every series of `domains` from the index, so a restart shows their last success."""
        with self.app.db.session() as session:
            last_success = last_success_times(session, domains)
            sites = newest_sites(session, domains)
            refused = newest_refused(session, domains)
        self.metrics.seed(domains, last_success)
        self.metrics.set_sites(sites, refused)

    # --- each pass: start what is due, tell systemd ---

    def _schedule_pass(self, only: set[str] | None = None) -> float:
        """Start what is due; returns how long the loop may sleep."""
        now = utcnow()
        decision = self._dispatch.start_due(now, only)
        self._measure_leases(now)
        self.metrics.tick()
        if self.notifier.watchdog_seconds:
            self.notifier.watchdog()
        self._status.send(self._status_text(now, decision.next_due))
        sleep_for = self._loop_budget()
        if decision.next_wake is not None:
            sleep_for = min(sleep_for, (decision.next_wake - now).total_seconds())
        return max(0.05, sleep_for)

    def _measure_leases(self, now: datetime) -> None:
        """Each configured domain's run held past its lease (`overdue_leases`)."""
        with self.app.db.session() as session:
            overdue = overdue_leases(session, now)
        self.metrics.set_leases(self._book.states, overdue)

    def _loop_budget(self) -> float:
        """The longest the loop may sleep: short enough for the watchdog and /healthz."""
        limit = self.options.max_sleep
        if self.notifier.watchdog_seconds:
            limit = min(limit, self.notifier.watchdog_seconds / 3)
        return max(0.1, limit)

    def _status_text(self, now: datetime, next_due: tuple[str, datetime] | None = None) -> str:
        running = len(self._runs)
        return status_line(running, len(self._book.states) - running, next_due, now)

    # --- reload ---

    def _reload(self) -> None:
        self._reload_requested = False
        self.notifier.reloading()
        old = self.settings
        new = reloaded_settings(self.config_path, old, self.options.usable)
        if new is not None:
            self.app.settings = new
            added = self._book.reconfigure(old, self._runs.domains(), utcnow())
            self._seed_metrics(added)
            before = {export.domain for export in old.exports}
            after = {export.domain for export in new.exports}
            self.metrics.domains.set(len(after))
            log.info(
                "config reloaded",
                extra={
                    "added": sorted(added),
                    "removed": sorted(before - after),
                    "domains": len(after),
                },
            )
        self.notifier.ready()

    # --- shutdown ---

    def _shutdown(self) -> None:
        running = len(self._runs)
        self.notifier.stopping(f"stopping: {running} running runs saving their state")
        log.info("stopping", extra={"running": running})
        self.cancel.set()
        deadline = time.monotonic() + 3600
        while self._runs and time.monotonic() < deadline:
            if self._runs.all_done():
                break
            self._sleep(1.0)
            if self.notifier.watchdog_seconds:
                self.notifier.watchdog()
        self._runs.collect(self._dispatch.pacing())
        log.info("stopped")

    def _close(self) -> None:
        self.cancel.set()
        self._runs.close()
        if self.metrics_server is not None:
            self.metrics_server.stop()
        self.notifier.close()
        self.app.close()
        self._pipe.close()


def reloaded_settings(
    config_path: str | Path | None,
    old: Settings,
    usable: Callable[[Settings], None] | None = None,
) -> Settings | None:
    """The settings to run with after a reload; None (logged) when the new file is invalid or
    `usable` (the command's preflight) refuses it. What only a restart can change (the store,
    `daemon.listen`) keeps its old value."""
    try:
        new = load_settings(config_path)
        if usable is not None:
            usable(new)
    except MirrorError as exc:
        log.error("config reload failed; keeping the old config", extra={"error": str(exc)})
        return None
    if new.store != old.store:
        log.warning("store settings changed; they take effect at the next restart")
        new = new.model_copy(update={"store": old.store})
    if new.daemon.listen != old.daemon.listen:
        log.warning("daemon.listen changed; it takes effect at the next restart")
    return new


def run_daemon(
    settings: Settings,
    *,
    config_path: str | None = None,
    options: DaemonOptions | None = None,
) -> int:
    """Run the daemon until SIGTERM (or, with exit_when_idle, until there is nothing to do)."""
    return Daemon(settings, config_path=config_path, options=options).run()
