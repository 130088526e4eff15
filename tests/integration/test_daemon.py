"""`mirror daemon` as a real process against the simulator on loopback.

Covers: the sd_notify protocol (READY/STATUS/WATCHDOG/STOPPING on a real socket),
metrics and /healthz scraped over HTTP, the shared start budget, 409 deferrals,
SIGTERM during a download and resuming from the recorded offset, SIGHUP reloads,
and 1,000 configured domains (ready time, idle CPU).

The daemon is run by tests/fixtures/daemon.py (DaemonProcess, daemon_config).
"""

from __future__ import annotations

import contextlib
import json
import signal
import socket
import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import func, select

from mirror import __version__
from mirror.store.app import App
from mirror.store.models import DomainSchedule, ExportRun, RunState, Version
from mirror.vendorapi.client import VendorClient
from mirror.vendorapi.transport import build_http_client
from tests.fixtures.cli import mirror_cli
from tests.fixtures.daemon import (
    DaemonProcess,
    cpu_seconds,
    daemon_config,
    daemon_process,
    index,
    metric,
    simulator,
    stored_domains,
    wait_for,
)
from tests.fixtures.versions import deliver, open_app
from tests.fixtures.wire import ThrottledProxy

# SIGTERM ends the daemon "normally in well under 5 s" (systemd/README.md) on an idle machine;
# what it promises is to end within the unit's TimeoutStopSec=60s, one api.timeout (30 s) of a
# stalled call included. A test on a busy machine holds it to half that.
STOP_WITHIN = 30.0

# --- tests ---------------------------------------------------------------------------------


def test_exports_every_domain_speaks_sd_notify_and_serves_metrics(tmp_path: Path) -> None:
    domains = [f"d{i}.example.com" for i in range(4)]
    with simulator(one_active_job=False) as sim:
        config = daemon_config(
            tmp_path / "c.toml",
            base_url=sim.url,
            store=tmp_path / "store",
            domains=domains,
            daemon={"concurrency": 2},
        )
        with daemon_process(config, sim.key, tmp_path, watchdog_usec=3_000_000) as daemon:
            daemon.wait_ready()
            url = daemon.metrics_url()
            assert httpx.get(f"{url}/healthz").status_code == 200
            wait_for(lambda: stored_domains(config) == set(domains), 120, "all domains stored")

            def scraped() -> str | None:
                text = httpx.get(f"{url}/metrics").text
                counts = [
                    metric(text, "mirror_runs_total", domain=d, outcome="stored") for d in domains
                ]
                return text if all(c == 1.0 for c in counts) else None

            text = wait_for(scraped, 60, "the runs in the metrics")
            for domain in domains:
                assert metric(text, "mirror_last_success_timestamp_seconds", domain=domain)
                downloaded = metric(text, "mirror_download_bytes_total", domain=domain)
                assert downloaded is not None and downloaded > 0
            assert (metric(text, "mirror_download_seconds_count") or 0) >= len(domains)
            store_bytes = metric(text, "mirror_store_bytes")
            assert store_bytes is not None and store_bytes > 0
            assert metric(text, "mirror_start_budget_remaining") == 10 - len(domains)
            assert metric(text, "mirror_domains") == len(domains)

            started = time.monotonic()
            assert daemon.stop(STOP_WITHIN) == 0
            assert time.monotonic() - started < STOP_WITHIN
            messages = daemon.notifications()
        assert sum(len(jobs) for jobs in sim.stats.starts.values()) == len(domains)

    lines = [line for message in messages for line in message.split("\n")]
    assert "READY=1" in lines
    assert "WATCHDOG=1" in lines
    assert "STOPPING=1" in lines
    assert any(line.startswith("STATUS=") and "idle" in line for line in lines)
    assert lines.index("READY=1") < lines.index("STOPPING=1")
    assert sim.key not in daemon.log()
    assert any(r.get("message") == "export state" for r in daemon.records())

    status = mirror_cli("--config", str(config), "status", "--json")
    assert status.returncode == 0, status.stderr
    rows = {row["domain"]: row for row in json.loads(status.stdout)["domains"]}
    assert set(rows) == set(domains)
    for row in rows.values():
        assert row["last_run"]["state"] == "stored"
        assert row["latest_version"]["version"]
        assert row["next_due_at"] is not None and not row["running"]


