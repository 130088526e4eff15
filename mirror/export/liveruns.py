"""The metrics of the runs a daemon has in flight, kept from their RunEvents.

Promises: `LiveRuns` is safe to feed from worker threads. Each run counts in
`mirror_runs_in_state` under exactly one state from `begin` to `end`; downloaded bytes are
counted once (a resumed download that starts part-way does not count its first part
again); the time a run spent downloading is observed when it leaves that state or ends.
`awaiting_start()` counts the runs that have not got a vendor job yet: they are about to
spend the start budget.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from mirror.export.metrics import DaemonMetrics
from mirror.export.outcome import RunEvent


@dataclass
class _Live:
    """What the daemon knows about one running run."""

    state: str
    bytes_seen: int = 0
    job_id: str | None = None
    download_started: float | None = None


class LiveRuns:
    """The runs in flight, by domain, and the gauges and counters they move."""

    def __init__(
        self, metrics: DaemonMetrics, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.metrics = metrics
        self.clock = clock
        self._lock = threading.Lock()
        self._running: dict[str, _Live] = {}
        self._awaiting_start: set[str] = set()

    def begin(self, domain: str, state: str, bytes_done: int, *, needs_start: bool) -> None:
        with self._lock:
            self._running[domain] = _Live(state=state, bytes_seen=bytes_done)
            if needs_start:
                self._awaiting_start.add(domain)
            self._move_gauge(None, state)

    def awaiting_start(self) -> int:
        with self._lock:
            return len(self._awaiting_start)

    def on_event(self, event: RunEvent) -> None:
        """RunEvent from a worker thread: per-state gauges, bytes and download time."""
        domain = event.domain
        with self._lock:
            live = self._running.get(domain)
            if live is None:
                return
            if event.job_id:
                self._awaiting_start.discard(domain)
            live.job_id = event.job_id or live.job_id
            if event.bytes_done is not None and event.bytes_done > live.bytes_seen:
                self.metrics.download_bytes.labels(domain=domain).inc(
                    event.bytes_done - live.bytes_seen
                )
            if event.bytes_done is not None:
                live.bytes_seen = event.bytes_done
            if event.state != live.state:
                self._leave_state(live)
                self._move_gauge(live.state, event.state)
                live.state = event.state
                if event.state == "downloading":
                    live.download_started = self.clock()

    def end(self, domain: str) -> None:
        with self._lock:
            live = self._running.pop(domain, None)
            self._awaiting_start.discard(domain)
            if live is not None:
                self._leave_state(live)
                self._move_gauge(live.state, None)

    def _leave_state(self, live: _Live) -> None:
        if live.state == "downloading" and live.download_started is not None:
            self.metrics.download_seconds.observe(self.clock() - live.download_started)
            live.download_started = None

    def _move_gauge(self, old: str | None, new: str | None) -> None:
        if old is not None:
            self.metrics.runs_in_state.labels(state=old).dec()
        if new is not None:
            self.metrics.runs_in_state.labels(state=new).inc()
