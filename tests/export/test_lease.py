"""Leases between replicas: identity, the heartbeat, and what a second claimer is told."""

from __future__ import annotations

import logging
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import update

from mirror.config import settings_from_dict
from mirror.export.lease import Heartbeat, HeldByOther, ReplicaLogFilter, replica_identity
from mirror.export.runner import run_export
from mirror.sim import Simulator
from mirror.store.app import App
from mirror.store.models import ExportRun
from mirror.vendorapi.client import VendorClient


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
        beat = Heartbeat(app.db, run_id, "me:1:aaaa", 0.3).start()
        time.sleep(1.0)  # three times the lease: only the heartbeat keeps it alive
        with app.db.session() as session:
            current = session.get(ExportRun, run_id)
            assert current is not None and current.heartbeat_at is not None
            assert current.lease_expires_at is not None
            assert current.lease_expires_at > datetime.now(UTC)
            session.execute(
                update(ExportRun).where(ExportRun.id == run_id).values(lease_owner="other:2:bbbb")
            )
        assert beat.lost.wait(2.0)
        beat.stop()
    finally:
        app.close()


def test_a_long_poll_keeps_its_short_lease_and_a_second_claimer_is_refused(
    sim_factory: Any, store_dir: Path
) -> None:
    """The job runs 3 s and the poll sleeps 2.5 s, the lease is 1 s: only the heartbeat keeps
    the run from being taken over. The second claimer gets HeldByOther, bounded by the lease."""
    sim: Simulator = sim_factory(run_seconds=3.0)
    app = make_app(store_dir, poll="2.5s", lease="1s")
    other = make_app(store_dir, lease="1s")
    errors: list[BaseException] = []

    def first() -> None:
        with httpx.Client(timeout=30) as http:
            try:
                run_export(app, VendorClient(http, base_url=sim.url, key=sim.key), "docs.l.test")
            except BaseException as exc:  # asserted below
                errors.append(exc)

    thread = threading.Thread(target=first)
    thread.start()
    time.sleep(2.0)
    try:
        with httpx.Client(timeout=30) as http, pytest.raises(HeldByOther) as caught:
            run_export(other, VendorClient(http, base_url=sim.url, key=sim.key), "docs.l.test")
        assert caught.value.retry_after is not None and caught.value.retry_after <= 1.5
        assert caught.value.until <= datetime.now(UTC) + timedelta(seconds=1.5)
        thread.join(30)
        assert errors == []
        assert len(sim.stats.snapshot()["starts"]["docs.l.test"]) == 1
    finally:
        thread.join(30)
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
