"""SIGKILL during `mirror transfer import`, then import again: every version is published exactly
once and the index never lists a half-published version.

The bucket has versioning on, so "exactly once" is checked by the server itself:
every bundle and per-version manifest key must have a single object version and no delete
marker, each key counted by a listing of its own prefix.
MIRROR_FAULT_KILLS (make faults: 100) sets how many kills; each round packs a
fresh set (many small versions and one multipart-sized one) and kills its import
at random points until an import runs through.
"""

from __future__ import annotations

import hashlib
import os
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from mirror.airgap import layout
from mirror.airgap.s3.objectstore import ObjectStore
from mirror.config import TargetSettings, settings_from_dict
from mirror.outbound.pack import pack
from mirror.store.app import App
from tests.fixtures.archives import make_tar_gz
from tests.fixtures.campaign import ONLY_IN_MAKE_FAULTS
from tests.fixtures.cli import mirror_cli, write_config
from tests.fixtures.deltasets import (
    DeltaSpec,
    SetItem,
    delta_item,
    full_item,
    tree_files,
    write_set,
)
from tests.fixtures.kills import killed_when
from tests.fixtures.s3 import bucket_listing, key_versions, transfer_config
from tests.fixtures.versions import add_version

KILLS = int(os.environ.get("MIRROR_FAULT_KILLS", "2"))

pytestmark = [pytest.mark.s3, pytest.mark.slow, pytest.mark.timeout(300 + 30 * KILLS)]
MiB = 1024 * 1024
SMALL_VERSIONS = 6


def check_written_once(client: Any, bucket: str, keys: list[str]) -> None:
    """Each key holds one object version and no delete marker, counted by a listing of its
    own (a paged walk of the whole bucket loses keys on SeaweedFS: tests/fixtures/s3.py)."""
    for key in keys:
        versions, markers = key_versions(client, bucket, key)
        assert (versions, markers) == (1, 0), (
            f"{key} written {versions} times, deleted {markers} times"
        )


def check_index_lists_only_complete_versions(store: ObjectStore, domains: set[str]) -> None:
    for domain in domains:
        index, _ = store.read_json(store.key(domain, "index.json"))
        listed = [entry["version"] for entry in (index or {}).get("versions", [])]
        assert len(listed) == len(set(listed)), f"{domain}: a version is listed twice"
        for entry in (index or {}).get("versions", []):
            bundle = store.head(entry["object"])
            assert bundle is not None, entry
            if bundle["sha256"] is None:  # a spliced object is named by its tree: read it
                assert "tree-sha256" in bundle["metadata"], entry
                bundle["sha256"] = stream_sha256(store, entry["object"])
            assert bundle["sha256"] == entry["sha256"], entry
            assert store.head(entry["manifest"]) is not None, entry


def stream_sha256(store: ObjectStore, key: str) -> str:
    digest = hashlib.sha256()
    for chunk in store.open_stream(key):
        digest.update(chunk)
    return digest.hexdigest()


def imported_sequences(store: ObjectStore) -> set[int]:
    state, _ = store.read_json(layout.state_key(store))
    return {entry["sequence"] for entry in (state or {}).get("imported", [])}


def uploads_in_progress(client: Any, bucket: str) -> set[str]:
    answer = client.list_multipart_uploads(Bucket=bucket)
    return {upload["UploadId"] for upload in answer.get("Uploads", [])}


def kill_at_a_random_point(
    set_dir: Path, config: Path, client: Any, bucket: str, rng: random.Random, seen: list[str]
) -> bool:
    """Start an import and SIGKILL it once 1-4 more keys have appeared, or (half the time)
    shortly after a new multipart upload began; True when it finished before the kill."""
    before = len(bucket_listing(client, bucket))
    stale = uploads_in_progress(client, bucket)
    landed_goal = rng.randint(1, 4)
    in_multipart = rng.random() < 0.5
    delay = rng.uniform(0.0, 0.3)

    def reached() -> str | None:
        if len(bucket_listing(client, bucket)) - before >= landed_goal:
            return "after keys"
        if in_multipart and uploads_in_progress(client, bucket) - stale:
            time.sleep(delay)
            return "in multipart"
        return None

    where = import_killed_when(set_dir, config, reached, poll=0.01)
    if where is None:
        return True
    seen.append(where)
    return False


def import_killed_when(
    set_dir: Path, config: Path, reached: Callable[[], str | None], *, poll: float
) -> str | None:
    """Run the import and SIGKILL it as soon as `reached()` names a point; that point, or
    None when the import finished first."""
    return killed_when(
        lambda _pid: reached(),
        "--config",
        str(config),
        "transfer",
        "import",
        str(set_dir),
        poll=poll,
    )


