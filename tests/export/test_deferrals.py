"""Deferral upserts: replicas deferring one domain at the same moment never collide."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import select

from mirror.export.deferrals import clear, defer, lock_domain
from mirror.store.db import Database
from mirror.store.models import DomainSchedule

T0 = datetime(2026, 11, 23, 3, 0, tzinfo=UTC)


def schedule(db: Database, domain: str) -> DomainSchedule | None:
    with db.session() as session:
        return session.get(DomainSchedule, domain)


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Database:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path}/index.db"
    else:
        url = request.getfixturevalue("postgres_database")
    database = Database(url)
    database.upgrade()
    request.addfinalizer(database.dispose)
    return database


def test_defer_inserts_then_only_moves_later(db: Database) -> None:
    defer(db, ["a.example.com"], T0, "first")
    defer(db, ["a.example.com"], T0 - timedelta(minutes=1), "earlier")
    row = schedule(db, "a.example.com")
    assert row is not None and row.not_before == T0 and row.last_error == "first"
    defer(db, ["a.example.com", "b.example.com"], T0 + timedelta(minutes=1), "later")
    row = schedule(db, "a.example.com")
    assert row is not None and row.not_before == T0 + timedelta(minutes=1)
    assert row.last_error == "later"
    clear(db, "a.example.com")
    row = schedule(db, "a.example.com")
    assert row is not None and row.not_before is None and row.last_error is None
    other = schedule(db, "b.example.com")
    assert other is not None and other.not_before == T0 + timedelta(minutes=1)


def test_concurrent_deferrals_of_the_same_domains_never_fail(db: Database) -> None:
    """Eight threads (as replicas) defer the same new domains at once, 30 times each:
    the read-then-insert this replaces ended a replica with a UniqueViolation."""
    errors: list[BaseException] = []
    barrier = threading.Barrier(8)

    def worker(index: int) -> None:
        try:
            for round_ in range(30):
                barrier.wait(timeout=120)
                until = T0 + timedelta(seconds=index + round_)
                defer(db, [f"d{round_}.example.com", "shared.example.com"], until, f"t{index}")
        except BaseException as exc:  # collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert errors == []
    with db.session() as session:
        rows = {row.domain: row for row in session.scalars(select(DomainSchedule))}
    assert len(rows) == 31
    assert rows["shared.example.com"].not_before == T0 + timedelta(seconds=7 + 29)
    for round_ in range(30):
        assert rows[f"d{round_}.example.com"].not_before == T0 + timedelta(seconds=7 + round_)


def test_lock_domain_creates_the_row_and_keeps_a_deferral(db: Database) -> None:
    with db.session() as session:
        lock_domain(session, "new.example.com")
    row = schedule(db, "new.example.com")
    assert row is not None and row.not_before is None
    defer(db, ["new.example.com"], T0, "busy")
    with db.session() as session:
        lock_domain(session, "new.example.com")
    row = schedule(db, "new.example.com")
    assert row is not None and row.not_before == T0