def test_start_budget_is_shared_and_never_exceeded(tmp_path: Path) -> None:
    domains = [f"b{i}.example.com" for i in range(6)]
    with simulator(one_active_job=False) as sim:
        config = daemon_config(
            tmp_path / "c.toml",
            base_url=sim.url,
            store=tmp_path / "store",
            domains=domains,
            api={"max_starts_per_hour": 3},
            daemon={"concurrency": 6},
        )
        with daemon_process(config, sim.key, tmp_path) as daemon:
            daemon.wait_ready()

            def settled() -> bool:
                with index(config) as app, app.db.session() as session:
                    deferred = session.scalar(
                        select(func.count())
                        .select_from(DomainSchedule)
                        .where(DomainSchedule.not_before.is_not(None))
                    )
                return len(stored_domains(config)) == 3 and deferred == 3

            wait_for(settled, 120, "3 stored and 3 deferred")
            time.sleep(1.0)
            text = httpx.get(f"{daemon.metrics_url()}/metrics").text
            assert daemon.stop() == 0
        assert sum(len(jobs) for jobs in sim.stats.starts.values()) == 3
        assert sum(sim.stats.start_attempts.values()) == 3
    assert metric(text, "mirror_start_budget_remaining") == 0
    status = mirror_cli("--config", str(config), "status", "--json")
    rows = json.loads(status.stdout)["domains"]
    deferred = [row for row in rows if row["deferred_until"]]
    assert len(deferred) == 3
    assert all(row["last_run"] is None for row in deferred)
    assert all("start budget" in (row["error"] or "") for row in deferred)


def test_vendor_409_and_429_on_start_defer_without_failing(tmp_path: Path) -> None:
    domains = [f"q{i}.example.com" for i in range(3)]
    with simulator(one_active_job=True) as sim:
        with VendorClient(build_http_client(timeout=10), base_url=sim.url, key=sim.key) as client:
            orphan = client.start_export("q0.example.com")  # someone else's job: 409 for q0
        sim.set_run_seconds(orphan.job_id, 3600)  # active until the daemon has met it
        sim.faults.retry_after = "1"
        sim.faults.rate_limit_next = 2  # the next two requests (starts) answer 429
        config = daemon_config(
            tmp_path / "c.toml",
            base_url=sim.url,
            store=tmp_path / "store",
            domains=domains,
            daemon={"concurrency": 3},
        )
        with daemon_process(config, sim.key, tmp_path, "--busy-defer", "0.3") as daemon:
            daemon.wait_ready()
            wait_for(lambda: busy_deferrals(daemon), 120, "a start deferred by the vendor's 409")
            sim.set_run_seconds(orphan.job_id, 0)
            wait_for(lambda: stored_domains(config) == set(domains), 120, "all domains stored")
            text = httpx.get(f"{daemon.metrics_url()}/metrics").text
            assert daemon.stop() == 0
        assert sim.stats.starts["q0.example.com"][0] == orphan.job_id
        assert len(sim.stats.starts["q0.example.com"]) == 2
        assert all(len(sim.stats.starts[d]) == 1 for d in domains[1:])
    deferred = sum(
        metric(text, "mirror_runs_total", domain=d, outcome="deferred") or 0 for d in domains
    )
    assert deferred >= 2
    assert all(
        metric(text, "mirror_runs_total", domain=d, outcome="failed") == 0.0 for d in domains
    )
    with index(config) as app, app.db.session() as session:
        states = session.scalars(select(ExportRun.state)).all()
    assert sorted(states) == ["stored"] * 3
    assert any("429" in r.get("reason", "") for r in deferrals(daemon)), deferrals(daemon)


