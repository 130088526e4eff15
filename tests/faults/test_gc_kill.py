"""SIGKILL during `mirror chart gc`, then gc again: the index never lists a version whose bundle
or manifest is gone, and the second run finishes the removal the first one journaled.

MIRROR_FAULT_KILLS (make faults: 100) sets how many kills. Each round seeds a fresh domain
with many versions and kills gc at one of three points, in turn: as soon as its journal
names versions, as soon as the index has lost them, or after some objects were deleted.
"""

from __future__ import annotations

import os
import random
import time
from pathlib import Path

import pytest

from mirror.airgap import layout
from mirror.airgap.s3.objectstore import ObjectStore
from mirror.config import TargetSettings
from tests.airgap.chart.seeding import assert_index_complete, seed_version
from tests.fixtures.cli import mirror_cli, write_config
from tests.fixtures.kills import killed_when
from tests.fixtures.s3 import bucket_listing

KILLS = int(os.environ.get("MIRROR_FAULT_KILLS", "3"))  # each point once
VERSIONS = 24
KEEP = 3
POINTS = ("journal written", "index changed", "objects deleted")

pytestmark = [pytest.mark.s3, pytest.mark.slow, pytest.mark.timeout(240 + 40 * KILLS)]


def reached(point: str, store: ObjectStore, domain: str, keys_before: int, goal: int) -> bool:
    if point == "journal written":
        journal = layout.read_gc_journal(store, domain)
        return journal is not None and bool(journal.pending)
    if point == "index changed":
        index = layout.read_index(store, domain)
        return index is not None and len(index.versions) < VERSIONS
    return keys_before - len(bucket_listing(store.client, store.bucket)) >= goal


def kill_gc_at(
    point: str, config: Path, store: ObjectStore, domain: str, rng: random.Random
) -> bool:
    """Run gc and SIGKILL it once `point` is reached; True when it finished first."""
    keys_before = len(bucket_listing(store.client, store.bucket))
    goal = rng.randint(1, 2 * (VERSIONS - KEEP) - 1)
    finished = killed_when(
        lambda _pid: point if reached(point, store, domain, keys_before, goal) else None,
        *("--config", str(config), "chart", "gc", "--domain", domain, "--keep", str(KEEP)),
        timeout=60,
    )
    return finished is None


@pytest.mark.fault(
    "13.5 gc killed",
    "no index entry without its objects; a re-run finishes the gc",
)
def test_kills_during_gc_leave_every_listed_version_whole(
    tmp_path: Path,
    object_store: ObjectStore,
    target_settings: TargetSettings,
    fault_got: list[str],
) -> None:
    config = write_config(
        tmp_path / "airgap.toml",
        {
            "target": {
                "endpoint_url": target_settings.endpoint_url,
                "bucket": target_settings.bucket,
                "prefix": target_settings.prefix,
                "region": target_settings.region,
            }
        },
    )
    rng = random.Random(int(os.environ.get("MIRROR_FAULT_SEED", "1313")))
    kills, finished_first, rounds = 0, 0, 0
    killed_at: dict[str, int] = {}
    rerun_seconds: list[float] = []
    while kills < KILLS and rounds < 3 * KILLS:
        point = POINTS[rounds % len(POINTS)]
        rounds += 1
        domain = f"round{rounds}.example.com"
        workdir = tmp_path / domain
        workdir.mkdir()
        labels = [f"2026-10-{day:02d}" for day in range(1, VERSIONS + 1)]
        for label in labels:
            seed_version(object_store, workdir, label, domain=domain)
        if kill_gc_at(point, config, object_store, domain, rng):
            finished_first += 1
        else:
            kills += 1
            killed_at[point] = killed_at.get(point, 0) + 1
        assert_index_complete(object_store, domain)

        started = time.monotonic()
        again = mirror_cli("--config", str(config), "chart", "gc", "--keep", str(KEEP))
        rerun_seconds.append(time.monotonic() - started)
        assert again.returncode == 0, again.stderr
        assert_index_complete(object_store, domain)
        index = layout.read_index(object_store, domain)
        assert index is not None and index.labels() == labels[-KEEP:]
        journal = layout.read_gc_journal(object_store, domain)
        assert journal is not None and journal.pending == []
        assert {record.version for record in journal.removed} == set(labels[:-KEEP])
        left = {key for key in bucket_listing(object_store.client, object_store.bucket)}
        for label in labels[:-KEEP]:
            assert object_store.key(domain, label, "bundle.tar.gz") not in left
            assert object_store.key(domain, label, "manifest.json") not in left
    assert kills == KILLS, f"only {kills} kills landed in {rounds} rounds"
    where = ", ".join(f"{count} at {point}" for point, count in sorted(killed_at.items()))
    fault_got.append(
        f"{kills} kills ({where}); every listed version whole; re-runs finished "
        f"(max {max(rerun_seconds):.1f}s)"
    )
