"""`mirror daemon` with 1,000 configured domains: time to READY=1 and CPU use while idle.

A real daemon process against the simulator on loopback. All 1,000 domains are due
at once; the start budget (10 per hour) lets 10 run and defers the other 990, after
which nothing is due for an hour. Idle CPU is the process's user+system time (from
/proc/<pid>/stat) over a 31 s window, which includes one of the daemon's periodic full
reloads of the schedule from the index, once those 10 runs are stored.

`python -m bench daemon_idle` (or run this file). Targets: ready < 10 s, idle < 1% of a core.
"""

from __future__ import annotations

import signal
import sys
import tempfile
import time
from pathlib import Path

from tests.integration.test_daemon import (
    cpu_seconds,
    daemon_config,
    daemon_process,
    simulator,
    stored_domains,
    wait_for,
)

DOMAINS = 1000
IDLE_WINDOW = 31.0  # longer than one full state refresh (every 30 s)


def main() -> None:
    with (
        tempfile.TemporaryDirectory(prefix="mirror-bench-daemon-") as tmp,
        simulator(one_active_job=False) as sim,
    ):
        workdir = Path(tmp)
        config = daemon_config(
            workdir / "c.toml",
            base_url=sim.url,
            store=workdir / "store",
            domains=[f"site{i:04d}.example.com" for i in range(DOMAINS)],
        )
        with daemon_process(config, sim.key, workdir) as daemon:
            ready = daemon.wait_ready(timeout=60)
            wait_for(lambda: len(stored_domains(config)) == 10, 120, "the 10 budgeted runs")
            time.sleep(1.0)
            before = cpu_seconds(daemon.pid)
            started = time.monotonic()
            time.sleep(IDLE_WINDOW)
            used = cpu_seconds(daemon.pid) - before
            window = time.monotonic() - started
            daemon.signal(signal.SIGTERM)
            stop_started = time.monotonic()
            code = daemon.proc.wait(30)
            stop_seconds = time.monotonic() - stop_started
        starts = sum(len(jobs) for jobs in sim.stats.starts.values())
    idle_percent = 100 * used / window
    print(f"{'domains configured':<34} {DOMAINS:>10}")
    print(f"{'READY=1 after':<34} {ready:>9.2f}s   (target < 10 s)")
    print(
        f"{'idle CPU over ' + f'{window:.0f}s':<34} {idle_percent:>9.3f}%   (target < 1% of a core)"
    )
    print(f"{'vendor starts (budget 10/hour)':<34} {starts:>10}")
    print(f"{'SIGTERM to exit':<34} {stop_seconds:>9.2f}s   exit code {code}")
    if ready >= 10 or idle_percent >= 1 or starts > 10 or code != 0:
        sys.exit("daemon_idle: a target was missed")


if __name__ == "__main__":
    main()
