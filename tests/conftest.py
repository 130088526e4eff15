"""Shared fixtures. Server fixtures live in tests/fixtures/ and are loaded as plugins here.

`make test` starts PostgreSQL and an S3 API server on loopback and exports
MIRROR_TEST_POSTGRES_URL / MIRROR_TEST_S3_ENDPOINT; run directly, pytest starts
what it can itself (see the fixtures).
"""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mirror.config import Settings, settings_from_dict
from mirror.store.app import App

pytest_plugins = [
    "tests.fixtures.sim",
    "tests.fixtures.s3",
    "tests.fixtures.archives",
    "tests.fixtures.artefact",
]

REPO = Path(__file__).resolve().parent.parent
REQUIRE_SERVERS = os.environ.get("MIRROR_REQUIRE_SERVERS") == "1"


def mirror_cli(
    *args: str,
    env: dict[str, str] | None = None,
    input: str | None = None,
    timeout: float = 120,
) -> subprocess.CompletedProcess[str]:
    """Run the real `mirror` command as a subprocess (the way operators and scripts do)."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("MIRROR_")}
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "mirror", *args],
        capture_output=True,
        text=True,
        env=full_env,
        input=input,
        timeout=timeout,
        check=False,
    )


def on_a_terminal(
    *args: str, env: dict[str, str] | None = None, cwd: Path | None = None, timeout: float = 60
) -> tuple[int, str, str]:
    """Run the real `mirror` with stderr on a pseudo-terminal (progress is drawn only for
    one): (exit code, stdout, everything drawn on the terminal)."""
    leader, follower = pty.openpty()
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("MIRROR_")}
    full_env.update({"COLUMNS": "120", "TERM": "xterm", **(env or {})})
    drawn = b""
    with tempfile.TemporaryFile() as stdout:
        process = subprocess.Popen(
            [sys.executable, "-m", "mirror", *args],
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=follower,
            env=full_env,
        )
        os.close(follower)
        try:
            while select.select([leader], [], [], timeout)[0]:
                try:
                    data = os.read(leader, 65536)
                except OSError:  # EIO: the child closed its end
                    break
                if not data:
                    break
                drawn += data
        finally:
            os.close(leader)
            code = process.wait(timeout)
        stdout.seek(0)
        return code, stdout.read().decode(), drawn.decode("utf-8", "replace")


def write_config(path: Path, document: dict[str, Any]) -> Path:
    """Write a TOML config file from a dict (tables and arrays of tables, enough for tests)."""
    lines: list[str] = []

    def value(item: Any) -> str:
        if isinstance(item, bool):
            return "true" if item else "false"
        if isinstance(item, int | float):
            return str(item)
        if isinstance(item, list):
            return "[" + ", ".join(value(i) for i in item) + "]"
        return '"' + str(item).replace("\\", "\\\\").replace('"', '\\"') + '"'

    for section, body in document.items():
        if isinstance(body, list):
            for entry in body:
                lines.append(f"[[{section}]]")
                lines.extend(f"{k} = {value(v)}" for k, v in entry.items())
        else:
            lines.append(f"[{section}]")
            lines.extend(f"{k} = {value(v)}" for k, v in body.items())
    path.write_text("\n".join(lines) + "\n")
    return path


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
