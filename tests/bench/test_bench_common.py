"""The benchmark harness: alternating rounds after a warm-up, medians, pairwise ratios, RSS."""

from __future__ import annotations

import statistics
import sys

from bench.common import Row, Side, compare, run_once


def test_compare_alternates_after_a_warm_up_and_reports_the_median_ratio() -> None:
    order: list[str] = []
    slow = Side("slow", lambda: ["sleep", "0.6"], before=lambda: order.append("mirror"))
    fast = Side("fast", lambda: ["sleep", "0.05"], before=lambda: order.append("peer"))

    row = compare(Row("step", "slow", "fast", 0), slow, fast, rounds=5)

    assert order == ["mirror", "peer"] + ["mirror", "peer", "peer", "mirror"] * 2 + [
        "mirror",
        "peer",
    ]
    assert len(row.mirror_runs) == len(row.peer_runs) == 5
    # wall times: at least what each side sleeps; a busy machine only adds to both
    assert row.mirror_seconds >= 0.6 and row.peer_seconds >= 0.05
    assert row.mirror_seconds == statistics.median(run.seconds for run in row.mirror_runs)
    per_round = [p.seconds / m.seconds for p, m in zip(row.peer_runs, row.mirror_runs, strict=True)]
    assert row.ratio == statistics.median(per_round)
    assert row.ratio < 1  # the peer sleeps 12x shorter: mirror is behind


def test_peak_rss_counts_the_children_of_a_shell_pipeline() -> None:
    grow = f"{sys.executable} -c 'b = bytearray(64 * 1024 * 1024); import time; time.sleep(0.2)'"
    run = run_once(["sh", "-c", f"{grow} | cat"])
    assert run.peak_rss_mib >= 64


def test_cpu_seconds_count_the_children_and_not_the_wall() -> None:
    code = "import time\nend = time.process_time() + 0.3\nwhile time.process_time() < end: pass"
    spin = f"{sys.executable} -c '{code}'"
    busy = run_once(["sh", "-c", f"{spin} | cat"])
    idle = run_once(["sleep", "0.3"])
    assert busy.cpu_seconds >= 0.3
    assert idle.cpu_seconds < 0.1 and idle.seconds >= 0.3
