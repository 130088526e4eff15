"""Issue 38 class 7: a number taken from outside has one bound, checked before it reaches any
database, the same on SQLite and PostgreSQL.

The vendor's `pageCount` is the example the battery found: 3,000,000,000 (over a 32-bit
INTEGER, within the parser's BIGINT bound) was refused cleanly on SQLite and ended the run
in `unexpected DataError` on PostgreSQL. Both must now give the documented refusal. Past the
bound (2**63, 10**23) or negative, the count was taken for "not reported" and the
completeness check skipped (trial N2): now the same refusal, before the bundle is fetched.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mirror.sim import Simulator
from tests.fixtures.cli import mirror_cli, write_config

FAST_API = {"poll_interval": "0.05s", "max_poll_interval": "0.1s", "max_starts_per_hour": 1000}
BACKENDS = ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]


def export_run(tmp_path: Path, sim: Simulator, database: str | None) -> Any:
    store: dict[str, Any] = {"path": str(tmp_path / "store")}
    if database is not None:
        store["database"] = database
    document = {"api": {"base_url": sim.url, **FAST_API}, "store": store}
    config = write_config(tmp_path / "config.toml", document)
    return mirror_cli(
        "--config",
        str(config),
        "export",
        "run",
        "--adhoc",
        "docs.numbers.test",
        env={"MIRROR_API_KEY": sim.key},
    )


@pytest.mark.fault(
    "38.7 vendor pageCount 3e9, 2**63, 1e23, on SQLite and on PostgreSQL",
    "the same refusal on both (exit 5, one line), never taken for 'not reported'",
)
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("reported", [3_000_000_000, 2**63 - 2048, 2**63, 10**23])
def test_a_huge_page_count_is_refused_alike_on_both_databases(
    sim: Simulator,
    tmp_path: Path,
    request: pytest.FixtureRequest,
    backend: str,
    reported: int,
    fault_got: list[str],
) -> None:
    database = request.getfixturevalue("postgres_database") if backend == "postgresql" else None
    sim.set_faults(page_count_reported=reported)
    result = export_run(tmp_path, sim, database)
    stderr = result.stderr.strip()
    fault_got.append(f"{backend}: exit {result.returncode}: {stderr[:60]}")
    assert "unexpected" not in stderr, stderr
    assert result.returncode == 5, stderr
    assert len(stderr.splitlines()) == 1, stderr
    assert f"pageCount {reported}" in result.stdout + stderr