def deferrals(daemon: DaemonProcess) -> list[dict[str, Any]]:
    return [r for r in daemon.records() if r.get("message") == "run deferred"]


def busy_deferrals(daemon: DaemonProcess) -> list[dict[str, Any]]:
    """Deferrals because the vendor answered 409: another export of the domain is running."""
    return [
        r
        for r in deferrals(daemon)
        if any(word in r.get("reason", "").lower() for word in ("409", "busy", "already"))
    ]


def test_sigterm_during_download_exits_0_and_resumes_from_the_offset(tmp_path: Path) -> None:
    size = 40 * 1024 * 1024
    with simulator(one_active_job=False, bundle_size=size) as sim:
        proxy = ThrottledProxy(sim.url, rate=12 * 1024 * 1024)
        try:
            config = daemon_config(
                tmp_path / "c.toml",
                base_url=proxy.url,
                store=tmp_path / "store",
                domains=["big.example.com"],
            )

            def downloading() -> int:
                with index(config) as app, app.db.session() as session:
                    run = session.scalars(select(ExportRun)).first()
                return run.bytes_done if run and run.state == RunState.DOWNLOADING else 0

            with daemon_process(config, sim.key, tmp_path) as first:
                first.wait_ready()
                wait_for(lambda: downloading() >= 8 * 1024 * 1024, 120, "8 MiB downloaded")
                started = time.monotonic()
                assert first.stop(STOP_WITHIN) == 0
                stop_seconds = time.monotonic() - started
            assert stop_seconds < STOP_WITHIN, first.log()
            with index(config) as app, app.db.session() as session:
                run = session.scalars(select(ExportRun)).one()
                assert run.active and run.state == RunState.DOWNLOADING
                offset = run.bytes_done
                partial = app.store.temp_path(run.partial_name or "")
            assert 0 < offset < size
            assert partial.stat().st_size == offset
            assert "interrupted" in first.log()

            with daemon_process(config, sim.key, tmp_path, "--exit-when-idle") as second:
                assert second.proc.wait(120) == 0, second.log()
        finally:
            proxy.close()
        job_id = sim.stats.starts["big.example.com"]
        assert len(job_id) == 1
        downloads = [d for d in sim.stats.downloads if d["job_id"] == job_id[0]]
        ranges = [d["range"] for d in downloads]
        assert f"bytes={offset}-" in ranges, ranges
        assert sim.stats.bytes_served[job_id[0]] < 2 * size
    assert stored_domains(config) == {"big.example.com"}
    assert not list((tmp_path / "store" / "tmp").iterdir())


def test_two_daemons_on_one_index_never_run_a_domain_twice(tmp_path: Path) -> None:
    """Two processes sharing the store and index (as replicas share PostgreSQL): the active-run
    unique index and the lease keep every domain to one run and one vendor job."""
    domains = [f"r{i}.example.com" for i in range(6)]
    with simulator(one_active_job=False, run_seconds=0.5) as sim:
        config = daemon_config(
            tmp_path / "c.toml",
            base_url=sim.url,
            store=tmp_path / "store",
            domains=domains,
            daemon={"concurrency": 6},
        )
        with (
            daemon_process(
                config, sim.key, tmp_path, "--exit-when-idle", "--max-sleep", "0.5"
            ) as first,
            daemon_process(
                config, sim.key, tmp_path, "--exit-when-idle", "--max-sleep", "0.5"
            ) as second,
        ):
            assert first.proc.wait(180) == 0, first.log()
            assert second.proc.wait(180) == 0, second.log()
        assert all(len(sim.stats.starts.get(d, [])) == 1 for d in domains), sim.stats.starts
    with index(config) as app, app.db.session() as session:
        runs = session.scalars(select(ExportRun)).all()
    assert sorted(run.domain for run in runs) == sorted(domains)
    assert all(run.state == RunState.STORED for run in runs)


