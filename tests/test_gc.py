"""`chart gc` against the S3 API server: what stays, what goes, the dry run, the journal."""

from __future__ import annotations

import hashlib
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
from mirror.airgap.objectstore import ObjectStore
from mirror.config import TargetSettings
from mirror.errors import ConfigError, NotFound
from tests.fixtures.cli import mirror_cli, write_config
from tests.fixtures.s3 import bucket_listing
from tests.test_chart import DOMAIN, seed_version

pytestmark = pytest.mark.s3

OTHER = "api.example.com"


def labels(count: int, start: int = 1) -> list[str]:
    return [f"2026-10-{day:02d}" for day in range(start, start + count)]


def seed(store: ObjectStore, workdir: Path, versions: list[str], domain: str = DOMAIN) -> None:
    for version in versions:
        seed_version(store, workdir, version, domain=domain)


def listed(store: ObjectStore, domain: str = DOMAIN) -> list[str]:
    index = layout.read_index(store, domain)
    assert index is not None
    return index.labels()


def assert_index_complete(store: ObjectStore, domain: str = DOMAIN) -> None:
    """Every index entry's bundle and manifest exist, and the bundle hashes to its sha256."""
    index = layout.read_index(store, domain)
    assert index is not None
    for entry in index.versions:
        data = b"".join(store.open_stream(entry.object))
        assert hashlib.sha256(data).hexdigest() == entry.sha256, entry.version
        manifest = layout.read_version_manifest(store, domain, entry.version)
        assert manifest is not None and manifest.sha256 == entry.sha256, entry.version
        assert manifest.object == entry.object, entry.version


def version_keys(store: ObjectStore, version: str, domain: str = DOMAIN) -> set[str]:
    return {
        store.key(domain, version, "bundle.tar.gz"),
        store.key(domain, version, "manifest.json"),
    }


def test_keeps_the_newest_n_and_removes_the_rest_objects_and_index(
    object_store: ObjectStore, tmp_path: Path
) -> None:
    versions = labels(6)
    seed(object_store, tmp_path, versions)
    report = gc(object_store, 2)
    assert listed(object_store) == versions[-2:]
    (result,) = report.domains
    assert [v.version for v in result.removed] == versions[:4]
    keys = set(bucket_listing(object_store.client, object_store.bucket))
    for version in versions[:4]:
        assert not version_keys(object_store, version) & keys
    for version in versions[-2:]:
        assert version_keys(object_store, version) <= keys
    assert_index_complete(object_store)
    journal = layout.read_gc_journal(object_store, DOMAIN)
    assert journal is not None and journal.pending == []
    assert [record.version for record in journal.removed] == versions[:4]
    assert gc(object_store, 2).domains[0].removed == []


def test_current_rollback_target_and_newest_are_never_removed(
    object_store: ObjectStore, tmp_path: Path
) -> None:
    versions = labels(8)
    seed(object_store, tmp_path, versions)
    chart.promote(object_store, DOMAIN, versions[1])
    chart.promote(object_store, DOMAIN, versions[3])  # current; rollback target: versions[1]
    report = gc(object_store, 1)
    assert listed(object_store) == [versions[1], versions[3], versions[-1]]
    kept = {v.version: v.reasons for v in report.domains[0].kept}
    assert CURRENT in kept[versions[3]]
    assert ROLLBACK_TARGET in kept[versions[1]]
    assert DELTA_BASE in kept[versions[-1]] and "newest 1" in kept[versions[-1]]
    assert_index_complete(object_store)
    assert chart.rollback(object_store, DOMAIN).current == versions[1]


def test_protection_rules_without_a_promotion() -> None:
    reasons = protected_versions(["2026-10-02", "2026-10-01", "2026-10-03"], None, DOMAIN, 1)
    assert reasons == {"2026-10-03": (CURRENT, DELTA_BASE, "newest 1")}


def test_dry_run_changes_nothing_and_reports_the_bytes(
    object_store: ObjectStore, tmp_path: Path
) -> None:
    versions = labels(5)
    seed(object_store, tmp_path, versions)
    seed(object_store, tmp_path, labels(2), domain=OTHER)
    before = bucket_listing(object_store.client, object_store.bucket)
    report = gc(object_store, 3, dry_run=True)
    assert bucket_listing(object_store.client, object_store.bucket) == before
    assert [d.domain for d in report.domains] == [OTHER, DOMAIN]
    (docs,) = [d for d in report.domains if d.domain == DOMAIN]
    assert [v.version for v in docs.removed] == versions[:2]
    expected = sum(
        object_store.head(key)["size"]  # type: ignore[index]
        for version in versions[:2]
        for key in version_keys(object_store, version)
    )
    assert report.bytes_freed == docs.bytes_freed == expected > 0
    real = gc(object_store, 3)
    assert real.bytes_freed == expected
    assert [v.version for v in real.domains[1].removed] == versions[:2]


