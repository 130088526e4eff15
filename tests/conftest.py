"""Shared fixtures. Server fixtures live in tests/fixtures/ and are loaded as plugins here.

`make test` starts PostgreSQL and an S3 API server on loopback and exports
MIRROR_TEST_POSTGRES_URL / MIRROR_TEST_S3_ENDPOINT; run directly, pytest starts
what it can itself (see the fixtures).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from mirror.config import Settings, settings_from_dict
from mirror.store.app import App

pytest_plugins = [
    "tests.fixtures.sim",
    "tests.fixtures.s3",
    "tests.fixtures.archives",
    "tests.fixtures.artefact",
    "tests.fixtures.disks",
    "tests.fixtures.tokens",
    "tests.fixtures.serving",  # last: it imports tests.fixtures.archives (rewritten first)
]
# The command line is run by tests/fixtures/cli.py (mirror_cli, start_mirror, on_a_terminal).

REQUIRE_SERVERS = os.environ.get("MIRROR_REQUIRE_SERVERS") == "1"


@pytest.fixture(autouse=True)
def own_root_logger() -> Iterator[None]:
    """Each test leaves the root logger as it found it: `setup_logging` (a command run in
    process) points it at that test's captured stderr, which is closed once the test ends,
    and every later record then printed "--- Logging error ---" with a traceback."""
    root = logging.getLogger()
    handlers, level = _not_pytests(root.handlers), root.level
    try:
        yield
    finally:
        pytests = [h for h in root.handlers if h not in _not_pytests(root.handlers)]
        root.handlers[:] = pytests + handlers  # pytest adds and removes its own per phase
        root.setLevel(level)


def _not_pytests(handlers: list[logging.Handler]) -> list[logging.Handler]:
    return [h for h in handlers if not type(h).__module__.startswith("_pytest")]


@pytest.fixture
def store_dir(tmp_path: Path) -> Path:
    path = tmp_path / "store"
    path.mkdir()
    return path


@pytest.fixture
def settings(store_dir: Path) -> Settings:
    return settings_from_dict({"store": {"path": str(store_dir)}})


@pytest.fixture
def app(settings: Settings) -> Iterator[App]:
    application = App(settings)
    yield application
    application.close()


@pytest.fixture(scope="session")
def postgres_server_url() -> str:
    """The PostgreSQL URL from `make test`; skipped when run without it (fails under make test)."""
    url = os.environ.get("MIRROR_TEST_POSTGRES_URL", "")
    if not url:
        if REQUIRE_SERVERS:
            pytest.fail("MIRROR_TEST_POSTGRES_URL is not set but make test requires PostgreSQL")
        pytest.skip("PostgreSQL not started (run through make test)")
    return url


@pytest.fixture
def postgres_url(postgres_server_url: str) -> Iterator[str]:
    """A new, empty PostgreSQL database of its own for this test (dropped after it), so tests
    running in parallel never share tables."""
    url = create_postgres_database(postgres_server_url)
    try:
        yield url
    finally:
        drop_postgres_database(postgres_server_url, url)


def create_postgres_database(server_url: str) -> str:
    """Create a new, empty database on the server of `server_url`; returns its URL."""
    import uuid

    import sqlalchemy

    name = f"mirror_test_{uuid.uuid4().hex[:12]}"
    admin = sqlalchemy.create_engine(server_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(sqlalchemy.text(f'CREATE DATABASE "{name}"'))
    admin.dispose()
    return server_url.rsplit("/", 1)[0] + f"/{name}"


def drop_postgres_database(server_url: str, url: str) -> None:
    import sqlalchemy

    admin = sqlalchemy.create_engine(server_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        name = url.rsplit("/", 1)[1]
        connection.execute(sqlalchemy.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


@pytest.fixture
def postgres_database(postgres_url: str) -> str:
    """The URL of a new, empty PostgreSQL database for this test (dropped after it)."""
    return postgres_url


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Files holding a `slow` test come first: `--dist loadfile --no-loadscope-reorder` (make
    test) hands files out in this order, so the long ones never start last and leave the other
    workers idle at the end (xdist's own order puts files with few tests, the long pipelines
    among them, last)."""
    slow_files = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow_files)


CPU_REPORT = os.environ.get("MIRROR_TEST_CPU_REPORT", "")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[object]:
    """With MIRROR_TEST_CPU_REPORT=FILE, one line per test: the CPU seconds of the worker and of
    the processes it waited for (the `mirror` commands a test ran), to find what makes `make
    test` long; the S3 and PostgreSQL servers are not counted."""
    if not CPU_REPORT:
        return (yield)
    import resource

    def cpu() -> tuple[float, float]:
        own = resource.getrusage(resource.RUSAGE_SELF)
        children = resource.getrusage(resource.RUSAGE_CHILDREN)
        return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime

    before = cpu()
    try:
        return (yield)
    finally:
        after = cpu()
        with open(CPU_REPORT, "a") as report:
            own, children = (after[0] - before[0]), (after[1] - before[1])
            report.write(f"{own:.2f}\t{children:.2f}\t{item.nodeid}\n")
