"""Issue 18 class 1: every refusal of a delta names a remedy, and the remedy works.

Each case packs a version as a delta for real (simulator sites, a real store and key), makes
the import refuse it the way an operator or a damaged bucket would (the base never imported,
its object deleted, damaged or replaced, its manifest naming another tree) or the way a
broken packer would (a correctly signed set whose delta cannot be rebuilt), then takes the
remedy from the one error line, runs it on the connected side exactly as printed (only OUT,
the set's directory, filled in), imports the set it writes and finds the version in the
bucket with the connected side's tree."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import shlex
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from mirror.airgap import layout
from mirror.airgap.s3.objectstore import ObjectStore
from mirror.archive import inspect_archive
from mirror.config import TargetSettings, settings_from_dict
from mirror.store.app import App
from mirror.store.models import Version
from mirror.transferset.format import MANIFEST, parse_manifest
from mirror.transferset.keys import load_signing_key
from tests.fixtures.archives import Entry, make_tar_gz, write_tar
from tests.fixtures.campaign import ONLY_IN_MAKE_FAULTS
from tests.fixtures.cli import mirror_cli, write_config
from tests.fixtures.deltasets import (
    DeltaSpec,
    delta_item,
    full_item,
    tree_files,
    unpack,
    write_set,
)
from tests.fixtures.s3 import gap_sides
from tests.fixtures.versions import add_sim_version

pytestmark = pytest.mark.s3

DOCS = "docs.example.com"
V1, V2 = "2026-11-20", "2026-11-21"
SITE: dict[str, Any] = {"pages": 60, "page_size": 8192}
REMEDY = re.compile(r"run `(mirror transfer pack [^`]*)` on the connected side")


@dataclass
class Gap:
    """Both sides of the gap: configs, the medium, the connected app's settings, the bucket."""

    tmp: Path
    connected: Path
    airgap: Path
    usb: Path
    document: dict[str, Any]
    store: ObjectStore
    key_pair: tuple[Path, Path]

    def connected_side(self, *args: str) -> Any:
        done = mirror_cli("--config", str(self.connected), *args)
        assert done.returncode == 0, done.stderr
        return done

    def airgapped_side(self, *args: str) -> Any:
        return mirror_cli("--config", str(self.airgap), *args)

    def version(self, label: str) -> tuple[Path, str]:
        """(bundle path in the store, tree sha256) of a connected-side version."""
        app = App(settings_from_dict(self.document))
        try:
            with app.db.session() as session:
                row = session.query(Version).filter_by(domain=DOCS, label=label).one()
                return app.store.blob_path(row.bundle_sha256), row.tree_sha256
        finally:
            app.close()


@pytest.fixture
def gap(
    tmp_path: Path,
    key_pair: tuple[Path, Path],
    target_settings: TargetSettings,
    object_store: ObjectStore,
) -> Gap:
    sides = gap_sides(tmp_path, key_pair, target_settings)
    return Gap(
        tmp_path,
        sides.connected,
        sides.airgap,
        sides.usb,
        sides.connected_document,
        object_store,
        key_pair,
    )


def _add(gap: Gap, label: str, export_number: int) -> None:
    app = App(settings_from_dict(gap.document))
    try:
        add_sim_version(app, DOCS, label, export_number=export_number, **SITE)
    finally:
        app.close()


def _put(store: ObjectStore, key: str, body: bytes, metadata: dict[str, str]) -> None:
    store.client.put_object(Bucket=store.bucket, Key=key, Body=body, Metadata=metadata)


def _rewrite_manifest(store: ObjectStore, **fields: Any) -> None:
    """Replace V1's manifest.json behind the import's back (a hand edit, a bad restore)."""
    stored = layout.read_version_manifest(store, DOCS, V1)
    assert stored is not None
    changed = stored.model_copy(update=fields)
    _put(store, layout.version_manifest_key(store, DOCS, V1), changed.to_bytes(), {})


# ---- how the delta comes to be refused ---------------------------------------------------------


def base_never_imported(gap: Gap) -> None:
    """Set 1 (the base) was packed but lost on the way: never imported."""


def base_object_deleted(gap: Gap) -> None:
    gap.store.client.delete_object(
        Bucket=gap.store.bucket, Key=layout.bundle_key(gap.store, DOCS, V1, "tar.gz")
    )


