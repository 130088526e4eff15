from __future__ import annotations

import logging
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import delete, select
from sqlalchemy.exc import IntegrityError as SqlIntegrityError

from mirror.logs import redacted_url
from mirror.store.db import SCHEMA_HEAD, Database
from mirror.store.models import Bundle, ExportRun, RunState, Version


def _exercise(database: Database) -> None:
    database.upgrade()
    assert database.current() == database.head() == SCHEMA_HEAD
    assert database.is_current()
    database.upgrade()  # idempotent
    with database.session() as session:
        session.execute(delete(Version))
        session.execute(delete(ExportRun))
        session.execute(delete(Bundle))
    with database.session() as session:
        session.add(ExportRun(domain="docs.a.test"))
    with pytest.raises(SqlIntegrityError), database.session() as session:
        session.add(ExportRun(domain="docs.a.test"))
    with database.session() as session:
        run = session.scalars(select(ExportRun)).one()
        run.active = False
        run.state = RunState.STORED
        session.add(ExportRun(domain="docs.a.test"))
        session.add(
            Bundle(sha256="a" * 64, size=1, format="tar.gz", tree_sha256="b" * 64, file_count=1)
        )
        session.flush()
        session.add(
            Version(
                domain="docs.a.test",
                label="2026-11-21",
                bundle_sha256="a" * 64,
                tree_sha256="b" * 64,
            )
        )
    with database.session() as session:
        created = session.scalars(select(Version)).one().created_at
        assert created.tzinfo is not None
        assert abs((datetime.now(UTC) - created).total_seconds()) < 60
        assert len(session.scalars(select(ExportRun)).all()) == 2


def test_sqlite_schema_and_one_active_run_per_domain(tmp_path: object) -> None:
    database = Database(f"sqlite:///{tmp_path}/index.db")
    _exercise(database)
    database.dispose()


@pytest.mark.postgres
def test_postgres_schema_and_one_active_run_per_domain(postgres_url: str) -> None:
    database = Database(postgres_url)
    _exercise(database)
    database.dispose()


def test_redacted_url_hides_password() -> None:
    assert redacted_url("postgresql+psycopg://mirror:hunter2@db:5432/m") == (
        "postgresql+psycopg://mirror:***@db:5432/m"
    )
    assert (
        redacted_url("sqlite:////var/lib/mirror/mirror.db") == "sqlite:////var/lib/mirror/mirror.db"
    )


def _upgrade_in_processes(url: str, count: int) -> list[int]:
    import subprocess
    import sys

    code = f"from mirror.store.db import Database; Database({url!r}).upgrade()"
    processes = [subprocess.Popen([sys.executable, "-c", code]) for _ in range(count)]
    return [process.wait(timeout=120) for process in processes]


def test_concurrent_upgrades_of_an_empty_sqlite_index(tmp_path: object) -> None:
    assert _upgrade_in_processes(f"sqlite:///{tmp_path}/index.db", 4) == [0, 0, 0, 0]


@pytest.mark.postgres
def test_concurrent_upgrades_of_an_empty_postgres_index(postgres_url: str) -> None:
    database = Database(postgres_url)
    with database.engine.begin() as connection:
        connection.exec_driver_sql("DROP SCHEMA public CASCADE; CREATE SCHEMA public")
    assert database.current() is None and not database.is_current()
    database.dispose()
    assert _upgrade_in_processes(postgres_url, 4) == [0, 0, 0, 0]


CRASH_AFTER_FIRST_TABLE = """
import os, sys
from sqlalchemy import Engine, event
from mirror.store.db import Database

def crash(conn, cursor, statement, *args):
    if statement.lstrip().upper().startswith("CREATE TABLE BUNDLES"):
        os._exit(9)

event.listen(Engine, "after_cursor_execute", crash)
Database(sys.argv[1]).upgrade()
"""


def test_a_crash_half_way_through_the_first_upgrade_leaves_nothing(tmp_path: object) -> None:
    """Killed after the first CREATE TABLE: the next upgrade must still succeed."""
    import subprocess
    import sys

    url = f"sqlite:///{tmp_path}/index.db"
    crashed = subprocess.run([sys.executable, "-c", CRASH_AFTER_FIRST_TABLE, url], check=False)
    assert crashed.returncode == 9
    database = Database(url)
    assert database.current() is None
    assert database.upgrade() == database.head()
    database.dispose()