def test_an_interrupted_gc_is_finished_by_the_next_run(
    object_store: ObjectStore, tmp_path: Path
) -> None:
    """A gc killed after writing its journal: the next run (not a dry run) completes it."""
    versions = labels(4)
    seed(object_store, tmp_path, versions)
    index = layout.read_index(object_store, DOMAIN)
    assert index is not None
    doomed = [entry for entry in index.versions if entry.version == versions[0]]
    journal = layout.GcJournal(domain=DOMAIN, pending=doomed)
    object_store.write_json(
        layout.gc_journal_key(object_store, DOMAIN), journal.to_json(), if_match=None
    )
    before = bucket_listing(object_store.client, object_store.bucket)
    dry = gc(object_store, 4, dry_run=True)
    assert dry.domains[0].finished == [versions[0]]
    assert bucket_listing(object_store.client, object_store.bucket) == before
    report = gc(object_store, 4)
    assert report.domains[0].finished == [versions[0]]
    assert listed(object_store) == versions[1:]
    keys = set(bucket_listing(object_store.client, object_store.bucket))
    assert not version_keys(object_store, versions[0]) & keys
    assert_index_complete(object_store)


def test_a_version_being_imported_is_never_touched(
    object_store: ObjectStore, tmp_path: Path
) -> None:
    """Bundle and manifest written, index not yet: gc leaves the objects alone."""
    seed(object_store, tmp_path, labels(3))
    importing = seed_version(object_store, tmp_path, "2026-09-01", in_index=False)
    gc(object_store, 1)
    keys = set(bucket_listing(object_store.client, object_store.bucket))
    assert version_keys(object_store, importing.version) <= keys


def test_a_concurrent_import_is_not_lost(object_store: ObjectStore, tmp_path: Path) -> None:
    """Another writer adds a version between gc's read and its write of index.json: gc
    reads again and the new version stays listed."""
    versions = labels(4)
    seed(object_store, tmp_path, versions)
    late = seed_version(object_store, tmp_path, "2026-10-20", in_index=False)
    added: list[str] = []

    def meanwhile_an_import_lands() -> datetime:
        if not added:
            added.append(late.version)
            key = layout.index_key(object_store, DOMAIN)
            document, etag = object_store.read_json(key)
            assert document is not None
            entry = {
                "version": late.version,
                "sha256": late.sha256,
                "size": late.size,
                "object": late.key,
                "manifest": object_store.key(DOMAIN, late.version, "manifest.json"),
                "imported_at": "2026-10-20T00:00:00Z",
            }
            document["versions"].append(entry)
            object_store.write_json(key, document, if_match=etag)
        return datetime.now(UTC)

    gc(object_store, 2, now=meanwhile_an_import_lands)
    assert added
    assert listed(object_store) == [*versions[-2:], late.version]  # decided before it landed
    assert_index_complete(object_store)


def test_a_version_promoted_while_gc_drops_it_is_put_back_whole(
    object_store: ObjectStore, tmp_path: Path
) -> None:
    """An operator promotes a doomed version after gc planned but before its index write:
    gc puts the version back before deleting anything of it."""
    versions = labels(4)
    seed(object_store, tmp_path, versions)
    promoted: list[str] = []

    def meanwhile_someone_promotes() -> datetime:
        if not promoted:
            promoted.append(versions[0])
            chart.promote(object_store, DOMAIN, versions[0])
        return datetime.now(UTC)

    report = gc(object_store, 1, now=meanwhile_someone_promotes)
    (result,) = report.domains
    assert result.restored == [versions[0]]
    assert [v.version for v in result.removed] == versions[1:3]
    assert PROMOTED_MEANWHILE in {r for v in result.kept for r in v.reasons}
    assert listed(object_store) == [versions[0], versions[-1]]
    assert_index_complete(object_store)
    journal = layout.read_gc_journal(object_store, DOMAIN)
    assert journal is not None and journal.pending == []
    assert versions[0] not in {record.version for record in journal.removed}


def test_values_of_a_removed_version_is_not_found_naming_gc(
    object_store: ObjectStore, target_settings: TargetSettings, tmp_path: Path
) -> None:
    versions = labels(3)
    seed(object_store, tmp_path, versions)
    gc(object_store, 1)
    with pytest.raises(NotFound, match=rf"version {versions[0]} of .* was removed by chart gc at"):
        chart.render_values(object_store, target_settings, DOMAIN, versions[0])


def test_unknown_domain_and_bad_keep(object_store: ObjectStore, tmp_path: Path) -> None:
    seed(object_store, tmp_path, labels(1))
    with pytest.raises(NotFound, match=r"domain nothing\.example has no versions"):
        gc_domain(object_store, "nothing.example", 1)
    with pytest.raises(ConfigError, match="keep must be at least 1"):
        gc(object_store, 0)


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
