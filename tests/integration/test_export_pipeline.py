"""`mirror export ...` and `mirror store ...` as operators run them: a subprocess, a config
file, the simulator on loopback, a real store. Also the exporter once on PostgreSQL."""

from __future__ import annotations

import json
import os
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy

from mirror.config import settings_from_dict
from mirror.errors import TemporaryFailure
from mirror.export.runner import run_export
from mirror.sim import Simulator
from mirror.store.app import App
from mirror.store.models import Bundle, ExportRun, RunState, Version
from mirror.vendorapi.client import VendorClient
from tests.fixtures.cli import on_a_terminal
from tests.fixtures.daemon import wait_for
from tests.fixtures.exporting import cli, config_for, index, table

MiB = 1024 * 1024


@pytest.fixture
def setup(sim: Simulator, tmp_path: Path) -> Iterator[tuple[Path, App]]:
    config = config_for(tmp_path, sim)
    app = index(config)
    yield config, app
    app.close()


def test_export_run_two_domains_json_and_store_commands(
    sim: Simulator, setup: tuple[Path, App]
) -> None:
    config, _ = setup
    outcomes = []
    for domain in ("docs.one.test", "docs.two.test"):
        result = cli(config, sim.key, "--json", "export", "run", "--adhoc", domain)
        assert result.returncode == 0, result.stderr
        outcome = json.loads(result.stdout)
        assert outcome["state"] == "stored" and outcome["domain"] == domain
        assert outcome["sha256"] == sim.bundle_sha256(outcome["job_id"])
        assert Path(outcome["path"]).stat().st_size == outcome["size"]
        assert {"version", "run_id", "format", "tree_sha256", "resumed"} <= outcome.keys()
        assert "━" not in result.stderr  # no progress display off a terminal
        outcomes.append(outcome)
    listed = cli(config, sim.key, "--json", "store", "list")
    assert listed.returncode == 0, listed.stderr
    rows = json.loads(listed.stdout)["versions"]
    assert [(r["domain"], r["version"], r["sha256"]) for r in rows] == [
        (o["domain"], o["version"], o["sha256"]) for o in outcomes
    ]
    only = json.loads(
        cli(config, sim.key, "--json", "store", "list", "--domain", "docs.two.test").stdout
    )
    assert [r["domain"] for r in only["versions"]] == ["docs.two.test"]
    human = cli(config, sim.key, "store", "list")
    assert "DOMAIN" in human.stdout and outcomes[0]["sha256"][:16] in human.stdout
    verified = cli(config, sim.key, "store", "verify")
    assert verified.returncode == 0 and "all 2 blob(s) match" in verified.stdout


def test_human_output_says_what_happened(sim_factory: Callable[..., Simulator], tmp_path: Path):
    sim = sim_factory(changes_per_export=0)
    config = config_for(tmp_path, sim)
    first = cli(config, sim.key, "export", "run", "--adhoc", "docs.human.test")
    assert first.returncode == 0, first.stderr
    lines = first.stdout.splitlines()
    assert lines[0].startswith("docs.human.test: stored new version ")
    assert any(line.strip().startswith("sha256") for line in lines)
    assert any(str(tmp_path / "store" / "blobs") in line for line in lines)
    again = cli(config, sim.key, "--json", "export", "run", "--adhoc", "docs.human.test")
    assert again.returncode == 0 and json.loads(again.stdout)["state"] == "unchanged"
    app = index(config)
    try:
        assert len(table(app, Version)) == 1
    finally:
        app.close()


def test_bad_key_exits_4_after_one_request_and_never_shows_the_key(
    sim: Simulator, setup: tuple[Path, App]
) -> None:
    config, _ = setup
    wrong = "mint_wrong_" + uuid.uuid4().hex
    before = sim.stats.snapshot()["requests"]
    result = cli(config, wrong, "export", "run", "--adhoc", "docs.key.test")
    assert result.returncode == 4, result.stderr
    assert sim.stats.snapshot()["requests"] - before == 1
    assert sim.stats.snapshot()["auth_failures"] == 1
    assert wrong not in result.stdout + result.stderr
    assert "check the admin API key" in result.stderr
    as_json = cli(config, wrong, "--json", "export", "run", "--adhoc", "docs.key.test")
    assert as_json.returncode == 4 and wrong not in as_json.stdout + as_json.stderr


def test_failed_job_exits_1_and_fails_the_run(sim: Simulator, setup: tuple[Path, App]) -> None:
    config, app = setup
    sim.set_faults(fail_domains=["docs.fail.test"])
    result = cli(config, sim.key, "export", "run", "--adhoc", "docs.fail.test")
    assert result.returncode == 1, result.stderr
    assert "failed at the vendor" in result.stderr
    (run,) = table(app, ExportRun)
    assert run.state == RunState.FAILED and not run.active


@pytest.mark.parametrize("kind", ["traversal", "bomb"])  # every kind: tests/export/test_runner.py
def test_unsafe_archive_exits_5_and_leaves_nothing(
    sim: Simulator, setup: tuple[Path, App], kind: str
) -> None:
    config, app = setup
    sim.set_faults(malicious_domains={"docs.evil.test": kind})
    result = cli(config, sim.key, "export", "run", "--adhoc", "docs.evil.test")
    assert result.returncode == 5, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1  # one line for the operator
    assert table(app, Bundle) == [] and table(app, Version) == []
    assert list(app.store.iter_blobs()) == [] and app.store.temp_files() == []
    (run,) = table(app, ExportRun)
    assert run.state == RunState.FAILED