def test_unfinished_runs_resume_before_new_work_in_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Daemon class in this process (metrics off): recovery sweeps a stale temp file,
    resumes the unfinished run on its own row and job before any new domain starts, and
    only then says READY=1."""
    from mirror.config import settings_from_dict
    from mirror.export.daemon import Daemon, DaemonOptions
    from mirror.export.notify import Notifier

    with simulator(one_active_job=False) as sim:
        with VendorClient(build_http_client(timeout=10), base_url=sim.url, key=sim.key) as client:
            job = client.start_export("old.example.com")
        store = tmp_path / "store"
        settings = settings_from_dict(
            {
                "api": {"base_url": sim.url, "poll_interval": "0.1s", "max_poll_interval": "0.2s"},
                "store": {"path": str(store)},
                "daemon": {"listen": "", "concurrency": 1},
                "exports": [
                    {"domain": "new.example.com", "every": "1h"},
                    {"domain": "old.example.com", "every": "1h"},
                ],
            }
        )
        app = App(settings)
        try:
            with app.db.session() as session:
                run = ExportRun(
                    domain="old.example.com",
                    state=RunState.STARTED,
                    vendor_job_id=job.job_id,
                    vendor_started_at=job_started(),
                    partial_name="run-1.part",
                )
                session.add(run)
            (app.store.tmp_dir / "run-99.part").write_bytes(b"left by a crash")
        finally:
            app.close()

        name = f"mirror-test-{uuid.uuid4().hex}"
        receiver = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        receiver.bind("\0" + name)
        receiver.setblocking(False)
        monkeypatch.setenv("MIRROR_API_KEY", sim.key)
        try:
            daemon = Daemon(
                settings,
                options=DaemonOptions(exit_when_idle=True),
                notifier=Notifier({"NOTIFY_SOCKET": "@" + name}),
            )
            assert daemon.run() == 0
            messages = []
            with contextlib.suppress(BlockingIOError):
                while True:
                    messages.append(receiver.recv(65536).decode())
        finally:
            receiver.close()
        assert daemon.metrics_server is None
        assert sim.stats.starts == {
            "old.example.com": [job.job_id],
            "new.example.com": sim.stats.starts["new.example.com"],
        }
    assert any(m.startswith("READY=1") for m in messages)
    with open_app(settings) as app, app.db.session() as session:
        runs = {r.domain: r for r in session.scalars(select(ExportRun))}
        old, new = runs["old.example.com"], runs["new.example.com"]
        assert old.id < new.id and old.vendor_job_id == job.job_id
        assert old.state == new.state == RunState.STORED
        assert old.finished_at is not None and new.created_at >= old.finished_at
        assert not (store / "tmp" / "run-99.part").exists()
    assert daemon.metrics.runs.labels(domain="old.example.com", outcome="stored")._value.get() == 1


def job_started() -> datetime:
    return datetime.now(UTC)


def test_sighup_reloads_domains_and_keeps_the_old_config_when_invalid(tmp_path: Path) -> None:
    with simulator(one_active_job=False) as sim:
        path = tmp_path / "c.toml"
        store = tmp_path / "store"
        daemon_config(path, base_url=sim.url, store=store, domains=["one.example.com"])
        with daemon_process(path, sim.key, tmp_path) as daemon:
            daemon.wait_ready()
            wait_for(lambda: stored_domains(path) == {"one.example.com"}, 120, "first domain")
            good = path.read_text()
            path.write_text(good + "\n[daemon]\nbogus = 1\n")
            daemon.signal(signal.SIGHUP)
            wait_for(
                lambda: any(
                    r.get("message", "").startswith("config reload failed")
                    for r in daemon.records()
                ),
                60,
                "the reload error",
            )
            assert daemon.proc.poll() is None
            daemon_config(
                path,
                base_url=sim.url,
                store=store,
                domains=["one.example.com", "two.example.com"],
            )
            daemon.signal(signal.SIGHUP)
            wait_for(
                lambda: stored_domains(path) == {"one.example.com", "two.example.com"},
                120,
                "the added domain",
            )
            reloaded = [r for r in daemon.records() if r.get("message") == "config reloaded"]
            assert reloaded and reloaded[-1]["added"] == ["two.example.com"]
            text = httpx.get(f"{daemon.metrics_url()}/metrics").text
            added = {"domain": "two.example.com"}
            assert metric(text, "mirror_runs_total", outcome="failed", **added) == 0.0  # seeded
            assert daemon.stop() == 0
        assert len(sim.stats.starts["one.example.com"]) == 1


def test_a_reloaded_config_the_daemon_could_not_use_is_refused_and_the_old_one_kept(
    tmp_path: Path,
) -> None:
    """A config that parses but serves no daemon (no [[exports]] left, as `config check --for
    daemon` says) is refused on SIGHUP like an invalid one: logged, the old config kept."""
    with simulator() as sim:
        path = tmp_path / "c.toml"
        store = tmp_path / "store"
        daemon_config(path, base_url=sim.url, store=store, domains=["one.example.com"])
        with daemon_process(path, sim.key, tmp_path) as daemon:
            daemon.wait_ready()
            daemon_config(path, base_url=sim.url, store=store, domains=[])
            checked = mirror_cli("--config", str(path), "config", "check", "--for", "daemon")
            assert checked.returncode == 2
            daemon.signal(signal.SIGHUP)
            refused = wait_for(
                lambda: next(
                    (
                        r
                        for r in daemon.records()
                        if r.get("message", "").startswith("config reload failed")
                    ),
                    None,
                ),
                10,
                "the reload refused",
            )
            assert refused["error"] in checked.stderr
            assert daemon.proc.poll() is None
            text = httpx.get(f"{daemon.metrics_url()}/metrics").text
            assert metric(text, "mirror_domains") == 1.0
            assert not any(r.get("message") == "config reloaded" for r in daemon.records())
            assert daemon.stop() == 0


def test_thousand_domains_ready_fast_idle_cheap_and_budget_kept(tmp_path: Path) -> None:
    domains = [f"site{i:04d}.example.com" for i in range(1000)]
    with simulator(one_active_job=False) as sim:
        config = daemon_config(
            tmp_path / "c.toml",
            base_url=sim.url,
            store=tmp_path / "store",
            domains=domains,
        )
        with daemon_process(config, sim.key, tmp_path) as daemon:
            ready_seconds = daemon.wait_ready(timeout=60)
            ready_cpu = cpu_seconds(daemon.pid)  # start-up's work, whatever else runs beside
            assert ready_cpu < 10, f"ready after {ready_cpu:.1f} CPU s ({ready_seconds:.1f} s)"
            wait_for(lambda: len(stored_domains(config)) == 10, 120, "the 10 budgeted runs")
            wait_for(lambda: idle_status(daemon), 60, "STATUS=0 running")
            time.sleep(1.0)
            before = cpu_seconds(daemon.pid)
            time.sleep(4.0)
            used = cpu_seconds(daemon.pid) - before
            assert used / 4.0 < 0.03, f"{100 * used / 4.0:.1f}% of a core while idle"
            assert daemon.stop() == 0
        assert sum(len(jobs) for jobs in sim.stats.starts.values()) == 10
    with index(config) as app, app.db.session() as session:
        deferred = session.scalar(
            select(func.count())
            .select_from(DomainSchedule)
            .where(DomainSchedule.not_before.is_not(None))
        )
    assert deferred == 990


def idle_status(daemon: DaemonProcess) -> bool:
    """The daemon's last STATUS= says no run is running (every run ended or deferred)."""
    lines = [
        line
        for message in daemon.notifications()
        for line in message.split("\n")
        if line.startswith("STATUS=")
    ]
    return bool(lines) and lines[-1].startswith("STATUS=0 running")


