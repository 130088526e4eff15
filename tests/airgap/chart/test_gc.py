"""`chart gc`: what stays, what goes, the dry run, the journal: the rules on the in-memory bucket
(held to the server by tests/airgap/test_contracts.py), the command on the S3 server."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from mirror.airgap import chart, layout
from mirror.airgap.chart.gc import (
    CURRENT,
    DELTA_BASE,
    PROMOTED_MEANWHILE,
    ROLLBACK_TARGET,
    gc,
    gc_domain,
    protected_versions,
)
from mirror.airgap.s3.objectstore import ObjectStore
from mirror.config import TargetSettings
from mirror.errors import ConfigError, NotFound
from tests.airgap.chart.seeding import DOMAIN, assert_index_complete, seed_version
from tests.fixtures.cli import mirror_cli, write_config
from tests.fixtures.memory import MemoryBucket

OTHER = "api.example.com"


def labels(count: int, start: int = 1) -> list[str]:
    return [f"2026-10-{day:02d}" for day in range(start, start + count)]


@pytest.fixture
def store() -> MemoryBucket:
    return MemoryBucket()


def listing(store: MemoryBucket) -> dict[str, str]:
    """{key: etag} of every object, for "nothing changed" checks."""
    return {key: store.objects[key].etag for key in store.list_keys()}


def seed(store: Any, workdir: Path, versions: list[str], domain: str = DOMAIN) -> None:
    for version in versions:
        seed_version(store, workdir, version, domain=domain)


def listed(store: Any, domain: str = DOMAIN) -> list[str]:
    index = layout.read_index(store, domain)
    assert index is not None
    return index.labels()


def version_keys(store: Any, version: str, domain: str = DOMAIN) -> set[str]:
    return {
        store.key(domain, version, "bundle.tar.gz"),
        store.key(domain, version, "manifest.json"),
    }


def test_keeps_the_newest_n_and_removes_the_rest_objects_and_index(
    store: MemoryBucket, tmp_path: Path
) -> None:
    versions = labels(6)
    seed(store, tmp_path, versions)
    report = gc(store, 2)
    assert listed(store) == versions[-2:]
    (result,) = report.domains
    assert [v.ref.label for v in result.removed] == versions[:4]
    keys = set(listing(store))
    for version in versions[:4]:
        assert not version_keys(store, version) & keys
    for version in versions[-2:]:
        assert version_keys(store, version) <= keys
    assert_index_complete(store)
    journal = layout.read_gc_journal(store, DOMAIN)
    assert journal is not None and journal.pending == []
    assert [record.version for record in journal.removed] == versions[:4]
    assert gc(store, 2).domains[0].removed == []


def test_current_rollback_target_and_newest_are_never_removed(
    store: MemoryBucket, tmp_path: Path
) -> None:
    versions = labels(8)
    seed(store, tmp_path, versions)
    chart.promote(store, DOMAIN, versions[1])
    chart.promote(store, DOMAIN, versions[3])  # current; rollback target: versions[1]
    report = gc(store, 1)
    assert listed(store) == [versions[1], versions[3], versions[-1]]
    kept = {v.label: v.reasons for v in report.domains[0].kept}
    assert CURRENT in kept[versions[3]]
    assert ROLLBACK_TARGET in kept[versions[1]]
    assert DELTA_BASE in kept[versions[-1]] and "newest 1" in kept[versions[-1]]
    assert_index_complete(store)
    assert chart.rollback(store, DOMAIN).current == versions[1]


def test_protection_rules_without_a_promotion() -> None:
    reasons = protected_versions(["2026-10-02", "2026-10-01", "2026-10-03"], None, DOMAIN, 1)
    assert reasons == {"2026-10-03": (CURRENT, DELTA_BASE, "newest 1")}


def test_dry_run_changes_nothing_and_reports_the_bytes(store: MemoryBucket, tmp_path: Path) -> None:
    versions = labels(5)
    seed(store, tmp_path, versions)
    seed(store, tmp_path, labels(2), domain=OTHER)
    before = listing(store)
    report = gc(store, 3, dry_run=True)
    assert listing(store) == before
    assert [d.domain for d in report.domains] == [OTHER, DOMAIN]
    (docs,) = [d for d in report.domains if d.domain == DOMAIN]
    assert [v.ref.label for v in docs.removed] == versions[:2]
    expected = sum(
        store.head(key)["size"]  # type: ignore[index]
        for version in versions[:2]
        for key in version_keys(store, version)
    )
    assert report.bytes_freed == docs.bytes_freed == expected > 0
    real = gc(store, 3)
    assert real.bytes_freed == expected
    assert [v.ref.label for v in real.domains[1].removed] == versions[:2]


def test_an_interrupted_gc_is_finished_by_the_next_run(store: MemoryBucket, tmp_path: Path) -> None:
    """A gc killed after writing its journal: the next run (not a dry run) completes it."""
    versions = labels(4)
    seed(store, tmp_path, versions)
    index = layout.read_index(store, DOMAIN)
    assert index is not None
    doomed = [entry for entry in index.versions if entry.version == versions[0]]
    journal = layout.GcJournal(domain=DOMAIN, pending=doomed)
    store.write_json(layout.gc_journal_key(store, DOMAIN), journal.as_dict(), if_match=None)
    before = listing(store)
    dry = gc(store, 4, dry_run=True)
    assert dry.domains[0].finished == [versions[0]]
    assert listing(store) == before
    report = gc(store, 4)
    assert report.domains[0].finished == [versions[0]]
    assert listed(store) == versions[1:]
    keys = set(listing(store))
    assert not version_keys(store, versions[0]) & keys
    assert_index_complete(store)


def test_a_version_being_imported_is_never_touched(store: MemoryBucket, tmp_path: Path) -> None:
    """Bundle and manifest written, index not yet: gc leaves the objects alone."""
    seed(store, tmp_path, labels(3))
    importing = seed_version(store, tmp_path, "2026-09-01", in_index=False)
    gc(store, 1)
    keys = set(listing(store))
    assert version_keys(store, importing.version) <= keys


def test_a_concurrent_import_is_not_lost(store: MemoryBucket, tmp_path: Path) -> None:
    """Another writer adds a version between gc's read and its write of index.json: gc
    reads again and the new version stays listed."""
    versions = labels(4)
    seed(store, tmp_path, versions)
    late = seed_version(store, tmp_path, "2026-10-20", in_index=False)
    added: list[str] = []

    def meanwhile_an_import_lands() -> datetime:
        if not added:
            added.append(late.version)
            key = layout.index_key(store, DOMAIN)
            document, etag = store.read_json(key)
            assert document is not None
            entry = {
                "version": late.version,
                "sha256": late.sha256,
                "size": late.size,
                "object": late.key,
                "manifest": store.key(DOMAIN, late.version, "manifest.json"),
                "imported_at": "2026-10-20T00:00:00Z",
            }
            document["versions"].append(entry)
            store.write_json(key, document, if_match=etag)
        return datetime.now(UTC)

    gc(store, 2, now=meanwhile_an_import_lands)
    assert added
    assert listed(store) == [*versions[-2:], late.version]  # decided before it landed
    assert_index_complete(store)


def test_a_version_promoted_while_gc_drops_it_is_put_back_whole(
    store: MemoryBucket, tmp_path: Path
) -> None:
    """An operator promotes a doomed version after gc planned but before its index write:
    gc puts the version back before deleting anything of it."""
    versions = labels(4)
    seed(store, tmp_path, versions)
    promoted: list[str] = []

    def meanwhile_someone_promotes() -> datetime:
        if not promoted:
            promoted.append(versions[0])
            chart.promote(store, DOMAIN, versions[0])
        return datetime.now(UTC)

    report = gc(store, 1, now=meanwhile_someone_promotes)
    (result,) = report.domains
    assert result.restored == [versions[0]]
    assert [v.ref.label for v in result.removed] == versions[1:3]
    assert PROMOTED_MEANWHILE in {r for v in result.kept for r in v.reasons}
    assert listed(store) == [versions[0], versions[-1]]
    assert_index_complete(store)
    journal = layout.read_gc_journal(store, DOMAIN)
    assert journal is not None and journal.pending == []
    assert versions[0] not in {record.version for record in journal.removed}


@pytest.mark.s3
def test_values_of_a_removed_version_is_not_found_naming_gc(
    object_store: ObjectStore, target_settings: TargetSettings, tmp_path: Path
) -> None:
    versions = labels(3)
    seed(object_store, tmp_path, versions)
    gc(object_store, 1)
    with pytest.raises(NotFound, match=rf"version {versions[0]} of .* was removed by chart gc at"):
        chart.render_values(object_store, target_settings, DOMAIN, versions[0])


def test_unknown_domain_and_bad_keep(store: MemoryBucket, tmp_path: Path) -> None:
    seed(store, tmp_path, labels(1))
    with pytest.raises(NotFound, match=r"domain nothing\.example has no versions"):
        gc_domain(store, "nothing.example", 1)
    with pytest.raises(ConfigError, match="keep must be at least 1"):
        gc(store, 0)


def cli_config(tmp_path: Path, target: TargetSettings) -> Path:
    document: dict[str, Any] = {
        "target": {
            "endpoint_url": target.endpoint_url,
            "bucket": target.bucket,
            "prefix": target.prefix,
            "region": target.region,
        }
    }
    return write_config(tmp_path / "airgap.toml", document)


@pytest.mark.s3
def test_cli_gc_json_exit_codes_and_values_line(
    object_store: ObjectStore, target_settings: TargetSettings, tmp_path: Path
) -> None:
    versions = labels(4)
    seed(object_store, tmp_path, versions)
    config = str(cli_config(tmp_path, target_settings))
    dry = mirror_cli("--config", config, "--json", "chart", "gc", "--keep", "2", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    document = json.loads(dry.stdout)
    assert document["schema"] == "mirror.chart.gc/1" and document["dry_run"] is True
    assert [v["version"] for v in document["domains"][0]["removed"]] == versions[:2]
    done = mirror_cli("--config", config, "chart", "gc", "--domain", DOMAIN, "--keep", "2")
    assert done.returncode == 0, done.stderr
    assert f"{DOMAIN}: removed {versions[0]}" in done.stdout
    assert "freed" in done.stdout.splitlines()[-1]
    bad = mirror_cli("--config", config, "chart", "gc", "--keep", "0")
    assert bad.returncode == 2 and bad.stderr.startswith("mirror: error: ")
    unknown = mirror_cli("--config", config, "chart", "gc", "--domain", "x.example", "--keep", "1")
    assert unknown.returncode == 3, unknown.stderr
    assert unknown.stderr.startswith("mirror: error: domain x.example has no versions")
    gone = mirror_cli("--config", config, "chart", "values", DOMAIN, "--pin", versions[0])
    assert gone.returncode == 3
    assert "was removed by chart gc" in gone.stderr and "Traceback" not in gone.stderr
    (tmp_path / "down").mkdir()
    down = target_settings.model_copy(update={"endpoint_url": "http://127.0.0.1:9"})
    offline = mirror_cli(
        "--config", str(cli_config(tmp_path / "down", down)), "chart", "gc", "--keep", "1"
    )
    assert offline.returncode == 75, offline.stderr
    assert offline.stderr.startswith("mirror: error: ") and "Traceback" not in offline.stderr
