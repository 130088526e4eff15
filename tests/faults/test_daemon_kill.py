"""SIGKILL the real `mirror daemon` at random points, restart it, and check nothing is lost.

Several domains re-export every 2 s through a throttled link (so kills land in
starts, polls, downloads and stores alike). After the kills a last daemon runs to
completion, and then:
- every domain has a stored version and no run is left unfinished;
- the simulator saw no second export job for any run: every job id in the index was
  started exactly once, and a job the index does not know is allowed only where the
  exporter logged the one unavoidable window (the vendor accepted a start and the
  process died before the job id was committed; the next start is then refused with
  409 until that orphan ends);
- `store verify` is clean and no temp file is left.

MIRROR_FAULT_KILLS sets the number of kills (default 5; `make faults` runs 100) and
MIRROR_FAULT_SEED the RNG seed (default 1).
"""

from __future__ import annotations

import os
import random
import time
from collections import Counter
from pathlib import Path

import pytest
from sqlalchemy import select

from mirror.store.inventory import verify_store
from mirror.store.models import ExportRun, Version
from tests.fixtures.daemon import (
    daemon_config,
    daemon_process,
    index,
    simulator,
)
from tests.fixtures.wire import ThrottledProxy

KILLS = int(os.environ.get("MIRROR_FAULT_KILLS", "5"))
SEED = int(os.environ.get("MIRROR_FAULT_SEED", "1"))
DOMAINS = [f"k{i}.example.com" for i in range(4)]
BUNDLE = 6 * 1024 * 1024
UNKNOWN_START = "ended without a job id"


@pytest.mark.fault(f"kill: daemon loop, {KILLS} SIGKILLs", "nothing lost, no second job, verify ok")
@pytest.mark.slow
@pytest.mark.timeout(max(600, KILLS * 10))
def test_sigkill_at_random_points_loses_nothing(tmp_path: Path) -> None:
    rng = random.Random(SEED)
    began = time.monotonic()
    logs: list[str] = []
    with simulator(bundle_size=BUNDLE, run_seconds=0.3) as sim:
        proxy = ThrottledProxy(sim.url, rate=12 * 1024 * 1024)
        try:

            def config(every: str) -> Path:
                return daemon_config(
                    tmp_path / "c.toml",
                    base_url=proxy.url,
                    store=tmp_path / "store",
                    domains=DOMAINS,
                    every=every,
                    api={"max_starts_per_hour": 10_000},
                    daemon={"concurrency": 3},
                )

            path = config("2s")
            for _ in range(KILLS):
                with daemon_process(
                    path, sim.key, tmp_path, "--busy-defer", "0.3", "--failure-retry", "1"
                ) as daemon:
                    time.sleep(rng.uniform(0.2, 2.5))
                    daemon.kill()
                    logs.append(daemon.log())

            path = config("1h")
            with daemon_process(
                path, sim.key, tmp_path, "--exit-when-idle", "--busy-defer", "0.3"
            ) as final:
                assert final.proc.wait(120) == 0, final.log()
                logs.append(final.log())
        finally:
            proxy.close()
        sim_jobs = {domain: list(jobs) for domain, jobs in sim.stats.starts.items()}

    with index(path) as app:
        with app.db.session() as session:
            runs = list(session.scalars(select(ExportRun)))
            versioned = set(session.scalars(select(Version.domain).distinct()))
        report = verify_store(app)
        temp_left = app.store.temp_files()

    assert versioned == set(DOMAINS)
    assert [run.id for run in runs if run.active] == []
    assert report.ok, report.problems
    assert temp_left == []

    text = "\n".join(logs)
    for domain in DOMAINS:
        known = [run.vendor_job_id for run in runs if run.domain == domain and run.vendor_job_id]
        started = sim_jobs.get(domain, [])
        assert len(known) == len(set(known)), f"{domain}: two runs share a job"
        counts = Counter(started)
        assert all(counts[job] == 1 for job in known), f"{domain}: a run's job is unknown or twice"
        orphans = len(started) - len(known)
        windows = sum(
            1 for line in text.splitlines() if UNKNOWN_START in line and f" of {domain} " in line
        )
        assert 0 <= orphans <= windows, (
            f"{domain}: {orphans} vendor job(s) no run knows, {windows} logged unknown start(s)"
        )

    elapsed = time.monotonic() - began
    print(
        f"\n{KILLS} kills in {elapsed:.0f}s; {len(runs)} runs; "
        f"{sum(len(j) for j in sim_jobs.values())} vendor jobs"
    )
