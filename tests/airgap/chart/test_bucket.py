"""mirror.airgap.chart.bucket: the complete versions of a domain, and why one is not (on the
in-memory bucket, held to the server by tests/airgap/test_contracts.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mirror.airgap import chart
from mirror.config import TargetSettings
from mirror.errors import (
    NotFound,
)
from tests.airgap.chart.seeding import (
    DOMAIN,
    seed_version,
)
from tests.fixtures.memory import MemoryBucket


@pytest.fixture
def store() -> MemoryBucket:
    return MemoryBucket()


@pytest.fixture
def target(store: MemoryBucket) -> TargetSettings:
    return TargetSettings(bucket=store.bucket, prefix=store.prefix)


def test_unknown_domain_and_version_are_not_found_with_the_versions_that_exist(
    store: MemoryBucket, target: TargetSettings, tmp_path: Path
) -> None:
    seed_version(store, tmp_path, "2026-11-20")
    seed_version(store, tmp_path, "2026-11-21")
    with pytest.raises(NotFound, match=r"domain other\.example has no versions") as missing:
        chart.render_values(store, target, "other.example")
    assert missing.value.exit_code == 3
    with pytest.raises(
        NotFound,
        match=r"version 2026-01-01 of docs\.example\.com does not exist; "
        r"versions: 2026-11-20, 2026-11-21$",
    ):
        chart.render_values(store, target, DOMAIN, "2026-01-01")


def test_a_version_without_its_manifest_is_incomplete(
    store: MemoryBucket, target: TargetSettings, tmp_path: Path
) -> None:
    seed_version(store, tmp_path, "2026-11-20")
    seed_version(store, tmp_path, "2026-11-21", with_manifest=False)
    with pytest.raises(NotFound, match=r"2026-11-21 of docs\.example\.com is incomplete"):
        chart.render_values(store, target, DOMAIN, "2026-11-21")
    with pytest.raises(NotFound, match="is incomplete"):
        chart.promote(store, DOMAIN, "2026-11-21")
    seed_version(store, tmp_path, "2026-11-22", in_index=False)
    with pytest.raises(NotFound, match="does not exist"):
        chart.promote(store, DOMAIN, "2026-11-22")
