"""The in-flight runs' metrics (mirror.export.liveruns), read back from the registry."""

from __future__ import annotations

from mirror.export.liveruns import LiveRuns
from mirror.export.metrics import DaemonMetrics
from mirror.export.outcome import RunEvent

DOMAIN = "docs.live.test"


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def value(metrics: DaemonMetrics, name: str, **labels: str) -> float:
    found = metrics.registry.get_sample_value(name, labels)
    return 0.0 if found is None else found


def test_a_run_moves_through_the_state_gauges_counts_its_bytes_once_and_its_download_time() -> None:
    metrics = DaemonMetrics()
    clock = Clock()
    live = LiveRuns(metrics, clock=clock)
    live.begin(DOMAIN, "downloading", 1000, needs_start=False)  # a resumed download
    assert value(metrics, "mirror_runs_in_state", state="downloading") == 1
    live.on_event(RunEvent(DOMAIN, 1, "downloading", "se_1", bytes_done=1500))
    live.on_event(RunEvent(DOMAIN, 1, "downloading", "se_1", bytes_done=4000))
    assert value(metrics, "mirror_download_bytes_total", domain=DOMAIN) == 3000
    live.on_event(RunEvent(DOMAIN, 1, "downloading", "se_1", bytes_done=0))  # restarted
    live.on_event(RunEvent(DOMAIN, 1, "downloading", "se_1", bytes_done=500))
    assert value(metrics, "mirror_download_bytes_total", domain=DOMAIN) == 3500
    live.on_event(RunEvent(DOMAIN, 1, "pending", "se_1"))
    live.on_event(RunEvent(DOMAIN, 1, "downloading", "se_1"))
    clock.now += 7
    live.on_event(RunEvent(DOMAIN, 1, "downloaded", "se_1"))
    assert value(metrics, "mirror_download_seconds_sum") == 7
    live.end(DOMAIN)
    for state in ("downloading", "downloaded", "pending"):
        assert value(metrics, "mirror_runs_in_state", state=state) == 0
    live.on_event(RunEvent(DOMAIN, 1, "stored", "se_1"))  # after the end: ignored


def test_runs_without_a_vendor_job_count_against_the_start_budget() -> None:
    live = LiveRuns(DaemonMetrics())
    live.begin(DOMAIN, "pending", 0, needs_start=True)
    live.begin("other.live.test", "started", 0, needs_start=False)
    assert live.awaiting_start() == 1
    live.on_event(RunEvent(DOMAIN, 1, "started", "se_1"))
    assert live.awaiting_start() == 0
    live.begin(DOMAIN, "pending", 0, needs_start=True)
    live.end(DOMAIN)
    assert live.awaiting_start() == 0