def test_upgrade_says_one_line_when_it_upgrades_and_nothing_otherwise(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    database = Database(f"sqlite:///{tmp_path}/index.db")
    with caplog.at_level(logging.DEBUG):
        assert database.upgrade() == SCHEMA_HEAD
        mine = [r for r in caplog.records if r.name == "mirror.store.db"]
        assert [r.getMessage() for r in mine] == ["index schema upgraded"]
        assert mine[0].__dict__["from"] == "empty" and mine[0].__dict__["to"] == SCHEMA_HEAD
        caplog.clear()
        assert database.upgrade() == SCHEMA_HEAD
        assert caplog.records == []  # Alembic is not even loaded for a current schema
    database.dispose()


def _todays_state_moves_to_the_default_site(url: str) -> None:
    """Migration 0006: a set packed and a version delivered before sites existed belong to
    the implicit site `default`; sequences are unique per site from then on; downgrade
    gives the delivery back to the version."""
    from alembic import command
    from sqlalchemy import create_engine, text

    from mirror.store.db import alembic_config
    from mirror.store.models import Delivery, Transfer, TransferItem

    config = alembic_config(url)
    command.upgrade(config, "0005")
    engine = create_engine(url)
    when = "2026-11-20 02:00:00+00:00"
    with engine.begin() as connection:
        connection.execute(
            text(
                "INSERT INTO bundles (sha256, size, format, tree_sha256, file_count, created_at) "
                f"VALUES ('{'a' * 64}', 1, 'tar.gz', '{'b' * 64}', 1, '{when}')"
            )
        )
        connection.execute(
            text(
                "INSERT INTO versions (domain, label, bundle_sha256, tree_sha256, created_at, "
                f"delivered_at) VALUES ('docs.a.test', '2026-11-20', '{'a' * 64}', '{'b' * 64}', "
                f"'{when}', '{when}')"
            )
        )
        connection.execute(
            text(
                "INSERT INTO transfers (sequence, manifest_sha256, path, item_count, total_bytes,"
                f" created_at) VALUES (1, '{'c' * 64}', '/media/set-1', 1, 1, '{when}')"
            )
        )
        connection.execute(
            text("INSERT INTO transfer_items (transfer_id, version_id) VALUES (1, 1)")
        )
    engine.dispose()
    database = Database(url)
    assert database.upgrade() == SCHEMA_HEAD
    with database.session() as session:
        (transfer,) = session.scalars(select(Transfer))
        assert (transfer.site, transfer.sequence, transfer.lost_at) == ("default", 1, None)
        (delivery,) = session.scalars(select(Delivery))
        assert delivery.site == "default" and delivery.delivered_at.year == 2026
        assert (delivery.published_sha256, delivery.published_size) == (None, None)  # 0008
        assert session.scalars(select(TransferItem.version_id)).all() == [delivery.version_id]
        session.add(Transfer(site="prod", sequence=1, manifest_sha256="d" * 64, path="/p",
                             item_count=0, total_bytes=0))  # fmt: skip
    with pytest.raises(SqlIntegrityError), database.session() as session:
        session.add(Transfer(site="prod", sequence=1, manifest_sha256="e" * 64, path="/q",
                             item_count=0, total_bytes=0))  # fmt: skip
    with database.session() as session:
        session.execute(delete(Transfer).where(Transfer.site == "prod"))
    database.dispose()
    command.downgrade(config, "0005")
    engine = create_engine(url)
    with engine.connect() as connection:
        assert connection.execute(text("SELECT delivered_at FROM versions")).scalar() is not None
    engine.dispose()


def test_sqlite_todays_state_moves_to_the_default_site(tmp_path: Path) -> None:
    _todays_state_moves_to_the_default_site(f"sqlite:///{tmp_path}/index.db")


@pytest.mark.postgres
def test_postgres_todays_state_moves_to_the_default_site(postgres_url: str) -> None:
    _todays_state_moves_to_the_default_site(postgres_url)
