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
without touching running runs; an invalid new config is logged and the old one kept.

A domain is never run twice at once: in this process by the `running` set, across
processes and replicas by the index's unique active-run index and lease (run_export).
Replicas share the work: each is named `host:pid:nonce` (in every log line), takes
due domains in its own order, leaves runs another live replica leases alone until
that lease expires, and the claim re-checks in the database that a domain is still
due. No error of one pass or one domain ends the loop: it is logged, counted in
`mirror_daemon_loop_errors_total` and retried.
"""

from __future__ import annotations

import contextlib
import errno
import faulthandler
import logging
import os
import select
import signal
import threading
import time
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from types import FrameType
from typing import Any, Literal

from sqlalchemy import select as sql_select
from sqlalchemy.exc import SQLAlchemyError

from mirror.config import ExportSettings, Settings, load_settings
from mirror.errors import ConfigError, Interrupted, MirrorError, TemporaryFailure
from mirror.export.claim import DueCheck
from mirror.export.deferrals import clear as clear_deferral
from mirror.export.deferrals import defer
from mirror.export.lease import HeldByOther, NotDue, ReplicaLogFilter, replica_identity
from mirror.export.metrics import DaemonMetrics, MetricsServer, last_success_times, parse_listen
from mirror.export.notify import Notifier
from mirror.export.recovery import recover
from mirror.export.runner import JobTimedOut, RunEvent, run_export
from mirror.export.scheduler import (
    DEFAULT_FAILURE_RETRY,
    DomainState,
    defer_seconds,
    eligible_at,
    failure_backoff,
    plan,
    status_line,
)
from mirror.export.status import due_check, load_states
from mirror.store.app import App
from mirror.store.models import ExportRun
from mirror.timestamps import utcnow
from mirror.vendor.client import VendorClient, build_http_client

log = logging.getLogger(__name__)

MAX_POOL = 64
DB_RETRY_SECONDS = 5.0
HOUR = timedelta(hours=1)
Outcome = Literal["stored", "unchanged", "failed", "deferred", "interrupted"]


@dataclass(frozen=True)
class DaemonOptions:
    """Knobs beyond the settings file (mostly for tests; see `mirror daemon --help`)."""

    exit_when_idle: bool = False
    seed: int = 0
    max_sleep: float = 30.0
    failure_retry: float = DEFAULT_FAILURE_RETRY
    busy_defer: float | None = None


@dataclass(frozen=True)
class RunResult:
    domain: str
    outcome: Outcome
    message: str = ""
    retry_after: float | None = None
    version: str | None = None
    shared: bool = True  # False: held by another replica or not due; nothing to persist


@dataclass
class _Live:
    """What the daemon knows about one running run (updated from RunEvents)."""

    state: str = "pending"
    job_id: str | None = None
    bytes_seen: int = 0
    download_started: float | None = None


@dataclass
class _Stats:
    running: dict[str, _Live] = field(default_factory=dict)
    awaiting_start: set[str] = field(default_factory=set)


class Daemon:
    """The service; `run()` returns the process exit code."""

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
        self.metrics = DaemonMetrics(stuck_after=self._loop_budget() * 3 + 30)
        self.metrics_server: MetricsServer | None = None
        self.cancel = threading.Event()
        self._pool = ThreadPoolExecutor(max_workers=MAX_POOL, thread_name_prefix="mirror-run")
        self._futures: dict[str, Future[RunResult]] = {}
        self._states: dict[str, DomainState] = {}
        self._known_since: dict[str, datetime] = {}
        self._transient: set[str] = set()
        self._lock = threading.Lock()
        self._live = _Stats()
        self._failures: dict[str, int] = {}
        self._stop_requested = False
        self._reload_requested = False
        self._last_status = ""
        self._status_at = 0.0
        self._refreshed_at = 0.0
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)

    @property
    def settings(self) -> Settings:
        return self.app.settings

    # --- the process ---

    def run(self) -> int:
        previous = self._install_signals()
        self._log_filter.install()
        try:
            self._start_metrics()
            self._recover_and_resume()
            self.metrics.set_ready()
            self.notifier.ready(self._status_text(utcnow()))
            log.info(
                "daemon ready",
                extra={"domains": len(self.settings.exports), "resumed": len(self._futures)},
            )
            while not self._stop_requested:
                try:
                    if self._reload_requested:
                        self._reload()
                    self._reap()
                    if time.monotonic() - self._refreshed_at >= self._loop_budget():
                        self._load_states()
                    sleep_for = self._schedule_pass()
                except (SQLAlchemyError, MirrorError) as exc:
                    self._loop_error("pass", exc)
                    sleep_for = DB_RETRY_SECONDS
                except Exception as exc:  # a replica never ends itself over one bad pass
                    self._loop_error("pass", exc, unexpected=True)
                    sleep_for = DB_RETRY_SECONDS
                else:
                    if self.options.exit_when_idle and self._idle():
                        log.info("nothing left to do; exiting (--exit-when-idle)")
                        break
                self._sleep(sleep_for)
            self._shutdown()
            return 0
        finally:
            self._restore_signals(previous)
            self._close()
            self._log_filter.remove()

    def _loop_error(self, where: str, exc: BaseException, *, unexpected: bool = False) -> None:
        """Log and count an error the loop survives (the pass or the domain is retried)."""
        self.metrics.loop_errors.labels(kind=type(exc).__name__).inc()
        message = f"{where} failed; retried: {type(exc).__name__}: {_short(exc)}"
        if unexpected:
            log.error(message, exc_info=exc)
        else:
            log.warning(message)

    def request_stop(self) -> None:
        self._stop_requested = True
        self._wake()

    def request_reload(self) -> None:
        self._reload_requested = True
        self._wake()

    # --- start-up ---

    def _start_metrics(self) -> None:
        address = parse_listen(self.settings.daemon.listen)
        if address is None:
            log.info("metrics listener off (daemon.listen is empty)")
            return
        self.metrics_server = MetricsServer(self.metrics, *address).start()
        host, port = self.metrics_server.address
        log.info(
            "metrics listening",
            extra={"host": host, "port": port, "url": f"http://{_url_host(host)}:{port}/metrics"},
        )

    def _recover_and_resume(self) -> None:
        report = recover(self.app)
        now = utcnow()
        for export in self.settings.exports:
            self._known_since.setdefault(export.domain, now)
        configured = {export.domain for export in self.settings.exports}
        self._transient = {run.domain for run in report.unfinished} - configured
        self._load_states()
        self._update_store_bytes()
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
        self.metrics.seed(domains, last_success)

    # --- the loop ---

    def _schedule_pass(self, only: set[str] | None = None) -> float:
        now = utcnow()
        budget_remaining, budget_wait, spent = self._budget(now)
        with self._lock:
            running = set(self._futures)
        states: Iterable[DomainState] = self._states.values()
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
        starting = self._still_free(decision.start, now)
        if decision.budget_deferred and spent:
            self._defer(
                decision.budget_deferred,
                now + timedelta(seconds=budget_wait),
                f"start budget of {self.settings.api.max_starts_per_hour} per hour spent",
            )
        for domain in starting:
            self._submit(domain)
        self.metrics.start_budget_remaining.set(max(0, budget_remaining - len(starting)))
        self.metrics.tick()
        if self.notifier.watchdog_seconds:
            self.notifier.watchdog()
        text = status_line(
            len(self._futures), len(self._states) - len(self._futures), decision.next_due, now
        )
        self._send_status(text)
        sleep_for = self._loop_budget()
        if decision.next_wake is not None:
            sleep_for = min(sleep_for, (decision.next_wake - now).total_seconds())
        return max(0.05, sleep_for)

    def _still_free(self, domains: list[str], now: datetime) -> list[str]:
        """`domains` minus runs another replica still holds: a lease seen expired in a
        stale state is read again first (its heartbeat may have renewed it)."""
        leased = [d for d in domains if (active := self._states[d].active) and active.lease_owner]
        if not leased:
            return domains
        self._load_states(leased)
        held = {
            domain
            for domain in leased
            if domain not in self._states
            or eligible_at(
                self._states[domain],
                jitter=self.settings.daemon.jitter,
                seed=self.options.seed,
                failure_retry=self.options.failure_retry,
            )
            > now
        }
        return [domain for domain in domains if domain not in held]

    def _send_status(self, text: str) -> None:
        """STATUS= when the counts change, or at most every 5 s for the countdown."""
        counts = text.split(", next due", 1)[0]
        last_counts = self._last_status.split(", next due", 1)[0]
        now = time.monotonic()
        if text != self._last_status and (counts != last_counts or now - self._status_at >= 5):
            self._last_status = text
            self._status_at = now
            self.notifier.status(text)

    def _loop_budget(self) -> float:
        """The longest the loop may sleep: short enough for the watchdog and /healthz."""
        limit = self.options.max_sleep
        if self.notifier.watchdog_seconds:
            limit = min(limit, self.notifier.watchdog_seconds / 3)
        return max(0.1, limit)

    def _budget(self, now: datetime) -> tuple[int, float, bool]:
        """(starts allowed now, seconds until the next is, whether the index says it is spent)."""
        per_hour = self.settings.api.max_starts_per_hour
        with self.app.db.session() as session:
            starts = [
                started
                for started in session.scalars(
                    sql_select(ExportRun.vendor_started_at)
                    .where(ExportRun.vendor_started_at >= now - HOUR)
                    .order_by(ExportRun.vendor_started_at)
                )
                if started is not None
            ]
        with self._lock:
            in_flight = len(self._live.awaiting_start)
        remaining = per_hour - len(starts) - in_flight
        spent = len(starts) >= per_hour
        wait = 0.0
        if spent:
            oldest = starts[len(starts) - per_hour]
            wait = max(0.0, (oldest + HOUR - now).total_seconds()) + 1.0
        elif remaining <= 0:
            wait = 5.0
        return remaining, wait, spent

    def _submit(self, domain: str) -> None:
        state = self._states[domain]
        export = self.settings.export_for(domain)
        with self._lock:
            self._live.running[domain] = _Live(
                state=state.active.state if state.active else "pending",
                job_id=None,
                bytes_seen=state.active.bytes_done if state.active else 0,
            )
            if state.needs_start:
                self._live.awaiting_start.add(domain)
            self._set_state_gauge(None, self._live.running[domain].state)
        log.info(
            "run scheduled",
            extra={
                "replica": self.identity,
                "domain": domain,
                "resume": state.active is not None,
                "run_id": state.active.run_id if state.active else None,
            },
        )
        future = self._pool.submit(self._work, domain, export, self.settings)
        self._futures[domain] = future
        future.add_done_callback(lambda _f: self._wake())

    def _work(self, domain: str, export: ExportSettings, settings: Settings) -> RunResult:
        """One run in a worker thread; never raises."""
        client: VendorClient | None = None
        try:
            api = settings.api
            http = build_http_client(timeout=api.timeout, ca_bundle=api.ca_bundle)
            client = VendorClient(
                http,
                base_url=api.base_url,
                key=settings.api_key(),
                project_id=api.project_id,
                export_flow=api.export_flow,
                retry_attempts=api.retry_attempts,
                retry_timeout=api.retry_timeout,
                sleep=self._cancellable_sleep,
            )
            outcome = run_export(
                self.app,
                client,
                domain,
                cancel=self.cancel,
                on_event=self._on_event,
                sleep=self._cancellable_sleep,
                owner=self.identity,
                due_check=self._due_check(export),
            )
            return RunResult(domain, outcome.state, version=outcome.version)
        except Interrupted as exc:
            return RunResult(domain, "interrupted", str(exc))
        except (HeldByOther, NotDue) as exc:
            return RunResult(domain, "deferred", str(exc), exc.retry_after, shared=False)
        except SQLAlchemyError as exc:
            self._loop_error(f"the run of {domain}", exc)
            return RunResult(domain, "deferred", f"index error: {_short(exc)}", DB_RETRY_SECONDS)
        except TemporaryFailure as exc:
            if self.cancel.is_set():
                return RunResult(domain, "interrupted", str(exc))
            if isinstance(exc, JobTimedOut):
                self.metrics.job_timeouts.labels(domain=domain).inc()
            return RunResult(domain, "deferred", str(exc), retry_after=exc.retry_after)
        except MirrorError as exc:
            if self.cancel.is_set():
                return RunResult(domain, "interrupted", str(exc))
            return RunResult(domain, "failed", str(exc))
        except Exception as exc:
            if self.cancel.is_set():
                return RunResult(domain, "interrupted", f"{type(exc).__name__}: {exc}")
            log.exception("unexpected error in the run of %s", domain, extra={"domain": domain})
            return RunResult(domain, "failed", f"unexpected error: {type(exc).__name__}: {exc}")
        finally:
            if client is not None:
                client.close()
                client.http.close()

    def _due_check(self, export: ExportSettings) -> DueCheck:
        """The claim's re-check: the scheduler's own due rule on the index as it is now."""
        return due_check(
            export,
            self._known_since.get(export.domain) or utcnow(),
            jitter=self.settings.daemon.jitter,
            seed=self.options.seed,
            failure_retry=self.options.failure_retry,
        )

    def _cancellable_sleep(self, seconds: float) -> None:
        self.cancel.wait(seconds)

    def _on_event(self, event: RunEvent) -> None:
        """RunEvent from a worker thread: per-state gauges, bytes and download time."""
        domain = event.domain
        with self._lock:
            live = self._live.running.get(domain)
            if live is None:
                return
            if event.job_id and domain in self._live.awaiting_start:
                self._live.awaiting_start.discard(domain)
            live.job_id = event.job_id or live.job_id
            if event.bytes_done is not None and event.bytes_done > live.bytes_seen:
                self.metrics.download_bytes.labels(domain=domain).inc(
                    event.bytes_done - live.bytes_seen
                )
                live.bytes_seen = event.bytes_done
            elif event.bytes_done is not None and event.bytes_done < live.bytes_seen:
                live.bytes_seen = event.bytes_done
            if event.state != live.state:
                self._leave_state(live)
                self._set_state_gauge(live.state, event.state)
                live.state = event.state
                if event.state == "downloading":
                    live.download_started = time.monotonic()

    def _leave_state(self, live: _Live) -> None:
        if live.state == "downloading" and live.download_started is not None:
            self.metrics.download_seconds.observe(time.monotonic() - live.download_started)
            live.download_started = None

    def _set_state_gauge(self, old: str | None, new: str | None) -> None:
        if old is not None:
            self.metrics.runs_in_state.labels(state=old).dec()
        if new is not None:
            self.metrics.runs_in_state.labels(state=new).inc()

    def _reap(self) -> None:
        done = [domain for domain, future in self._futures.items() if future.done()]
        if not done:
            return
        stored = False
        for domain in done:
            result = self._futures.pop(domain).result()
            with self._lock:
                live = self._live.running.pop(domain, None)
                self._live.awaiting_start.discard(domain)
                if live is not None:
                    self._leave_state(live)
                    self._set_state_gauge(live.state, None)
            try:
                self._record(result)
            except SQLAlchemyError as exc:
                self._loop_error(f"recording the run of {domain}", exc)
            stored = stored or result.outcome == "stored"
        if stored:
            self._apply_retention()
        self._load_states(done)

    def _record(self, result: RunResult) -> None:
        domain = result.domain
        self.metrics.record_outcome(domain, result.outcome)
        extra = {"domain": domain, "outcome": result.outcome, "replica": self.identity}
        now = utcnow()
        if result.outcome in ("stored", "unchanged"):
            self._failures.pop(domain, None)
            log.info("run finished", extra={**extra, "version": result.version})
            self._clear_deferral(domain)
        elif result.outcome == "deferred" and not result.shared:
            log.info("run left to another replica", extra={**extra, "reason": result.message})
        elif result.outcome == "deferred":
            delay = defer_seconds(result.retry_after, self._busy_defer())
            log.info(
                "run deferred",
                extra={**extra, "seconds": round(delay, 1), "reason": result.message},
            )
            self._defer([domain], now + timedelta(seconds=delay), result.message)
        elif result.outcome == "failed":
            failures = self._failures.get(domain, 0) + 1
            self._failures[domain] = failures
            every = self.settings.export_for(domain).every
            delay = failure_backoff(failures, every, self.options.failure_retry)
            log.warning(
                "run failed",
                extra={**extra, "error": result.message, "retry_in_seconds": round(delay)},
            )
            self._defer([domain], now + timedelta(seconds=delay), result.message)
        else:
            log.info("run interrupted; it resumes at the next start", extra=extra)

    def _busy_defer(self) -> float:
        if self.options.busy_defer is not None:
            return self.options.busy_defer
        return min(300.0, max(5.0, 2 * self.settings.api.poll_interval))

    def _defer(self, domains: list[str], until: datetime, reason: str) -> None:
        for domain in domains:
            state = self._states.get(domain)
            if state is not None and (state.not_before is None or state.not_before < until):
                self._states[domain] = replace(state, not_before=until)
        defer(self.app.db, domains, until, reason)

    def _clear_deferral(self, domain: str) -> None:
        clear_deferral(self.app.db, domain)

    def _apply_retention(self) -> None:
        from mirror.store.retention import gc

        try:
            report = gc(self.app, keep=self.settings.store.keep)
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
        self._update_store_bytes()

    def _update_store_bytes(self) -> None:
        try:
            self.metrics.store_bytes.set(self.app.store.used_bytes())
        except OSError as exc:
            log.warning("cannot measure the store: %s", exc.strerror or exc)

    def _load_states(self, domains: Iterable[str] | None = None) -> None:
        """(Re)load scheduler states from the index: all of them, or just `domains`.

        A full reload also picks up what other processes (CLI runs, replicas) did.
        """
        if domains is None:
            self._refreshed_at = time.monotonic()
        configured = {export.domain: export for export in self.settings.exports}
        wanted = list(configured) + sorted(self._transient) if domains is None else list(domains)
        exports: list[ExportSettings] = []
        for domain in wanted:
            if domain in configured:
                exports.append(configured[domain])
            elif domain in self._transient:
                exports.append(ExportSettings(domain=domain))
            else:
                self._states.pop(domain, None)
        with self.app.db.session() as session:
            fresh = load_states(session, exports, self._known_since)
        for domain, state in fresh.items():
            if domain in self._transient and state.active is None:
                self._transient.discard(domain)
                self._states.pop(domain, None)
                continue
            self._states[domain] = state
        if domains is None:
            for domain in list(self._states):
                if domain not in configured and domain not in self._transient:
                    del self._states[domain]

    def _idle(self) -> bool:
        """True when nothing runs and every domain has finished at least one run."""
        if self._futures:
            return False
        for state in self._states.values():
            if state.active is not None:
                return False
            if state.last_run_id is None and state.latest_version_at is None:
                return False
        return True

    def _status_text(self, now: datetime) -> str:
        return status_line(len(self._futures), len(self._states) - len(self._futures), None, now)

    # --- reload ---

    def _reload(self) -> None:
        self._reload_requested = False
        self.notifier.reloading()
        old = self.settings
        try:
            new = load_settings(self.config_path)
        except ConfigError as exc:
            log.error("config reload failed; keeping the old config", extra={"error": str(exc)})
            self.notifier.ready()
            return
        if new.store != old.store:
            log.warning("store settings changed; they take effect at the next restart")
            new = new.model_copy(update={"store": old.store})
        if new.daemon.listen != old.daemon.listen:
            log.warning("daemon.listen changed; it takes effect at the next restart")
        self.app.settings = new
        now = utcnow()
        before = {export.domain for export in old.exports}
        after = {export.domain for export in new.exports}
        for domain in after - before:
            self._known_since[domain] = now
        for domain in before - after:
            self._known_since.pop(domain, None)
            if domain in self._futures:
                self._transient.add(domain)
        self._load_states()
        self._seed_metrics(after - before)
        self.metrics.domains.set(len(after))
        log.info(
            "config reloaded",
            extra={
                "added": sorted(after - before),
                "removed": sorted(before - after),
                "domains": len(after),
            },
        )
        self.notifier.ready()

    # --- shutdown ---

    def _shutdown(self) -> None:
        running = len(self._futures)
        self.notifier.stopping(f"stopping: {running} running runs saving their state")
        log.info("stopping", extra={"running": running})
        self.cancel.set()
        deadline = time.monotonic() + 3600
        while self._futures and time.monotonic() < deadline:
            pending = [f for f in self._futures.values() if not f.done()]
            if not pending:
                break
            self._sleep(1.0)
            if self.notifier.watchdog_seconds:
                self.notifier.watchdog()
        self._reap_quietly()
        log.info("stopped")

    def _reap_quietly(self) -> None:
        for domain, future in list(self._futures.items()):
            if future.done():
                self._futures.pop(domain)
                with self._lock:
                    live = self._live.running.pop(domain, None)
                    if live is not None:
                        self._set_state_gauge(live.state, None)
                try:
                    self._record(future.result())
                except SQLAlchemyError as exc:
                    self._loop_error(f"recording the run of {domain}", exc)

    def _close(self) -> None:
        self.cancel.set()
        self._pool.shutdown(wait=True, cancel_futures=True)
        if self.metrics_server is not None:
            self.metrics_server.stop()
        self.notifier.close()
        self.app.close()
        for fd in (self._wake_r, self._wake_w):
            with contextlib.suppress(OSError):
                os.close(fd)

    # --- waking up ---

    def _wake(self) -> None:
        try:
            os.write(self._wake_w, b"\0")
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN, errno.EBADF):
                raise

    def _sleep(self, seconds: float) -> None:
        with contextlib.suppress(InterruptedError):
            select.select([self._wake_r], [], [], max(0.0, seconds))
        try:
            while os.read(self._wake_r, 4096):
                pass
        except BlockingIOError:
            pass

    def _install_signals(self) -> dict[int, Any]:
        if threading.current_thread() is not threading.main_thread():
            return {}

        def on_stop(_signum: int, _frame: FrameType | None) -> None:
            self._stop_requested = True

        def on_reload(_signum: int, _frame: FrameType | None) -> None:
            self._reload_requested = True

        previous: dict[int, Any] = {
            signal.SIGTERM: signal.signal(signal.SIGTERM, on_stop),
            signal.SIGINT: signal.signal(signal.SIGINT, on_stop),
            signal.SIGHUP: signal.signal(signal.SIGHUP, on_reload),
        }
        previous[-1] = signal.set_wakeup_fd(self._wake_w, warn_on_full_buffer=False)
        faulthandler.register(signal.SIGUSR1, all_threads=True, chain=False)
        return previous

    def _restore_signals(self, previous: dict[int, Any]) -> None:
        if not previous:
            return
        signal.set_wakeup_fd(previous.pop(-1))
        faulthandler.unregister(signal.SIGUSR1)
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _short(exc: BaseException, limit: int = 300) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def run_daemon(
    settings: Settings,
    *,
    config_path: str | None = None,
    options: DaemonOptions | None = None,
) -> int:
    """Run the daemon until SIGTERM (or, with exit_when_idle, until there is nothing to do)."""
    return Daemon(settings, config_path=config_path, options=options).run()
