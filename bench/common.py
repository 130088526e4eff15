"""Helpers for benchmarks: timing commands and child processes, peak memory, ratio tables."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class Measurement:
    name: str
    seconds: float
    bytes: int
    peak_rss_mib: float | None = None

    @property
    def mib_per_second(self) -> float:
        return self.bytes / 1024**2 / self.seconds if self.seconds else float("inf")


def run_timed(
    name: str, argv: list[str], size: int, env: dict[str, str] | None = None
) -> Measurement:
    """Run a command to completion; its wall time and peak RSS (from wait4's rusage)."""
    started = time.monotonic()
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, env=env or dict(os.environ))
    _, status, usage = os.wait4(process.pid, 0)
    seconds = time.monotonic() - started
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{name}: {' '.join(argv)} exited {os.waitstatus_to_exitcode(status)}")
    return Measurement(name, seconds, size, usage.ru_maxrss / 1024)


def python_timed(name: str, code: str, size: int, env: dict[str, str] | None = None) -> Measurement:
    """Run Python code in a fresh interpreter so its peak RSS is its own."""
    return run_timed(name, [sys.executable, "-c", code], size, env)


def baseline_rss_mib() -> float:
    """Peak RSS of an interpreter that only imports mirror's modules (the fixed cost)."""
    code = "import mirror.cli, mirror.download, mirror.exporter"
    process = subprocess.Popen([sys.executable, "-c", code])
    _, _, usage = os.wait4(process.pid, 0)
    return usage.ru_maxrss / 1024


def print_table(rows: list[Measurement], reference: str) -> None:
    """One line a measurement, with its throughput relative to `reference`."""
    ref = next(r for r in rows if r.name == reference)
    header = f"{'what':<34} {'MiB':>8} {'seconds':>8} {'MiB/s':>9}"
    print(f"{header} {'vs ' + reference:>14} {'peak RSS':>10}")
    for row in rows:
        ratio = row.mib_per_second / ref.mib_per_second
        rss = f"{row.peak_rss_mib:.0f} MiB" if row.peak_rss_mib is not None else "-"
        print(
            f"{row.name:<34} {row.bytes / 1024**2:>8.0f} {row.seconds:>8.2f} "
            f"{row.mib_per_second:>9.1f} {ratio:>13.2f}x {rss:>10}"
        )
    _ = resource  # keep the import for callers that want getrusage
