"""The benchmark harness: mirror against a peer, alternated, medians, pairwise ratios, peak RSS.

Every comparison runs one warm-up of each side (not counted: caches, .pyc files),
then ROUNDS rounds in which both sides run once, alternating which goes first, so
a slow spell of the (shared) machine hits both. It reports the median time of each
side and the median of the per-round ratios peer/mirror (above 1: mirror is
faster). Peak RSS is the highest VmHWM of the command and every process it starts,
sampled while it runs (VmHWM is reset at exec, unlike ru_maxrss which Linux carries
over from the parent at fork). CPU seconds (user + system of the command and every
process it waited for) are the measure a shared machine does not bend; the table gives
their medians and the 1-minute load average seen after each round.

Knobs: MIRROR_BENCH_MIB (bundle size, default 256), MIRROR_BENCH_ROUNDS (default 5).
"""

from __future__ import annotations

import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

MiB = 1024 * 1024
SIZE_MIB = int(os.environ.get("MIRROR_BENCH_MIB", "256"))
ROUNDS = max(5, int(os.environ.get("MIRROR_BENCH_ROUNDS", "5")))
RSS_HEADROOM_MIB = 32  # the budget: peak RSS within the imports + 32 MiB


@dataclass
class Side:
    """One side of a comparison. `argv` is called before every run (a fresh link, a fresh
    bucket); `before` and `after` run untimed around it (`after` checks the result and
    cleans up, so every run starts from the same state)."""

    name: str
    argv: Callable[[], list[str]]
    before: Callable[[], None] | None = None
    after: Callable[[], None] | None = None
    env: dict[str, str] | None = None


@dataclass(frozen=True)
class Run:
    seconds: float
    peak_rss_mib: float
    cpu_seconds: float = 0.0


@dataclass
class Row:
    """One line of the table: a step, mirror and its peer, and what the issue asks for."""

    step: str
    mirror: str
    peer: str
    size: int
    mirror_runs: list[Run] = field(default_factory=list)
    peer_runs: list[Run] = field(default_factory=list)
    target: str = ""
    rss_budget_mib: float | None = None
    loads: list[float] = field(default_factory=list)
    pages: int = 0  # a site's pages and files, for the rates per second beside MiB/s
    files: int = 0
    peer_size: int = 0  # when the peer handles other bytes than `size`: the ratio is per byte

    @property
    def mirror_seconds(self) -> float:
        return statistics.median(r.seconds for r in self.mirror_runs)

    @property
    def peer_seconds(self) -> float:
        return statistics.median(r.seconds for r in self.peer_runs)

    @property
    def ratio(self) -> float:
        """Median of the per-round ratios peer/mirror: above 1, mirror is faster (per byte,
        when the peer handles `peer_size` bytes)."""
        scale = self.size / self.peer_size if self.peer_size else 1.0
        pairs = zip(self.peer_runs, self.mirror_runs, strict=True)
        return statistics.median(scale * p.seconds / m.seconds for p, m in pairs)

    @property
    def mirror_cpu(self) -> float:
        return statistics.median(r.cpu_seconds for r in self.mirror_runs)

    @property
    def peer_cpu(self) -> float:
        return statistics.median(r.cpu_seconds for r in self.peer_runs)

    @property
    def load(self) -> str:
        """The 1-minute load average after the rounds: lowest-highest."""
        if not self.loads:
            return "-"
        return f"{min(self.loads):.1f}-{max(self.loads):.1f}"

    @property
    def rates(self) -> str:
        """mirror's MiB/s (of `size`), and pages and files per second when the row has them."""
        seconds = self.mirror_seconds
        if not self.size or not seconds:
            return "-"
        out = f"{self.size / MiB / seconds:.0f} MiB/s"
        if self.pages:
            out += f", {self.pages / seconds:.0f} pages/s, {self.files / seconds:.0f} files/s"
        return out

    @property
    def mirror_rss(self) -> float:
        return max(r.peak_rss_mib for r in self.mirror_runs)

    @property
    def peer_rss(self) -> float:
        return max(r.peak_rss_mib for r in self.peer_runs)


def _children(pid: int) -> list[int]:
    found: list[int] = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as handle:
                found.extend(int(p) for p in handle.read().split())
    except OSError:
        pass
    return found