def test_store_gc_cli_dry_run_then_real(tmp_path: Path) -> None:
    """`store gc` through the real CLI: --dry-run changes nothing, then the real run frees."""
    with simulator(one_active_job=False, changes_per_export=2) as sim:
        config = daemon_config(
            tmp_path / "c.toml",
            base_url=sim.url,
            store=tmp_path / "store",
            domains=["g.example.com"],
        )
        for _ in range(3):
            result = mirror_cli(
                "--config",
                str(config),
                "export",
                "run",
                "g.example.com",
                env={"MIRROR_API_KEY": sim.key},
            )
            assert result.returncode == 0, result.stderr
    with index(config) as app:
        with app.db.session() as session:
            ids = list(session.scalars(select(Version.id)))
        deliver(app, *ids)
    args = ["--config", str(config), "--json", "store", "gc", "--keep", "1"]
    for dry_run, left_after in ((True, 3), (False, 1)):
        result = mirror_cli(*args, *(["--dry-run"] if dry_run else []))
        assert result.returncode == 0, result.stderr
        report = json.loads(result.stdout)
        assert report["dry_run"] is dry_run
        assert len(report["versions_removed"]) == 2
        assert report["bytes_freed"] > 0
        with index(config) as app, app.db.session() as session:
            assert session.scalar(select(func.count()).select_from(Version)) == left_after
    human = mirror_cli("--config", str(config), "store", "gc", "--keep", "1", "--dry-run")
    assert human.returncode == 0
    assert "would free 0 B" in human.stdout