def base_manifest_names_another_tree(gap: Gap) -> None:
    _rewrite_manifest(gap.store, tree_sha256="e" * 64)


def base_object_damaged(gap: Gap) -> None:
    key = layout.bundle_key(gap.store, DOCS, V1, "tar.gz")
    body = bytearray(b"".join(gap.store.open_stream(key)))
    body[len(body) // 2] ^= 0x01
    head = gap.store.head(key)
    assert head is not None
    _put(gap.store, key, bytes(body), head["metadata"])


def base_object_holds_another_tree(gap: Gap) -> None:
    """The object and its manifest's sha256 and size replaced together; the tree left as is."""
    other = make_tar_gz(gap.tmp / "other.tar.gz", {"index.html": b"<h1>another site</h1>\n"})
    body = other.read_bytes()
    sha256 = hashlib.sha256(body).hexdigest()
    _put(gap.store, layout.bundle_key(gap.store, DOCS, V1, "tar.gz"), body, {"sha256": sha256})
    _rewrite_manifest(gap.store, sha256=sha256, size=len(body))


def base_object_rewritten_with_a_link(gap: Gap) -> None:
    """The base's files all there, and a symlink beside them, its manifest rewritten to
    match: the splice would keep the link in the new version."""
    bundle, _ = gap.version(V1)
    root = unpack(bundle, gap.tmp / "linked")
    files = [Entry(f.path, (root / f.path).read_bytes()) for f in tree_files(root)]
    link = Entry("evil", kind="symlink", target="/etc/shadow")
    other = write_tar(gap.tmp / "linked.tar.gz", [*files, link], compresslevel=1)
    body = other.read_bytes()
    sha256 = hashlib.sha256(body).hexdigest()
    _put(gap.store, layout.bundle_key(gap.store, DOCS, V1, "tar.gz"), body, {"sha256": sha256})
    _rewrite_manifest(gap.store, sha256=sha256, size=len(body))


Spec = Callable[[Path, Path], DeltaSpec | None]


def _forged(gap: Gap, spec: Spec, *, with_base: bool = False) -> None:
    """Set 2 written again by a broken packer: the same key, sequence and chain, the same
    versions, a delta that cannot be rebuilt."""
    set_1, set_2 = gap.usb / "set-1", gap.usb / "set-2"
    packed = parse_manifest((set_2 / MANIFEST).read_bytes())
    (item,) = packed.items
    base_bundle, _ = gap.version(V1)
    new_bundle, _ = gap.version(V2)
    base_root = unpack(base_bundle, gap.tmp / "forge-base")
    new_root = unpack(new_bundle, gap.tmp / "forge-new")
    forged = delta_item(
        DOCS,
        V2,
        V1,
        base_root,
        new_root,
        item.exported_at,
        gap.tmp / "forge",
        spec(base_root, new_root),
    )
    items = [forged]
    if with_base:
        shutil.copy(base_bundle, gap.tmp / "base.tar.gz")
        items.insert(0, full_item(DOCS, V1, gap.tmp / "base.tar.gz", item.exported_at))
    shutil.rmtree(set_2)
    first = hashlib.sha256((set_1 / MANIFEST).read_bytes()).hexdigest()
    write_set(set_2, items, load_signing_key(gap.key_pair[0]), sequence=2, previous=(1, first))


def base_in_the_same_set(gap: Gap) -> None:
    _forged(gap, lambda _base, _new: None, with_base=True)


def contents_neither_carried_nor_in_the_base(gap: Gap) -> None:
    _forged(gap, lambda _base, _new: DeltaSpec(carried=[]))


def delta_rebuilds_another_archive(gap: Gap) -> None:
    """The pack's recipe over the bucket's base object, signed with another archive's digest."""
    bundle, _ = gap.version(V1)
    wrong = lambda seg, lit, entry: (seg, lit, entry.model_copy(update={"sha256": "0" * 64}))  # noqa: E731
    _forged(gap, lambda _base, _new: DeltaSpec(recipe_base=bundle, recipe_damage=wrong))


def file_list_not_the_signed_tree(gap: Gap) -> None:
    def renamed(_base: Path, new: Path) -> DeltaSpec:
        files = tree_files(new)
        files[0] = dataclasses.replace(files[0], path=files[0].path + ".renamed")
        return DeltaSpec(files=files)

    _forged(gap, renamed)


def carried_contents_swapped(gap: Gap) -> None:
    def swapped(base: Path, new: Path) -> DeltaSpec:
        held = {entry.sha256 for entry in tree_files(base)}
        fresh = [entry for entry in tree_files(new) if entry.sha256 not in held]
        one, two = fresh[0], next(e for e in fresh if e.sha256 != fresh[0].sha256)
        data = {e.sha256: (new / e.path).read_bytes() for e in (one, two)}
        return DeltaSpec(content={one.sha256: data[two.sha256], two.sha256: data[one.sha256]})

    _forged(gap, swapped)


Refusal = Callable[[Gap], None]


# One refusal of each kind (no base, a damaged base, a rebuild that misses) runs in make test;
# every refusal prints the same remedy, and make faults (MIRROR_FAULT_ALL=1) runs them all.
IN_MAKE_TEST = {"base_never_imported", "base_object_damaged", "delta_rebuilds_another_archive"}


def refusal(damage: Refusal, refused: str) -> Any:
    case = f"18.1 delta refused ({damage.__name__.replace('_', ' ')}): its printed remedy"
    fault = pytest.mark.fault(case, "exit 5 naming a remedy; run as printed: version in bucket")
    marks = [fault]
    if damage.__name__ not in IN_MAKE_TEST:
        marks.append(ONLY_IN_MAKE_FAULTS)
    return pytest.param(damage, refused, marks=marks, id=damage.__name__)


@pytest.mark.parametrize(
    ("damage", "refused"),
    [
        refusal(base_never_imported, "which is not in"),
        refusal(base_object_deleted, "is missing"),
        refusal(base_manifest_names_another_tree, "wrong base"),
        refusal(base_object_damaged, "does not match its manifest"),
        refusal(base_object_holds_another_tree, "not the base tree"),
        refusal(base_object_rewritten_with_a_link, "evil"),
        refusal(base_in_the_same_set, "of the same set"),
        refusal(contents_neither_carried_nor_in_the_base, "neither in the delta nor in the base"),
        refusal(delta_rebuilds_another_archive, "the archive of the delta's recipe hashes to"),
        refusal(file_list_not_the_signed_tree, "the tree of the delta's file list hashes to"),
        refusal(carried_contents_swapped, "from the delta"),
    ],
)
def test_a_refused_delta_names_a_remedy_that_ends_with_the_version_in_the_bucket(
    damage: Refusal, refused: str, gap: Gap, fault_got: list[str]
) -> None:
    _add(gap, V1, 0)
    gap.connected_side("transfer", "pack", str(gap.usb / "set-1"))
    if damage is not base_never_imported:
        first = gap.airgapped_side("transfer", "import", str(gap.usb / "set-1"))
        assert first.returncode == 0, first.stderr
    _add(gap, V2, 1)
    packed = json.loads(
        gap.connected_side("--json", "transfer", "pack", str(gap.usb / "set-2")).stdout
    )
    assert packed["items"][0]["delta"]["base_version"] == V1
    damage(gap)

    refusal_run = gap.airgapped_side("transfer", "import", str(gap.usb / "set-2"))
    lines = refusal_run.stderr.strip().splitlines()
    fault_got.append(f"exit {refusal_run.returncode}")
    assert refusal_run.returncode == 5, refusal_run.stderr
    assert len(lines) == 1 and refused in lines[0], refusal_run.stderr
    assert layout.read_version_manifest(gap.store, DOCS, V2) is None
    named = REMEDY.search(lines[0])
    assert named is not None, f"no remedy in: {lines[0]}"
    printed = shlex.split(named.group(1))
    assert printed[:3] == ["mirror", "transfer", "pack"]
    out = gap.usb / "remedy"
    if "OUT" not in printed:  # pack needs its directory: a remedy without one cannot run
        printed.append("OUT")
    remedied = gap.connected_side(*[str(out) if word == "OUT" else word for word in printed[1:]])
    fault_got.append(f"`{named.group(1)}`: {remedied.stdout.splitlines()[0]}")

    imported = gap.airgapped_side("--json", "transfer", "import", str(out))
    assert imported.returncode == 0, imported.stderr
    statuses = {i["version"]: i["status"] for i in json.loads(imported.stdout)["items"]}
    assert statuses[V2] == "published"
    stored = layout.read_version_manifest(gap.store, DOCS, V2)
    _, tree = gap.version(V2)
    assert stored is not None and stored.tree_sha256 == tree
    body = b"".join(gap.store.open_stream(stored.object))
    assert hashlib.sha256(body).hexdigest() == stored.sha256
    (gap.tmp / "published.tar.gz").write_bytes(body)
    assert inspect_archive(gap.tmp / "published.tar.gz").tree_sha256 == tree
    fault_got.append("version in the bucket")


@pytest.mark.fault(
    "18.1 full copy (pack --all --full) of versions already published from a delta",
    "exit 0, already there (same tree), nothing overwritten",
)
def test_a_full_copy_of_a_version_published_from_a_delta_is_already_there(
    gap: Gap, fault_got: list[str]
) -> None:
    _add(gap, V1, 0)
    gap.connected_side("transfer", "pack", str(gap.usb / "set-1"))
    assert gap.airgapped_side("transfer", "import", str(gap.usb / "set-1")).returncode == 0
    _add(gap, V2, 1)
    gap.connected_side("transfer", "pack", str(gap.usb / "set-2"))
    delta = gap.airgapped_side("transfer", "import", str(gap.usb / "set-2"))
    assert delta.returncode == 0, delta.stderr
    rebuilt = layout.read_version_manifest(gap.store, DOCS, V2)
    assert rebuilt is not None and (rebuilt.model_extra or {}).get("delta_base") == V1

    gap.connected_side("transfer", "pack", "--all", "--full", str(gap.usb / "set-3"))
    again = gap.airgapped_side("--json", "transfer", "import", str(gap.usb / "set-3"))
    fault_got.append(f"exit {again.returncode}")
    assert again.returncode == 0, again.stderr
    items = json.loads(again.stdout)["items"]
    assert [(i["version"], i["status"]) for i in items] == [
        (V1, "already there"),
        (V2, "already there"),
    ]
    assert items[1]["sha256"] == rebuilt.sha256  # what the bucket holds, not the bundle
    assert layout.read_version_manifest(gap.store, DOCS, V2) == rebuilt
    acked = gap.connected_side("transfer", "ack", str(gap.usb / "set-3" / "receipt.json"))
    assert f"delivered {DOCS} {V2}" in acked.stdout


@pytest.mark.fault(
    "18.1 delta refused for a set of one of several sites: its printed remedy",
    "the remedy names --site; run as printed: version in the bucket",
)
def test_the_remedy_for_a_named_sites_delta_names_the_site_and_runs_as_printed(
    gap: Gap, fault_got: list[str]
) -> None:
    """With several `[[sites]]` a pack without `--site` refuses (exit 2), so the remedy the
    air-gapped side prints for a set packed for a named site must name that site."""
    sites = [{"name": name, "trusted_keys": [str(gap.key_pair[1])]} for name in ("a", "b")]
    write_config(gap.connected, {**gap.document, "sites": sites})
    _add(gap, V1, 0)
    gap.connected_side("transfer", "pack", "--site", "a", str(gap.usb / "set-1"))
    assert gap.airgapped_side("transfer", "import", str(gap.usb / "set-1")).returncode == 0
    gap.connected_side("transfer", "ack", str(gap.usb / "set-1" / "receipt.json"))
    _add(gap, V2, 1)
    packed = json.loads(
        gap.connected_side(
            "--json", "transfer", "pack", "--site", "a", str(gap.usb / "set-2")
        ).stdout
    )
    assert packed["items"][0]["delta"]["base_version"] == V1
    base_object_deleted(gap)

    refused = gap.airgapped_side("transfer", "import", str(gap.usb / "set-2"))
    assert refused.returncode == 5, refused.stderr
    named = REMEDY.search(refused.stderr)
    assert named is not None, refused.stderr
    fault_got.append(f"`{named.group(1)}`")
    printed = shlex.split(named.group(1))
    assert printed[3:5] == ["--site", "a"], printed
    out = gap.usb / "remedy"
    gap.connected_side(*[str(out) if word == "OUT" else word for word in printed[1:]])
    imported = gap.airgapped_side("--json", "transfer", "import", str(out))
    assert imported.returncode == 0, imported.stderr
    statuses = {i["version"]: i["status"] for i in json.loads(imported.stdout)["items"]}
    assert statuses[V2] == "published"
    fault_got.append("version in the bucket")