def _high_water_mib(pid: int) -> float:
    """VmHWM of a live process once it has exec'd (before, it still shows our own memory)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline, open("/proc/self/cmdline", "rb") as own:
            if cmdline.read() == own.read():
                return 0.0
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        return 0.0
    return 0.0


def run_once(argv: list[str], env: dict[str, str] | None = None) -> Run:
    """Run a command to completion: its wall time, CPU time and the peak RSS of its process
    tree."""
    peaks: dict[int, float] = {}
    done = threading.Event()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    process = subprocess.Popen(
        argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env or bench_env()
    )

    def sample() -> None:
        while not done.is_set():
            pending = [process.pid]
            while pending:
                pid = pending.pop()
                peaks[pid] = max(peaks.get(pid, 0.0), _high_water_mib(pid))
                pending.extend(_children(pid))
            done.wait(0.005)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    _, stderr = process.communicate()
    seconds = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    done.set()
    sampler.join()
    if process.returncode != 0:
        raise SystemExit(
            f"{' '.join(argv)[:200]} exited {process.returncode}: {stderr.decode()[-2000:]}"
        )
    return Run(seconds, max(peaks.values(), default=0.0), cpu)


def _run_side(side: Side) -> Run:
    if side.before is not None:
        side.before()
    run = run_once(side.argv(), side.env)
    if side.after is not None:
        side.after()
    return run


def compare(row: Row, mirror: Side, peer: Side, rounds: int = ROUNDS) -> Row:
    """Warm up both sides, then `rounds` alternating rounds; fills `row` and prints a line."""
    print(f"  {row.step}: warm-up", end="", flush=True)
    _run_side(mirror)
    _run_side(peer)
    for index in range(rounds):
        order = [(mirror, row.mirror_runs), (peer, row.peer_runs)]
        for side, runs in order if index % 2 == 0 else reversed(order):
            runs.append(_run_side(side))
        row.loads.append(os.getloadavg()[0])
        print(f", {index + 1}", end="", flush=True)
    print(
        f": mirror {row.mirror_seconds:.3f}s ({row.mirror_cpu:.2f} CPU s), peer "
        f"{row.peer_seconds:.3f}s ({row.peer_cpu:.2f} CPU s), {row.ratio:.2f}x, load {row.load}",
        flush=True,
    )
    return row


def bench_env(**extra: str) -> dict[str, str]:
    """The environment for measured commands: .pyc files written and read (as in an
    installed tool), no test-server settings leaking in."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    return {**env, **extra}


def tool(name: str) -> str:
    """A command from the venv (aws) or PATH; stops the bench if missing."""
    beside = Path(sys.executable).parent / name
    if beside.exists():
        return str(beside)
    found = shutil.which(name)
    if not found:
        raise SystemExit(f"{name} is not installed")
    return found


MODULES_AT_EXIT = """
import json, runpy, sys
out, code, sys.argv = sys.argv[1], sys.argv[2], ["mirror", *sys.argv[3:]]
try:
    if code:
        exec(code, {"__name__": "__main__"})
    else:
        runpy.run_module("mirror", run_name="__main__")
except SystemExit:
    pass
with open(out, "w") as handle:
    json.dump(sorted(m for m in sys.modules if m != "__main__"), handle)
"""
IMPORT_ALL = """
import importlib, json, sys, time
for name in json.load(open(sys.argv[1])):
    try:
        importlib.import_module(name)
    except Exception:
        pass
time.sleep(0.2)
"""


def imports_rss_mib(
    args: list[str], work: Path, env: dict[str, str] | None = None, code: str = ""
) -> float:
    """Peak RSS of an interpreter that only imports what `mirror ARGS` (or Python `code`
    run with ARGS) imported: the fixed cost the memory budget (imports + 32 MiB) counts from.
    The command runs for real once to find out."""
    listing = work / "modules.json"
    subprocess.run(
        [sys.executable, "-c", MODULES_AT_EXIT, str(listing), code, *args],
        env=env or bench_env(),
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return run_once([sys.executable, "-c", IMPORT_ALL, str(listing)], env).peak_rss_mib


def machine() -> str:
    cpu = platform.processor() or "unknown CPU"
    try:
        with open("/proc/cpuinfo") as info:
            cpu = next(line.split(":", 1)[1].strip() for line in info if "model name" in line)
    except (OSError, StopIteration):
        pass
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    return (
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {os.cpu_count()} cores ({cpu}); "
        f"Python {platform.python_version()}; load average {load}; "
        f"MIRROR_BENCH_MIB={SIZE_MIB}, {ROUNDS} rounds after a warm-up"
    )


def print_table(rows: list[Row]) -> None:
    """One Markdown table of every comparison (paste it into bench/RESULTS.md)."""
    print(f"\n{machine()}\n")
    print(
        "| step | mirror | peer | MiB | mirror s | peer s | peer/mirror (median of rounds) "
        "| target | mirror CPU s | peer CPU s | load | mirror peak RSS | budget | peer peak RSS "
        "| mirror rate |"
    )
    print("|---|---|---|---:|---:|---:|---:|---|---:|---:|---|---:|---:|---:|---|")
    for row in rows:
        budget = f"{row.rss_budget_mib:.0f} MiB" if row.rss_budget_mib is not None else "-"
        mirror, peer = (name.replace("|", "\\|") for name in (row.mirror, row.peer))
        print(
            f"| {row.step} | `{mirror}` | `{peer}` | {row.size / MiB:.0f} "
            f"| {row.mirror_seconds:.3f} | {row.peer_seconds:.3f} | {row.ratio:.2f}x "
            f"| {row.target or '-'} | {row.mirror_cpu:.2f} | {row.peer_cpu:.2f} | {row.load} "
            f"| {row.mirror_rss:.0f} MiB | {budget} "
            f"| {row.peer_rss:.0f} MiB | {row.rates} |"
        )