def test_metrics_after_a_restart_are_seeded_from_the_index(tmp_path: Path) -> None:
    """A restarted daemon shows each domain's last success at once (from the index), every
    counter at 0 for each configured domain and outcome, and what it is (build info); its
    start-up says nothing about the schema unless the schema changed."""
    stored, fresh = ["s0.example.com", "s1.example.com"], "new.example.com"
    with simulator(one_active_job=False) as sim:
        config = daemon_config(
            tmp_path / "c.toml", base_url=sim.url, store=tmp_path / "store", domains=stored
        )
        with daemon_process(config, sim.key, tmp_path, "--exit-when-idle") as first:
            assert first.proc.wait(120) == 0, first.log()
            first_records = first.records()
    with index(config) as app, app.db.session() as session:
        finished = {
            run.domain: run.finished_at
            for run in session.scalars(select(ExportRun).where(ExportRun.state == "stored"))
        }
    assert set(finished) == set(stored)
    upgraded = [r for r in first_records if r["message"] == "index schema upgraded"]
    assert len(upgraded) == 1 and upgraded[0]["from"] == "empty"
    assert not [r for r in first_records if r["logger"].startswith("alembic")]

    # The new domain's export is held running, so nothing but the seeding sets its series.
    with simulator(one_active_job=False) as slow:
        slow.set_faults(hold_jobs=True)
        config = daemon_config(
            tmp_path / "c2.toml",
            base_url=slow.url,
            store=tmp_path / "store",
            domains=[*stored, fresh],
        )
        with daemon_process(config, slow.key, tmp_path) as second:
            second.wait_ready()
            text = httpx.get(f"{second.metrics_url()}/metrics").text
            assert second.stop() == 0
            second_records = second.records()
    for domain in stored:
        seeded = metric(text, "mirror_last_success_timestamp_seconds", domain=domain)
        when = finished[domain]
        assert when is not None and seeded == pytest.approx(when.timestamp(), abs=0.001)
    assert metric(text, "mirror_last_success_timestamp_seconds", domain=fresh) is None
    for domain in [*stored, fresh]:
        for outcome in ("stored", "unchanged", "failed", "deferred", "interrupted"):
            assert metric(text, "mirror_runs_total", domain=domain, outcome=outcome) == 0.0
        assert metric(text, "mirror_download_bytes_total", domain=domain) == 0.0
    for state in ("pending", "started", "completed", "downloading", "downloaded"):
        assert metric(text, "mirror_runs_in_state", state=state) is not None
    python = ".".join(str(part) for part in sys.version_info[:3])
    assert metric(text, "mirror_build_info", version=__version__, python=python) == 1.0
    assert not [r for r in second_records if r["message"] == "index schema upgraded"]
    assert not [r for r in second_records if r["logger"].startswith("alembic")]
