"""`mirror daemon` as one of several replicas: errors it must survive, and what it logs.

The kill-and-takeover cases with three replicas on PostgreSQL are in
tests/faults/test_replicas.py; here a single real daemon meets a database that refuses
every write about one domain (a trigger), as a replica meets a race or a lost connection.
"""

from __future__ import annotations

import signal
from pathlib import Path

import httpx
from sqlalchemy import text

from tests.fixtures.daemon import (
    daemon_config,
    daemon_process,
    index,
    metric,
    simulator,
    stored_domains,
    wait_for,
)

BAD = "bad.example.com"
GOOD = [f"g{i}.example.com" for i in range(3)]


def test_database_errors_of_one_domain_never_end_the_loop(tmp_path: Path) -> None:
    with simulator(one_active_job=False) as sim:
        config = daemon_config(
            tmp_path / "c.toml",
            base_url=sim.url,
            store=tmp_path / "store",
            domains=[BAD, *GOOD],
            daemon={"lease": "3s", "replica_host": "node-t"},
        )
        with index(config) as app, app.db.engine.begin() as connection:
            connection.execute(
                text(
                    "CREATE TRIGGER refuse_bad BEFORE INSERT ON domain_schedule "
                    f"WHEN NEW.domain = '{BAD}' BEGIN SELECT RAISE(ABORT, 'refused by test'); END"
                )
            )
        with daemon_process(config, sim.key, tmp_path, "--max-sleep", "0.5") as daemon:
            daemon.wait_ready()
            url = daemon.metrics_url()
            wait_for(lambda: stored_domains(config) == set(GOOD), 120, "the good domains")

            def loop_errors() -> float:
                assert daemon.proc.poll() is None, daemon.log()[-5000:]
                scraped = httpx.get(f"{url}/metrics", timeout=30).text
                return sum(
                    value
                    for kind in ("IntegrityError", "OperationalError")
                    if (value := metric(scraped, "mirror_daemon_loop_errors_total", kind=kind))
                )

            # the bad domain is retried (DB_RETRY_SECONDS) and fails again, the loop goes on
            wait_for(lambda: loop_errors() >= 2, 120, "a second loop error", interval=0.5)
            assert daemon.proc.poll() is None, daemon.log()[-5000:]
            daemon.signal(signal.SIGTERM)
            assert daemon.proc.wait(60) == 0
            records = daemon.records()
    assert "Traceback" not in "".join(str(r) for r in records)
    about_runs = [r for r in records if "run_id" in r or "domain" in r]
    assert about_runs and all(str(r.get("replica", "")).startswith("node-t:") for r in about_runs)
    assert any("refused by test" in str(r.get("message", "")) for r in records)
