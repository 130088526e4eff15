"""Fixtures of the chart tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from mirror.airgap.s3.objectstore import ObjectStore
from tests.airgap.chart.seeding import Seeded, seed_version


@pytest.fixture
def two_versions(object_store: ObjectStore, tmp_path: Path) -> tuple[Seeded, Seeded]:
    return (
        seed_version(object_store, tmp_path, "2026-11-20"),
        seed_version(object_store, tmp_path, "2026-11-21"),
    )
