"""The runs a daemon has in flight: one worker thread per run, at most one per domain.

Promises: a domain is submitted only when no run of it is in flight here; every run
reports its events to `LiveRuns` (metrics, the start budget's pending starts); a
finished run is recorded in the `DomainBook` exactly once, and a database error while
recording is the loop's to log and survive, not the run's.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

from sqlalchemy.exc import SQLAlchemyError

from mirror.config import Settings
from mirror.export.claim import DueCheck
from mirror.export.domains import DomainBook, Pacing
from mirror.export.liveruns import LiveRuns
from mirror.export.metrics import DaemonMetrics
from mirror.export.worker import RunResult, Worker
from mirror.store.app import App

MAX_POOL = 64


class InFlight:
    """Submits runs to worker threads and collects them when they finish."""

    def __init__(
        self,
        app: App,
        identity: str,
        cancel: threading.Event,
        metrics: DaemonMetrics,
        book: DomainBook,
        on_error: Callable[[str, BaseException], None],
        on_done: Callable[[], None],
    ) -> None:
        self._pool = ThreadPoolExecutor(max_workers=MAX_POOL, thread_name_prefix="mirror-run")
        self._futures: dict[str, Future[RunResult]] = {}
        self._lock = threading.Lock()
        self._book = book
        self._on_error = on_error
        self._on_done = on_done
        self.live = LiveRuns(metrics)
        self._worker = Worker(app, identity, cancel, metrics, self.live.on_event, on_error)

    def __len__(self) -> int:
        return len(self._futures)

    def domains(self) -> set[str]:
        with self._lock:
            return set(self._futures)

    def all_done(self) -> bool:
        return all(future.done() for future in self._futures.values())

    def submit(self, domain: str, settings: Settings, due_check: DueCheck) -> None:
        """Run `domain` on a worker thread; `on_done` is called when it finishes."""
        state = self._book.states[domain]
        self.live.begin(
            domain,
            state.active.state if state.active else "pending",
            state.active.bytes_done if state.active else 0,
            needs_start=state.needs_start,
        )
        future = self._pool.submit(self._worker.run, domain, settings, due_check)
        with self._lock:
            self._futures[domain] = future
        future.add_done_callback(lambda _f: self._on_done())

    def collect(self, pacing: Pacing) -> tuple[list[str], bool]:
        """Record every finished run in the book; returns their domains and whether any
        stored a new version."""
        with self._lock:
            done = [domain for domain, future in self._futures.items() if future.done()]
            finished = [(domain, self._futures.pop(domain).result()) for domain in done]
        stored = False
        for domain, result in finished:
            self.live.end(domain)
            try:
                self._book.record(result, pacing)
            except SQLAlchemyError as exc:
                self._on_error(f"recording the run of {domain}", exc)
            stored = stored or result.outcome == "stored"
        return done, stored

    def close(self) -> None:
        """Wait for the workers (the caller has set the cancel event) and stop the pool."""
        self._pool.shutdown(wait=True, cancel_futures=True)
