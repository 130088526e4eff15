"""`mirror export run` killed (SIGKILL) or stopped (SIGTERM) mid-way, then run again.

The simulator cuts every download every few MiB (with the exporter's backoff in
between), so a download lasts long enough to be hit. Whatever the kill point
after the vendor job id is committed: the run resumes the same vendor job and the
same partial file, the stored sha256 is the simulator's, and no second job is
started. MIRROR_FAULT_KILLS sets the kills of the loop (default 3) and
MIRROR_FAULT_SEED its RNG seed.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from sqlalchemy import select

from mirror.archive import inspect_archive
from mirror.sim import Simulator
from mirror.store.app import App
from mirror.store.inventory import verify_store
from mirror.store.models import ExportRun, RunState, Version
from mirror.vendorapi.download import CHECKPOINT_BYTES
from tests.fixtures.cli import mirror_cli, start_mirror, write_config
from tests.fixtures.daemon import index

MiB = 1024 * 1024
KILLS = int(os.environ.get("MIRROR_FAULT_KILLS", "3"))
SEED = int(os.environ.get("MIRROR_FAULT_SEED", "1"))


def make_config(tmp_path: Path, sim: Simulator) -> Path:
    api = {"poll_interval": "0.05s", "max_poll_interval": "0.2s", "max_starts_per_hour": 10_000}
    document = {
        "api": {"base_url": sim.url, **api},
        "store": {"path": str(tmp_path / "store")},
    }
    return write_config(tmp_path / "config.toml", document)


def the_run(app: App, domain: str) -> ExportRun | None:
    with app.db.session() as session:
        return session.scalars(
            select(ExportRun).where(ExportRun.domain == domain).order_by(ExportRun.id.desc())
        ).first()


def spawn(config: Path, key: str, domain: str) -> subprocess.Popen[str]:
    return start_mirror(
        *("--config", str(config), "export", "run", "--adhoc", domain),
        env={"MIRROR_API_KEY": key},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for(
    app: App, domain: str, process: subprocess.Popen[str], ready: Callable[[ExportRun], bool]
) -> ExportRun | None:
    """The run once `ready` holds; None when the process ended first."""
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        run = the_run(app, domain)
        if run is not None and ready(run):
            return run
        if process.poll() is not None:
            return None
        time.sleep(0.01)
    process.kill()
    raise AssertionError(f"the run of {domain} never got there")


def served(sim: Simulator, job_id: str) -> int:
    return int(sim.stats.snapshot()["bytes_served"].get(job_id, 0))


def finish(config: Path, sim: Simulator, domain: str) -> dict[str, object]:
    sim.set_faults(cuts_remaining=0)
    result = mirror_cli(
        "--config",
        str(config),
        "--json",
        "export",
        "run",
        "--adhoc",
        domain,
        env={"MIRROR_API_KEY": sim.key},
    )
    assert result.returncode == 0, result.stderr
    outcome: dict[str, object] = json.loads(result.stdout)
    return outcome


def downloading(run: ExportRun) -> bool:
    return run.state == RunState.DOWNLOADING and run.bytes_done > 0


@pytest.fixture
def slow_sim(sim_factory: Callable[..., Simulator]) -> Simulator:
    sim = sim_factory(bundle_size=64 * MiB)
    sim.set_faults(cut_after_bytes=12 * MiB, cuts_remaining=100_000)
    return sim


@pytest.mark.fault("kill: export run SIGKILLed mid-download", "resumes the same job and file")
def test_killed_export_run_resumes_the_same_job_and_file(
    slow_sim: Simulator, tmp_path: Path
) -> None:
    sim, domain = slow_sim, "docs.killed.test"
    config = make_config(tmp_path, sim)
    with index(config) as app:
        process = spawn(config, sim.key, domain)
        run = wait_for(app, domain, process, downloading)
        assert run is not None, process.communicate()[1]
        process.kill()
        process.wait()
        killed = the_run(app, domain)
        assert killed is not None and killed.vendor_job_id is not None
        job_id = killed.vendor_job_id
        before = served(sim, job_id)
        outcome = finish(config, sim, domain)
        assert outcome["state"] == "stored" and outcome["resumed"] is True
        assert outcome["job_id"] == job_id and outcome["run_id"] == killed.id
        assert outcome["sha256"] == sim.bundle_sha256(job_id)
        assert len(sim.stats.snapshot()["starts"][domain]) == 1
        size = int(str(outcome["size"]))
        second = served(sim, job_id) - before
        assert second <= size - killed.bytes_done  # continued from the checkpoint
        assert second < size
        assert app.store.temp_files() == [] and verify_store(app).ok
        # the inspection was fed the partial file's prefix, then the rest: the whole archive
        blob = app.store.blob_path(str(outcome["sha256"]))
        assert outcome["tree_sha256"] == inspect_archive(blob).tree_sha256


@pytest.mark.fault("kill: export run SIGTERMed mid-download", "exit 75, checkpoint, resumes")
def test_sigterm_stops_cleanly_and_the_next_run_resumes(
    slow_sim: Simulator, tmp_path: Path
) -> None:
    sim, domain = slow_sim, "docs.term.test"
    config = make_config(tmp_path, sim)
    with index(config) as app:
        process = spawn(config, sim.key, domain)
        assert wait_for(app, domain, process, downloading) is not None
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=60)
        assert process.returncode == 75, stderr
        assert "run it again to resume" in stderr or "run the export again" in stderr
        stopped = the_run(app, domain)
        assert stopped is not None and stopped.state == RunState.DOWNLOADING
        assert stopped.lease_owner is None and stopped.bytes_done > 0
        partial = app.store.temp_path(stopped.partial_name or "")
        assert partial.stat().st_size == stopped.bytes_done  # fsynced up to the checkpoint
        outcome = finish(config, sim, domain)
        assert outcome["resumed"] is True and outcome["run_id"] == stopped.id
        assert outcome["sha256"] == sim.bundle_sha256(str(outcome["job_id"]))
        assert len(sim.stats.snapshot()["starts"][domain]) == 1


@pytest.mark.fault(
    f"kill: export run loop, {KILLS} SIGKILLs", "one vendor job per run, right bytes"
)
@pytest.mark.slow
@pytest.mark.timeout(max(600, KILLS * 30))
def test_kill_loop_never_starts_a_second_job(slow_sim: Simulator, tmp_path: Path) -> None:
    """Kill after every visible step, run after run: each run keeps its one vendor job."""
    sim, domain = slow_sim, "docs.loop.test"
    rng = random.Random(SEED)
    config = make_config(tmp_path, sim)
    with index(config) as app:
        last: tuple[int, str, int] | None = None
        kills: dict[int, int] = {}
        for _ in range(KILLS):
            process = spawn(config, sim.key, domain)

            def moved(run: ExportRun, seen: tuple[int, str, int] | None = last) -> bool:
                # Wait for the committed job id of the newest run (the start window is the
                # one documented exception), then for any visible progress.
                if run.vendor_job_id is None:
                    return False
                return seen is None or (run.id, run.state, run.bytes_done) != seen

            run = wait_for(app, domain, process, moved)
            time.sleep(rng.uniform(0.0, 0.4))
            process.kill()
            process.wait()
            current = the_run(app, domain)
            assert current is not None
            kills[current.id] = kills.get(current.id, 0) + 1
            last = (current.id, current.state, current.bytes_done)
            if run is None:
                assert process.returncode == 0, process.communicate()[1]
        final = the_run(app, domain)
        if final is None or final.state != RunState.STORED:
            finish(config, sim, domain)
        with app.db.session() as session:
            runs = list(session.scalars(select(ExportRun).order_by(ExportRun.id)))
            versions = list(session.scalars(select(Version)))
        assert len(kills) >= 1 and all(r.state == RunState.STORED for r in runs)
        job_ids = [r.vendor_job_id for r in runs]
        assert sim.stats.snapshot()["starts"][domain] == job_ids  # one job per run, no more
        assert sorted(v.run_id or 0 for v in versions) == [r.id for r in runs]
        for run in runs:
            assert run.vendor_job_id is not None
            assert run.sha256 == sim.bundle_sha256(run.vendor_job_id)
            # a kill loses at most what came after the last checkpoint (plus socket buffers)
            limit = run.bytes_done + kills.get(run.id, 0) * (CHECKPOINT_BYTES + 12 * MiB)
            assert served(sim, run.vendor_job_id) <= limit
        assert app.store.temp_files() == [] and verify_store(app).ok
