"""Database engine, sessions and schema upgrades (SQLite by default, PostgreSQL for replicas)."""

from __future__ import annotations

import contextlib
import fcntl
import importlib
import logging
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine, create_engine, event, inspect, text
from sqlalchemy.exc import OperationalError, ProgrammingError
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.pool import NullPool

from mirror.errors import ConfigError, TemporaryFailure
from mirror.fsutil import disk_full, free_bytes, is_disk_full
from mirror.logs import redacted_url

if TYPE_CHECKING:
    from alembic.config import Config as AlembicConfig

log = logging.getLogger(__name__)

SCHEMA_HEAD = "0008"  # the newest migration in migrations/versions; a test keeps them equal
_LOCK = 0x6D69_7272_6F72_0001  # "mirror" + 1: the schema-upgrade advisory lock on PostgreSQL
_NEARLY_FULL = 256 * 1024  # bytes free below which SQLite's "disk I/O error" means a full disk


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=FULL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.close()


def make_engine(url: str) -> Engine:
    """An engine for `url`; SQLite gets WAL, full sync and a busy timeout for several processes."""
    if url.startswith("sqlite"):
        path = url.split(":///", 1)[-1]
        if path and path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url, connect_args={"timeout": 30})
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    try:
        return create_engine(url, pool_pre_ping=True)
    except Exception as exc:  # the URL itself is malformed or names a missing driver
        raise ConfigError(f"store.database: cannot use {redacted_url(url)}: {exc}") from None


def dialect_insert(session: Session, table: Any) -> Any:
    """An INSERT into `table` that knows ON CONFLICT, for the session's database (only that
    database's dialect is imported: PostgreSQL's brings all its drivers and asyncio)."""
    dialect = session.get_bind().dialect.name
    module: Any = importlib.import_module(f"sqlalchemy.dialects.{dialect}")
    return module.insert(table)


def alembic_config(url: str) -> AlembicConfig:
    """Alembic's config for `url` (Alembic is imported only when a schema is touched)."""
    from alembic.config import Config as AlembicConfig

    config = AlembicConfig()
    config.set_main_option("script_location", str(resources.files("mirror.migrations")))
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


class Database:
    """The index: an engine, a session factory and schema upgrades."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.engine = make_engine(url)
        self.sessions = sessionmaker(self.engine, expire_on_commit=False)

    @contextlib.contextmanager
    def session(self) -> Iterator[Session]:
        """A session that commits on success and rolls back on error."""
        with self.sessions() as session:
            try:
                yield session
                session.commit()
            except BaseException:
                session.rollback()
                raise

    def upgrade(self) -> str:
        """Bring the schema to the newest revision; returns it.

        Several processes may call this at once (daemon replicas, a CLI run beside
        the daemon): a lock serialises them, so the later ones find the schema current.
        Alembic's own INFO lines are kept out of the log (`mirror.logs.setup_logging`);
        one line says when the schema actually changed.
        """
        from alembic import command

        before = self.current()
        if before == SCHEMA_HEAD:
            return before
        config = alembic_config(self.url)
        try:
            with self._upgrade_lock(), self._upgrade_engine().begin() as connection:
                if connection.dialect.name == "postgresql":
                    connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _LOCK})
                config.attributes["connection"] = connection
                command.upgrade(config, "head")
        except OperationalError as exc:
            full = self._full_disk(exc)
            if full is not None:
                raise full from None
            raise TemporaryFailure(
                f"cannot upgrade the index at {redacted_url(self.url)}: {exc.orig}"
            ) from None
        after = self.current()
        if after != before:
            log.info(
                "index schema upgraded",
                extra={
                    "database": redacted_url(self.url),
                    "from": before or "empty",
                    "to": after,
                },
            )
        return after or self.head()

    def _upgrade_engine(self) -> Engine:
        """The engine a schema upgrade runs on: all of it in one transaction, or none of it.

        Python's sqlite3 commits before every DDL statement, so a crash half-way
        through a migration would leave tables without a revision and every later
        upgrade failing. This engine turns that off and opens its one transaction with
        BEGIN IMMEDIATE (the SQLAlchemy recipe for transactional DDL on pysqlite).
        """
        if self.engine.dialect.name != "sqlite":
            return self.engine
        engine = create_engine(self.url, poolclass=NullPool, connect_args={"timeout": 30})

        def connect(dbapi_connection: Any, record: Any) -> None:
            _sqlite_pragmas(dbapi_connection, record)
            dbapi_connection.isolation_level = None

        event.listen(engine, "connect", connect)
        event.listen(engine, "begin", lambda conn: conn.exec_driver_sql("BEGIN IMMEDIATE"))
        return engine

    @contextlib.contextmanager
    def _upgrade_lock(self) -> Iterator[None]:
        """A file lock beside a SQLite database (PostgreSQL uses an advisory lock instead)."""
        path = self.engine.url.database if self.engine.dialect.name == "sqlite" else None
        if not path or path == ":memory:":
            yield
            return
        with open(f"{path}.upgrade-lock", "a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def head(self) -> str:
        from alembic.script import ScriptDirectory

        return ScriptDirectory.from_config(alembic_config(self.url)).get_current_head() or ""

    def current(self) -> str | None:
        """The schema revision the index is at (None: empty), read without loading Alembic."""
        try:
            with self.engine.connect() as connection:
                return connection.execute(
                    text("SELECT version_num FROM alembic_version")
                ).scalar_one_or_none()
        except (OperationalError, ProgrammingError):
            return None

    def exists(self) -> bool:
        """Whether the index was ever created (its revision table is there). Unlike `current`,
        a database that cannot be reached is not "empty": TemporaryFailure (exit 75)."""
        try:
            with self.engine.connect() as connection:
                return inspect(connection).has_table("alembic_version")
        except OperationalError as exc:
            raise TemporaryFailure(
                f"cannot reach the index at {redacted_url(self.url)}: {exc.orig}"
            ) from None

    def _full_disk(self, exc: OperationalError) -> TemporaryFailure | None:
        """SQLite on a full disk says "database or disk is full" or, when not even its journal
        fits, "disk I/O error": either way the operator needs the free space and where."""
        if not self.url.startswith("sqlite:///"):
            return None
        where = Path(self.url.removeprefix("sqlite:///")).parent
        free = free_bytes(where)
        if is_disk_full(exc) or (
            "disk I/O error" in str(exc.orig) and free is not None and free < _NEARLY_FULL
        ):
            return disk_full(where, None, "the index was not changed")
        return None

    def is_current(self) -> bool:
        """True when no upgrade is needed; the cheap check every command makes."""
        return self.current() == SCHEMA_HEAD

    def dispose(self) -> None:
        self.engine.dispose()