@pytest.mark.fault(
    f"kill: transfer import loop, {KILLS} SIGKILLs", "every version published exactly once"
)
def test_kills_during_import_publish_every_version_exactly_once(
    tmp_path: Path,
    key_pair: tuple[Path, Path],
    object_store: ObjectStore,
    target_settings: TargetSettings,
) -> None:
    client, bucket = object_store.client, object_store.bucket
    client.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    store_dir = tmp_path / "store"
    store_dir.mkdir()
    app = App(settings_from_dict(transfer_config(store_dir, key_pair)))
    airgap = transfer_config(tmp_path / "airgap-store", key_pair, target_settings)
    del airgap["transfer"]
    config = write_config(tmp_path / "airgap.toml", airgap)
    rng = random.Random(int(os.environ.get("MIRROR_FAULT_SEED", "4242")))
    small_domains = ["api.example.com", "docs.example.com"]
    big_domain = "a.example.com"  # packed (and so imported) first: kills land in its upload
    domains = {*small_domains, big_domain}
    expected: set[tuple[str, str]] = set()
    kills = 0
    round_number = 0
    where: list[str] = []
    try:
        while kills < KILLS:
            round_number += 1
            day = f"2026-11-{round_number:02d}"
            for index in range(SMALL_VERSIONS):
                domain = small_domains[index % 2]
                label = day if index < 2 else f"{day}.{index // 2 + 1}"
                add_version(app, domain, label, payload_size=64 * 1024)
                expected.add((domain, label))
            add_version(app, big_domain, day, payload_size=18 * MiB)
            expected.add((big_domain, day))
            set_dir = tmp_path / f"set-{round_number}"
            packed = pack(app, set_dir, max_size=8 * MiB)
            assert packed.sequence == round_number
            while kills < KILLS:
                finished = kill_at_a_random_point(set_dir, config, client, bucket, rng, where)
                check_index_lists_only_complete_versions(object_store, domains)
                if finished:
                    break
                kills += 1
                if round_number in imported_sequences(object_store):
                    break  # killed after the import state was written: the import was whole
            if round_number not in imported_sequences(object_store):
                result = mirror_cli("--config", str(config), "transfer", "import", str(set_dir))
                assert result.returncode == 0, result.stderr
            assert (set_dir / "receipt.json").exists()
    finally:
        app.close()

    check_index_lists_only_complete_versions(object_store, domains)
    check_written_once(
        client,
        bucket,
        [
            object_store.key(domain, label, name)
            for domain, label in sorted(expected)
            for name in ("bundle.tar.gz", "manifest.json")
        ],
    )
    listed: set[tuple[str, str]] = set()
    for domain in domains:
        index, _ = object_store.read_json(object_store.key(domain, "index.json"))
        assert index is not None
        listed |= {(domain, entry["version"]) for entry in index["versions"]}
    assert listed == expected
    assert imported_sequences(object_store) == set(range(1, round_number + 1))
    assert kills == KILLS
    if KILLS >= 4:
        assert "in multipart" in where, where


# ---- a version carried as a delta (issue 13) --------------------------------------------------

DELTA_DOMAIN = "docs.example.com"
DELTA_POINTS = ("rebuilding", "in multipart", "after the bundle")
ATTEMPTS = 4


def delta_tree(root: Path, big: bytes, round_number: int) -> Path:
    """A site: one large unchanged asset and 120 pages, 12 of them changed every round."""
    root.mkdir(parents=True)
    (root / "assets").mkdir()
    (root / "assets" / "big.bin").write_bytes(big)
    for page in range(120):
        folder = root / "guides" / f"page-{page:03d}"
        folder.mkdir(parents=True)
        generation = round_number if page % 10 == 0 else 0
        text = f"<p>page {page}, generation {generation}</p>\n" * 200
        (folder / "index.html").write_text(text)
    return root


def learnt(store: ObjectStore, item: SetItem) -> str:
    """A spliced version's digest, learnt by its import: its manifest's, of its signed tree."""
    manifest = layout.read_version_manifest(store, item.domain, item.version)
    assert manifest is not None and manifest.tree_sha256 == item.tree_sha256
    return manifest.sha256


def kill_delta_import(
    set_dir: Path, config: Path, work: Path, store: ObjectStore, point: str, bundle: str
) -> str:
    """Start the import and SIGKILL it at `point`; returns where it was killed ("end": it
    finished first)."""
    client, bucket = store.client, store.bucket
    stale_uploads = uploads_in_progress(client, bucket)

    def reached() -> str | None:
        if point == "rebuilding" and any((d / ".lock").exists() for d in work.iterdir()):
            return point
        if point == "in multipart" and uploads_in_progress(client, bucket) - stale_uploads:
            return point
        if point == "after the bundle" and store.head(bundle) is not None:
            return point
        return None

    return import_killed_when(set_dir, config, reached, poll=0.005) or "end"