def test_store_verify_exits_5_with_one_line_per_problem(
    sim: Simulator, setup: tuple[Path, App]
) -> None:
    config, app = setup
    for domain in ("docs.v1.test", "docs.v2.test"):
        assert cli(config, sim.key, "export", "run", "--adhoc", domain).returncode == 0
    first, second = table(app, Bundle)
    app.store.blob_path(first.sha256).unlink()
    path = app.store.blob_path(second.sha256)
    os.chmod(path, 0o644)
    path.write_bytes(b"rot")
    result = cli(config, sim.key, "store", "verify")
    assert result.returncode == 5
    problems = result.stdout.strip().splitlines()
    assert sorted(line.split()[0] for line in problems) == ["corrupt", "missing"]
    as_json = cli(config, sim.key, "--json", "store", "verify")
    assert as_json.returncode == 5 and len(json.loads(as_json.stdout)["problems"]) == 2


def test_raw_api_steps(sim: Simulator, setup: tuple[Path, App]) -> None:
    config, _ = setup
    started = cli(config, sim.key, "--json", "export", "start", "docs.raw.test")
    assert started.returncode == 0, started.stderr
    job_id = json.loads(started.stdout)["job_id"]
    sim.bundle_sha256(job_id)
    status: dict[str, Any] = {}
    for _ in range(100):
        status = json.loads(cli(config, sim.key, "--json", "export", "status", job_id).stdout)
        if status["status"] == "completed":
            break
    assert status["status"] == "completed" and status["page_count"]
    human = cli(config, sim.key, "export", "status", job_id)
    assert human.stdout.startswith(f"export job {job_id}: completed")
    bundle = cli(config, sim.key, "--json", "export", "bundle", job_id)
    assert bundle.returncode == 0, bundle.stderr
    link = json.loads(bundle.stdout)
    assert link["size_bytes"] == sim.bundle_info(job_id)["size"]
    assert httpx.head(link["bundle_url"]).status_code == 200
    missing = cli(config, sim.key, "export", "status", "se_nope")
    assert missing.returncode == 3


def test_status_link_means_no_bundle_call_via_the_cli(
    sim: Simulator, setup: tuple[Path, App]
) -> None:
    config, _ = setup
    sim.set_faults(global_flow_bundle_in_status=True)
    result = cli(config, sim.key, "--json", "export", "run", "--adhoc", "docs.inline.test")
    assert result.returncode == 0, result.stderr
    job_id = json.loads(result.stdout)["job_id"]
    assert job_id not in sim.stats.snapshot()["bundle_calls"]


def polls(sim: Simulator, domain: str) -> int:
    """Status reads of the domain's first vendor job so far."""
    started = sim.stats.snapshot()["starts"].get(domain, [])
    return int(sim.stats.snapshot()["status_calls"].get(started[0], 0)) if started else 0


def test_a_terminal_gets_a_progress_display(
    sim_factory: Callable[..., Simulator], tmp_path: Path
) -> None:
    sim = sim_factory(bundle_size=48 * MiB, queue_seconds=0)
    sim.set_faults(cut_after_bytes=12 * MiB, cuts_remaining=3)  # a download that lasts a while
    sim.set_faults(hold_jobs=True)  # running until the command has drawn it twice
    config = config_for(tmp_path, sim)
    args = ["--config", str(config), "export", "run", "--adhoc", "docs.tty.test"]
    ran: list[tuple[int, str, str]] = []
    command = threading.Thread(
        target=lambda: ran.append(on_a_terminal(*args, env={"MIRROR_API_KEY": sim.key}))
    )
    command.start()
    try:
        wait_for(lambda: polls(sim, "docs.tty.test") >= 2, 120, "two polls of the running job")
    finally:
        sim.set_faults(hold_jobs=False)
        command.join(180)
    ((code, stdout, text),) = ran
    assert code == 0
    assert "vendor export running" in text and "pages" in text
    assert "MiB" in text and "/s" in text  # bytes and speed of the download
    assert "stored new version" in stdout


def test_exporter_on_postgresql(postgres_url: str, sim: Simulator, tmp_path: Path) -> None:
    """The same run_export on PostgreSQL, in a database of its own."""
    name = f"mirror_exporter_{uuid.uuid4().hex[:12]}"
    admin = sqlalchemy.create_engine(postgres_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(sqlalchemy.text(f'CREATE DATABASE "{name}"'))
    url = postgres_url.rsplit("/", 1)[0] + f"/{name}"
    settings = settings_from_dict(
        {
            "store": {"path": str(tmp_path / "store"), "database": url},
            "api": {"poll_interval": "0.05s", "max_starts_per_hour": 3},
        }
    )
    app = App(settings)
    try:
        with httpx.Client(timeout=30) as http:
            client = VendorClient(http, base_url=sim.url, key=sim.key)
            first = run_export(app, client, "docs.pg.test")
            second = run_export(app, client, "docs.pg.test")
            assert (first.state, second.state) == ("stored", "stored")
            assert second.ref.label == f"{first.ref.label}.2"
            assert first.ref.sha256 == sim.bundle_sha256(first.job_id)
            run_export(app, client, "docs.pg2.test")
            with pytest.raises(TemporaryFailure, match="start budget"):
                run_export(app, client, "docs.pg3.test")
        assert [r.state for r in table(app, ExportRun)].count(RunState.STORED) == 3
    finally:
        app.close()
        with admin.connect() as connection:
            connection.execute(sqlalchemy.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()
