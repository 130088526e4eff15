"""`mirror status` data, read from the index without a daemon."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from mirror.config import settings_from_dict
from mirror.export.status import domain_status, load_states
from mirror.store.app import App
from mirror.store.models import Bundle, DomainSchedule, ExportRun, RunState, Version

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def make_app(store_dir: Path) -> App:
    return App(
        settings_from_dict(
            {
                "store": {"path": str(store_dir)},
                "daemon": {"jitter": 0.0},
                "exports": [
                    {"domain": "fresh.example.com", "every": "1h"},
                    {"domain": "done.example.com", "every": "6h"},
                    {"domain": "failing.example.com", "every": "6h"},
                    {"domain": "busy.example.com", "every": "6h"},
                    {"domain": "deferred.example.com", "every": "6h"},
                ],
            }
        )
    )


def seed(app: App) -> None:
    with app.db.session() as session:
        session.add(
            Bundle(sha256="a" * 64, size=10, format="tar.gz", tree_sha256="b" * 64, file_count=1)
        )
        done = ExportRun(
            domain="done.example.com",
            active=False,
            state=RunState.STORED,
            vendor_job_id="job-1",
            vendor_started_at=NOW - timedelta(hours=2),
            created_at=NOW - timedelta(hours=2),
            finished_at=NOW - timedelta(hours=1, minutes=50),
            version_label="2026-03-01",
        )
        session.add(done)
        session.flush()
        session.add(
            Version(
                domain="done.example.com",
                label="2026-03-01",
                bundle_sha256="a" * 64,
                tree_sha256="b" * 64,
                run_id=done.id,
            )
        )
        for minutes in (50, 5):
            session.add(
                ExportRun(
                    domain="failing.example.com",
                    active=False,
                    state=RunState.FAILED,
                    vendor_job_id=f"job-f{minutes}",
                    created_at=NOW - timedelta(minutes=minutes),
                    finished_at=NOW - timedelta(minutes=minutes - 1),
                    error="the vendor's export job failed: render error",
                )
            )
        session.add(
            ExportRun(
                domain="busy.example.com",
                state=RunState.DOWNLOADING,
                vendor_job_id="job-b",
                created_at=NOW - timedelta(minutes=5),
                bytes_done=1024,
            )
        )
        session.add(
            DomainSchedule(
                domain="deferred.example.com",
                not_before=NOW + timedelta(minutes=20),
                last_error="start budget spent",
            )
        )


def test_status_of_every_configured_domain(store_dir: Path) -> None:
    app = make_app(store_dir)
    try:
        seed(app)
        rows = {row.domain: row for row in domain_status(app, now=NOW)}
    finally:
        app.close()
    assert list(rows) == [
        "fresh.example.com",
        "done.example.com",
        "failing.example.com",
        "busy.example.com",
        "deferred.example.com",
    ]
    fresh = rows["fresh.example.com"]
    assert fresh.last_run is None and fresh.latest_version is None
    assert fresh.next_due == NOW

    done = rows["done.example.com"]
    assert done.last_run is not None and done.last_run["state"] == "stored"
    assert done.last_run["job_id"] == "job-1"
    assert done.latest_version is not None and done.latest_version["version"] == "2026-03-01"
    assert done.next_due == NOW + timedelta(hours=4)
    assert done.error is None

    failing = rows["failing.example.com"]
    assert failing.error == "the vendor's export job failed: render error"
    assert failing.next_due == NOW - timedelta(minutes=5) + timedelta(seconds=600)

    busy = rows["busy.example.com"]
    assert busy.running and busy.next_due is None
    assert busy.last_run is not None and busy.last_run["state"] == "downloading"

    deferred = rows["deferred.example.com"].as_dict()
    assert deferred["deferred_until"] == "2026-03-01T12:20:00Z"
    assert deferred["next_due_at"] == "2026-03-01T12:20:00Z"
    assert deferred["error"] == "start budget spent"


def test_load_states_feeds_the_scheduler(store_dir: Path) -> None:
    app = make_app(store_dir)
    try:
        seed(app)
        with app.db.session() as session:
            states = load_states(session, app.settings.exports, {})
    finally:
        app.close()
    assert states["failing.example.com"].consecutive_failures == 2
    assert states["failing.example.com"].last_run_state == "failed"
    assert states["done.example.com"].latest_version_at is not None
    busy = states["busy.example.com"].active
    assert busy is not None and busy.has_vendor_job and busy.state == "downloading"
    assert states["busy.example.com"].needs_start is False
    assert states["fresh.example.com"].needs_start is True


def test_human_status_lines(store_dir: Path) -> None:
    from mirror.cli.status import status_lines

    app = make_app(store_dir)
    try:
        seed(app)
        lines = status_lines(domain_status(app, now=NOW), NOW)
    finally:
        app.close()
    assert lines[0].split() == ["DOMAIN", "LAST", "RUN", "STATE", "VERSION", "NEXT", "DUE", "ERROR"]
    by_domain = {line.split()[0]: line for line in lines[1:]}
    assert "now" in by_domain["fresh.example.com"]
    assert (
        "in 4h" in by_domain["done.example.com"] and "2026-03-01" in by_domain["done.example.com"]
    )
    assert "running" in by_domain["busy.example.com"]
    assert "(deferred)" in by_domain["deferred.example.com"]
    assert "render error" in by_domain["failing.example.com"]
    assert status_lines([], NOW) == ["no domains configured ([[exports]] in the config file)"]


def test_status_shows_who_holds_each_run_and_a_live_one_is_no_error(store_dir: Path) -> None:
    """Issue 9: a run a live replica holds is 'running' with its owner, lease and heartbeat,
    even when another replica once wrote 'is being exported by ...' into the schedule; an
    expired lease is shown as stalled."""
    from mirror.cli.status import status_lines

    app = make_app(store_dir)
    try:
        seed(app)
        with app.db.session() as session:
            busy = session.query(ExportRun).filter_by(domain="busy.example.com").one()
            busy.lease_owner = "node-b:4242:0a1b2c3d"
            busy.lease_expires_at = NOW + timedelta(seconds=25)
            busy.heartbeat_at = NOW - timedelta(seconds=5)
            session.add(
                DomainSchedule(
                    domain="busy.example.com",
                    last_error="domain busy.example.com is being exported by node-b:4242:0a1b2c3d",
                )
            )
            session.add(
                ExportRun(
                    domain="fresh.example.com",
                    state=RunState.STARTED,
                    vendor_job_id="job-s",
                    created_at=NOW - timedelta(minutes=3),
                    lease_owner="node-c:7:ffffffff",
                    lease_expires_at=NOW - timedelta(seconds=40),
                    heartbeat_at=NOW - timedelta(seconds=70),
                )
            )
        rows = {row.domain: row for row in domain_status(app, now=NOW)}
        lines = status_lines(list(rows.values()), NOW)
    finally:
        app.close()
    held = rows["busy.example.com"].as_dict()
    assert held["running"] and held["error"] is None
    assert held["owner"] == "node-b:4242:0a1b2c3d" and held["lease_live"] is True
    assert held["lease_expires_at"] == "2026-03-01T12:00:25Z"
    assert held["heartbeat_age_seconds"] == 5.0
    stalled = rows["fresh.example.com"].as_dict()
    assert stalled["running"] and stalled["lease_live"] is False
    assert stalled["heartbeat_age_seconds"] == 70.0
    done = rows["done.example.com"].as_dict()
    assert done["owner"] is None and done["heartbeat_age_seconds"] is None
    by_domain = {line.split()[0]: line for line in lines[1:]}
    assert (
        "running (node-b:4242:0a1b2c3d, lease 25s left, heartbeat 5s ago)"
        in (by_domain["busy.example.com"])
    )
    assert "being exported" not in by_domain["busy.example.com"]
    assert "stalled (node-c:7:ffffffff, lease expired 40s ago" in by_domain["fresh.example.com"]