@pytest.mark.fault(
    "13 delta: SIGKILL while rebuilding, in its multipart upload, after its bundle",
    "the second import publishes the version exactly once, hashing right",
)
@pytest.mark.parametrize(
    "kind",
    [
        pytest.param("spliced", id="spliced"),
        pytest.param("recipe", id="recipe replayed", marks=ONLY_IN_MAKE_FAULTS),
    ],
)
def test_a_killed_delta_import_publishes_the_version_exactly_once(
    kind: str,
    tmp_path: Path,
    key_pair: tuple[Path, Path],
    signing: Any,
    object_store: ObjectStore,
    target_settings: TargetSettings,
    fault_got: list[str],
) -> None:
    client, bucket = object_store.client, object_store.bucket
    client.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    big = os.urandom(20 * MiB)
    base_root = delta_tree(tmp_path / "v1", big, 0)
    base_bundle = tmp_path / "v1.tar.gz"
    make_tar_gz(
        base_bundle, {f.path: (base_root / f.path).read_bytes() for f in tree_files(base_root)}
    )
    previous = write_set(
        tmp_path / "set-1",
        [full_item(DELTA_DOMAIN, "2026-11-01", base_bundle, "2026-11-01T03:00:00Z")],
        signing,
    )
    work = tmp_path / "work"
    work.mkdir()
    airgap = transfer_config(tmp_path / "airgap-store", key_pair, target_settings)
    del airgap["transfer"]
    airgap["target"]["work_dir"] = str(work)
    config = write_config(tmp_path / "airgap.toml", airgap)
    first = mirror_cli("--config", str(config), "transfer", "import", str(tmp_path / "set-1"))
    assert first.returncode == 0, first.stderr
    where: list[str] = []
    published: dict[str, str] = {}
    number = 1
    for point in DELTA_POINTS:
        for _ in range(ATTEMPTS):  # a new version each time, until the kill lands at `point`
            number += 1
            version = f"2026-11-{number:02d}"
            new_root = delta_tree(tmp_path / f"v{number}", big, number)
            exported = f"2026-11-{number:02d}T03:00:00Z"
            item = delta_item(
                DELTA_DOMAIN,
                version,
                "2026-11-01",
                base_root,
                new_root,
                exported,
                tmp_path / "b",
                DeltaSpec(recipe_base=base_bundle if kind == "recipe" else None),
            )
            set_dir = tmp_path / f"set-{number}"
            previous = write_set(
                set_dir, [item], signing, sequence=number, previous=(number - 1, previous)
            )
            bundle = object_store.key(DELTA_DOMAIN, version, "bundle.tar.gz")
            killed = kill_delta_import(set_dir, config, work, object_store, point, bundle)
            check_index_lists_only_complete_versions(object_store, {DELTA_DOMAIN})
            if number not in imported_sequences(object_store):
                again = mirror_cli("--config", str(config), "transfer", "import", str(set_dir))
                assert again.returncode == 0, again.stderr
            assert item.delta is not None
            published[version] = learnt(object_store, item)
            if item.delta.recipe is not None:  # replayed: the signed archive, uploaded as known
                assert published[version] == item.delta.recipe.sha256
                head = object_store.head(bundle)
                assert head is not None and head["sha256"] == item.delta.recipe.sha256
            if killed != "end":
                where.append(killed)
                break

    fault_got.append(f"killed: {', '.join(where) or 'never'}")
    # The next import of a delta removes what the killed ones left in the work directory.
    replay = mirror_cli(
        "--config", str(config), "transfer", "import", "--allow-replay", str(set_dir)
    )
    assert replay.returncode == 0, replay.stderr
    assert list(work.iterdir()) == []
    for version, sha256 in published.items():
        bundle = object_store.key(DELTA_DOMAIN, version, "bundle.tar.gz")
        manifest = object_store.key(DELTA_DOMAIN, version, "manifest.json")
        check_written_once(client, bucket, [bundle, manifest])
        assert stream_sha256(object_store, bundle) == sha256
    index, _ = object_store.read_json(object_store.key(DELTA_DOMAIN, "index.json"))
    assert index is not None
    assert [v["version"] for v in index["versions"]] == ["2026-11-01", *published]
    assert "rebuilding" in where and "in multipart" in where, where
