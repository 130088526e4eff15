"""Helpers for benchmarks: timing commands and child processes, peak memory, ratio tables."""

from __future__ import annotations

import os
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


def _high_water_mib(pid: int) -> float | None:
    """VmHWM of a live child once it has exec'd: its own peak, reset by exec (unlike
    ru_maxrss, which Linux carries over from the parent at fork). Before the exec the
    child still shows this process's command line and memory."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline, open("/proc/self/cmdline", "rb") as own:
            if cmdline.read() == own.read():
                return None
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def run_timed(
    name: str, argv: list[str], size: int, env: dict[str, str] | None = None
) -> Measurement:
    """Run a command to completion; its wall time and peak RSS (VmHWM sampled while it runs)."""
    started = time.monotonic()
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, env=env or dict(os.environ))
    peak = 0.0
    while process.poll() is None:
        peak = _high_water_mib(process.pid) or peak  # monotonic: the last is the peak
        time.sleep(0.005)
    seconds = time.monotonic() - started
    if process.returncode != 0:
        raise SystemExit(f"{name}: {' '.join(argv)} exited {process.returncode}")
    return Measurement(name, seconds, size, peak or None)


def python_timed(name: str, code: str, size: int, env: dict[str, str] | None = None) -> Measurement:
    """Run Python code in a fresh interpreter so its peak RSS is its own."""
    return run_timed(name, [sys.executable, "-c", code], size, env)


def baseline_rss_mib(
    modules: str = "mirror.cli, mirror.vendor.download, mirror.export.runner",
) -> float:
    """Peak RSS of an interpreter that only imports `modules` (the fixed cost)."""
    code = f"import time, {modules}; time.sleep(0.3)"
    return run_timed("baseline", [sys.executable, "-c", code], 0).peak_rss_mib or 0.0


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
