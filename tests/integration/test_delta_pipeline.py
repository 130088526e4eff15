"""A version carried as a delta from one side of the gap to the other, as operators run it:
pack the first version whole, import it, bring the receipt back (`transfer ack`), pack the
next as a delta, import it, then render values and `chart check` them. The published object
is the base's object spliced (a tar.gz base): its tree hash is the stored version's, its size
the vendor's bundle's, and its sha256 is in its manifest and the receipt. Each import replays
the pack's recipe (the signed archive): the first over the base that went whole, the next
over that spliced object, which the pack replays from the recipe it kept.

Realistic simulator sites (HTML, CSS/JS, images) with a share of pages changed; a real
store, a real S3 server, real signatures and subprocesses."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from mirror.airgap import layout
from mirror.airgap.s3.objectstore import ObjectStore
from mirror.archive import inspect_archive
from mirror.config import TargetSettings, settings_from_dict
from mirror.store.app import App
from mirror.store.models import Bundle, Version
from mirror.transferset.format import MANIFEST, parse_manifest
from tests.fixtures.cli import mirror_cli
from tests.fixtures.s3 import bucket_listing, gap_sides
from tests.fixtures.versions import add_sim_version, delivered_labels

DOCS = "docs.example.com"
SITE: dict[str, Any] = {"site_size": 6 << 20, "change_share": 0.02}
V1, V2, V3 = "2026-11-20", "2026-11-21", "2026-11-22"


@pytest.mark.slow
def test_a_delta_crosses_the_gap_and_is_spliced_from_its_base_into_the_new_tree(
    tmp_path: Path,
    key_pair: tuple[Path, Path],
    target_settings: TargetSettings,
    object_store: ObjectStore,
    s3_client: Any,
) -> None:
    sides = gap_sides(tmp_path, key_pair, target_settings, presign_ttl="2d")
    connected, airgap, document, usb = (
        sides.connected,
        sides.airgap,
        sides.connected_document,
        sides.usb,
    )

    def connected_side(*args: str) -> Any:
        done = mirror_cli("--config", str(connected), *args)
        assert done.returncode == 0, done.stderr
        return done

    def airgapped_side(*args: str) -> Any:
        done = mirror_cli("--config", str(airgap), *args)
        assert done.returncode == 0, done.stderr
        return done

    _add(document, V1, export_number=0)
    connected_side("transfer", "pack", str(usb / "set-1"))
    airgapped_side("transfer", "import", str(usb / "set-1"))
    connected_side("transfer", "ack", str(usb / "set-1" / "receipt.json"))

    _add(document, V2, export_number=1)
    plan = json.loads(connected_side("--json", "transfer", "pack", "--dry-run").stdout)
    (planned,) = plan["versions"]
    assert planned["carried"] == "delta" and planned["base_version"] == V1
    packed = json.loads(connected_side("--json", "transfer", "pack", str(usb / "set-2")).stdout)
    (item,) = packed["items"]
    assert item["delta"]["base_version"] == V1
    manifest = parse_manifest((usb / "set-2" / MANIFEST).read_bytes())
    delta_item = manifest.items[0]
    assert delta_item.delta is not None and delta_item.delta.spliced
    assert delta_item.delta.archive_sha256 is None  # a splice's is learnt at import
    recipe = delta_item.delta.recipe  # the archive as the pack made it from V1's bundle
    assert recipe is not None and recipe.base_sha256 == _version_row(document, V1)[0]
    bundle_v2 = _bundle_size(document, V2)
    assert delta_item.size <= bundle_v2 * 0.10, (delta_item.size, bundle_v2)

    imported = json.loads(airgapped_side("--json", "transfer", "import", str(usb / "set-2")).stdout)
    (published,) = imported["items"]
    assert published["status"] == "published"
    assert published["tree_sha256"] == delta_item.tree_sha256
    assert list((tmp_path / "work").iterdir()) == []

    stored = layout.read_version_manifest(object_store, DOCS, V2)
    assert stored is not None and (stored.model_extra or {})["delta_base"] == V1
    body = s3_client.get_object(Bucket=target_settings.bucket, Key=stored.object)["Body"].read()
    assert published["sha256"] == stored.sha256 == hashlib.sha256(body).hexdigest()
    assert published["size"] == stored.size == len(body)
    assert (stored.sha256, stored.size) == (recipe.sha256, recipe.size)  # V1 went whole: replayed
    spliced = tmp_path / "spliced.tar.gz"
    spliced.write_bytes(body)
    assert inspect_archive(spliced).tree_sha256 == _tree_sha256(document, V2)
    assert len(body) <= 1.02 * bundle_v2  # the base's own blocks: the vendor's ratio

    values = tmp_path / "values.yaml"
    airgapped_side("chart", "values", DOCS, "--version", V2, "--out", str(values))
    checked = airgapped_side("chart", "check", str(values))
    assert V2 in checked.stdout

    def bundles() -> dict[str, str]:
        listing = bucket_listing(s3_client, target_settings.bucket)
        return {key: etag for key, etag in listing.items() if key.endswith("/bundle.tar.gz")}

    before = bundles()
    again = airgapped_side("--json", "transfer", "import", str(usb / "set-2"), "--allow-replay")
    assert [i["status"] for i in json.loads(again.stdout)["items"]] == ["already there"]
    assert bundles() == before and len(before) == 2
    connected_side("transfer", "ack", str(usb / "set-2" / "receipt.json"))
    app = App(settings_from_dict(document))
    try:
        delivered = delivered_labels(app)
    finally:
        app.close()
    assert delivered[V2] is not None

    # a chain: the next version is spliced from the spliced one (other bytes, same tree)
    _add(document, V3, export_number=2)
    third = json.loads(connected_side("--json", "transfer", "pack", str(usb / "set-3")).stdout)
    assert [i["delta"]["base_version"] for i in third["items"]] == [V2]
    assert parse_manifest((usb / "set-3" / MANIFEST).read_bytes()).items[0].delta.spliced  # type: ignore[union-attr]
    airgapped_side("transfer", "import", str(usb / "set-3"))
    stored3 = layout.read_version_manifest(object_store, DOCS, V3)
    assert stored3 is not None and (stored3.model_extra or {})["delta_base"] == V2
    body3 = s3_client.get_object(Bucket=target_settings.bucket, Key=stored3.object)["Body"].read()
    spliced.write_bytes(body3)
    assert inspect_archive(spliced).tree_sha256 == _tree_sha256(document, V3)
    assert stored3.sha256 == hashlib.sha256(body3).hexdigest()
    recipe3 = parse_manifest((usb / "set-3" / MANIFEST).read_bytes()).items[0].delta.recipe  # type: ignore[union-attr]
    # made from V2's object as the pack made it (its kept recipe), not from V2's bundle
    assert recipe3 is not None and recipe3.base_sha256 == stored.sha256
    assert (stored3.sha256, stored3.size) == (recipe3.sha256, recipe3.size)
    airgapped_side("chart", "values", DOCS, "--version", V3, "--out", str(values))
    assert V3 in airgapped_side("chart", "check", str(values)).stdout
    connected_side("transfer", "ack", str(usb / "set-3" / "receipt.json"))

    airgapped_side("chart", "gc", "--domain", DOCS, "--keep", "1")
    kept = [key.split("/")[-2] for key in bundles()]
    assert V3 in kept and V1 not in kept, kept  # the spliced newest stays, whole
    assert V3 in airgapped_side("chart", "check", str(values)).stdout


def _add(document: dict[str, Any], label: str, *, export_number: int) -> None:
    app = App(settings_from_dict(document))
    try:
        add_sim_version(app, DOCS, label, export_number=export_number, **SITE)
    finally:
        app.close()


def _version_row(document: dict[str, Any], label: str) -> tuple[str, str, int]:
    app = App(settings_from_dict(document))
    try:
        with app.db.session() as session:
            version = session.query(Version).filter_by(domain=DOCS, label=label).one()
            bundle = session.get(Bundle, version.bundle_sha256)
            assert bundle is not None
            return version.bundle_sha256, version.tree_sha256, bundle.size
    finally:
        app.close()


def _bundle_size(document: dict[str, Any], label: str) -> int:
    return _version_row(document, label)[2]


def _tree_sha256(document: dict[str, Any], label: str) -> str:
    return _version_row(document, label)[1]
