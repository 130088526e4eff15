"""Leases between replicas: identity, the heartbeat, and what a second claimer is told."""

from __future__ import annotations

import logging
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import select, update

from mirror.config import settings_from_dict
from mirror.export.lease import Heartbeat, HeldByOther, ReplicaLogFilter, replica_identity
from mirror.export.runner import run_export
from mirror.sim import Simulator
from mirror.store.app import App
from mirror.store.models import ExportRun
from mirror.vendorapi.client import VendorClient
from tests.fixtures.daemon import wait_for


def make_app(store: Path, poll: str = "0.05s", **daemon: Any) -> App:
    return App(
        settings_from_dict(
            {
                "store": {"path": str(store)},
                "api": {"poll_interval": poll, "max_poll_interval": poll},
                "daemon": daemon,
            }
        )
    )


def test_identity_is_host_pid_nonce_and_the_host_can_be_set() -> None:
    host, pid, nonce = replica_identity("node-a").split(":")
    assert host == "node-a" and pid.isdigit() and len(nonce) == 8
    assert replica_identity("node-a") != replica_identity("node-a")
    assert replica_identity().split(":")[0] != ""


def test_heartbeat_renews_the_lease_and_notices_a_takeover(store_dir: Path) -> None:
    app = make_app(store_dir)
    try:
        with app.db.session() as session:
            row = ExportRun(
                domain="docs.hb.test",
                lease_owner="me:1:aaaa",
                lease_expires_at=datetime.now(UTC) + timedelta(seconds=0.3),
            )
            session.add(row)
            session.flush()
            run_id = row.id
        started = datetime.now(UTC)
        beat = Heartbeat(app.db, run_id, "me:1:aaaa", 0.3).start()

        def beaten_late() -> ExportRun | None:
            with app.db.session() as session:
                row = session.get(ExportRun, run_id)
                assert row is not None
                beaten = row.heartbeat_at
                return row if beaten and beaten >= started + timedelta(seconds=1) else None

        # a beat three leases after the start: only the heartbeat kept the lease alive so long
        current = wait_for(beaten_late, 60, "a beat a second after the start")
        assert current.heartbeat_at is not None and current.lease_expires_at is not None
        assert current.lease_expires_at == current.heartbeat_at + timedelta(seconds=0.3)
        with app.db.session() as session:
            session.execute(
                update(ExportRun).where(ExportRun.id == run_id).values(lease_owner="other:2:bbbb")
            )
        assert beat.lost.wait(60)
        beat.stop()
    finally:
        app.close()


def test_a_long_poll_keeps_its_short_lease_and_a_second_claimer_is_refused(
    sim_factory: Any, store_dir: Path
) -> None:
    """The job is held running and the poll sleeps 2.5 s, the lease is 1 s: only the heartbeat
    keeps the run from being taken over. The second claimer comes once the run has been beaten
    for longer than a lease, and gets HeldByOther, bounded by the lease."""
    sim: Simulator = sim_factory()
    sim.set_faults(hold_jobs=True)
    app = make_app(store_dir, poll="2.5s", lease="1s")
    other = make_app(store_dir, lease="1s")
    errors: list[BaseException] = []

    def first() -> None:
        with httpx.Client(timeout=30) as http:
            try:
                run_export(app, VendorClient(http, base_url=sim.url, key=sim.key), "docs.l.test")
            except BaseException as exc:  # asserted below
                errors.append(exc)

    def beaten_past_a_lease() -> bool:
        with app.db.session() as session:
            run = session.scalars(select(ExportRun)).first()
        return bool(
            run is not None
            and run.vendor_started_at is not None
            and run.heartbeat_at is not None
            and run.heartbeat_at >= run.vendor_started_at + timedelta(seconds=1.5)
        )

    thread = threading.Thread(target=first)
    thread.start()
    try:
        wait_for(beaten_past_a_lease, 60, "heartbeats past the first lease")
        with httpx.Client(timeout=30) as http, pytest.raises(HeldByOther) as caught:
            run_export(other, VendorClient(http, base_url=sim.url, key=sim.key), "docs.l.test")
        assert caught.value.retry_after is not None and caught.value.retry_after <= 1.5
        assert caught.value.until <= datetime.now(UTC) + timedelta(seconds=1.5)
        sim.set_faults(hold_jobs=False)
        thread.join(60)
        assert errors == []
        assert len(sim.stats.snapshot()["starts"]["docs.l.test"]) == 1
    finally:
        sim.set_faults(hold_jobs=False)
        thread.join(60)
        app.close()
        other.close()


def test_log_filter_names_the_replica_in_every_line(caplog: pytest.LogCaptureFixture) -> None:
    logger = logging.getLogger("mirror.test")
    handler = logging.Handler()
    records: list[logging.LogRecord] = []
    handler.emit = records.append  # type: ignore[method-assign]
    root = logging.getLogger()
    root.addHandler(handler)
    log_filter = ReplicaLogFilter("node-a:1:abcd")
    try:
        log_filter.install()
        logger.warning("about a run", extra={"run_id": 3})
        logger.warning("carries its own", extra={"replica": "node-b:2:ffff"})
        log_filter.remove()
        logger.warning("after")
    finally:
        root.removeHandler(handler)
    assert [getattr(r, "replica", None) for r in records] == [
        "node-a:1:abcd",
        "node-b:2:ffff",
        None,
    ]
