"""The claim on a domain's run (mirror.export.claim): who wins, who is refused, who stops."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import select

from mirror.export.claim import LostLease, RunClaim
from mirror.export.lease import HeldByOther, NotDue
from mirror.store.models import ExportRun, RunState
from tests.export.test_lease import make_app

DOMAIN = "docs.claim.test"


class Clock:
    def __init__(self) -> None:
        self.moment = datetime(2026, 11, 20, 8, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.moment


def test_a_new_run_is_created_under_the_lease_and_a_second_claimer_is_refused(
    store_dir: Path,
) -> None:
    app = make_app(store_dir, lease="30s")
    clock = Clock()
    first = RunClaim(app, DOMAIN, owner="node-a:1:aaaa", now=clock)
    second = RunClaim(app, DOMAIN, owner="node-b:2:bbbb", now=clock)
    try:
        first.claim()
        assert first.current.state == RunState.PENDING and first.reserved_at_claim
        assert not first.resumed
        with pytest.raises(HeldByOther) as refused:
            second.claim()
        assert refused.value.owner == "node-a:1:aaaa"
        assert refused.value.until == clock.moment + timedelta(seconds=30)
    finally:
        first.release()
        app.close()


def test_an_expired_lease_is_taken_over_and_its_old_holder_stops(store_dir: Path) -> None:
    app = make_app(store_dir, lease="30s")
    clock = Clock()
    old = RunClaim(app, DOMAIN, owner="node-a:1:aaaa", now=clock)
    new = RunClaim(app, DOMAIN, owner="node-b:2:bbbb", now=clock)
    try:
        old.claim()
        assert old.heartbeat is not None
        old.heartbeat.stop()  # the holder hangs: nothing renews its lease any more
        clock.moment += timedelta(seconds=31)
        new.claim()
        assert new.resumed and new.current.id == old.current.id
        with pytest.raises(LostLease):
            old.save(state=RunState.STARTED)
        with app.db.session() as session:
            row = session.scalars(select(ExportRun)).one()
            assert (row.lease_owner, row.state) == ("node-b:2:bbbb", RunState.PENDING)
    finally:
        new.release()
        app.close()


def test_a_domain_no_longer_due_is_not_claimed(store_dir: Path) -> None:
    app = make_app(store_dir)
    clock = Clock()
    due = clock.moment + timedelta(hours=6)
    claim = RunClaim(app, DOMAIN, owner="node-a:1:aaaa", now=clock, due_check=lambda _s, _n: due)
    try:
        with pytest.raises(NotDue) as refused:
            claim.claim()
        assert refused.value.due == due
        with app.db.session() as session:
            assert session.scalars(select(ExportRun)).first() is None
    finally:
        app.close()


def test_release_gives_the_lease_up_and_the_run_stays_resumable(store_dir: Path) -> None:
    app = make_app(store_dir)
    claim = RunClaim(app, DOMAIN, owner="node-a:1:aaaa", now=Clock())
    try:
        claim.claim()
        claim.release()
        with app.db.session() as session:
            row = session.scalars(select(ExportRun)).one()
            assert row.active and row.lease_owner is None and row.lease_expires_at is None
    finally:
        app.close()
