"""The tampering battery: every way of fooling the importer ends in exit 5 and an unchanged bucket.

Three sets are packed once (s1 imported into each test's fresh bucket as the
baseline, s2 the victim, s3 a newer set and a donor of parts); each case copies
s2, damages it, and runs the real `mirror transfer import` against SeaweedFS.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from mirror.airgap.importer import import_set
from mirror.airgap.s3.objectstore import ObjectStore
from mirror.archive import tree_hash
from mirror.config import TargetSettings, settings_from_dict
from mirror.outbound.pack import pack
from mirror.store.app import App
from mirror.transferset.delta._formats import TreeFile
from mirror.transferset.format import MANIFEST, SIGNATURE, SpliceRecipe, parse_manifest
from mirror.transferset.keys import generate_keypair, load_signing_key, load_trusted_keys
from tests.fixtures.archives import make_tar_gz
from tests.fixtures.cli import mirror_cli, write_config
from tests.fixtures.deltasets import (
    DeltaSpec,
    RecipeDamage,
    delta_item,
    full_item,
    tree_files,
    unpack,
    write_set,
)
from tests.fixtures.s3 import bucket_listing, new_key_pair, transfer_config
from tests.fixtures.versions import add_version

pytestmark = pytest.mark.s3

MiB = 1024 * 1024
DOCS = "docs.example.com"


@dataclass(frozen=True)
class Sets:
    root: Path
    key_pair: tuple[Path, Path]
    s1: Path
    s2: Path
    s3: Path


@pytest.fixture(scope="module")
def sets(tmp_path_factory: pytest.TempPathFactory) -> Sets:
    root = tmp_path_factory.mktemp("tampering")
    key_pair = new_key_pair(root)
    (root / "store").mkdir()
    app = App(settings_from_dict(transfer_config(root / "store", key_pair)))
    try:
        add_version(app, DOCS, "2026-11-20")
        pack(app, root / "s1")
        add_version(app, DOCS, "2026-11-21", payload_size=2 * MiB + 4096)
        add_version(app, "api.example.com", "2026-11-21")
        pack(app, root / "s2", max_size=MiB)
        add_version(app, DOCS, "2026-11-22", payload_size=2 * MiB + 4096)
        pack(app, root / "s3", max_size=MiB)
    finally:
        app.close()
    return Sets(root, key_pair, root / "s1", root / "s2", root / "s3")


def big_item_parts(set_dir: Path) -> list[Path]:
    manifest = parse_manifest((set_dir / MANIFEST).read_bytes())
    item = max(manifest.items, key=lambda i: i.size)
    return [set_dir / part.name for part in item.parts]


def flip(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))


def resign(set_dir: Path, key_path: Path, change: Callable[[dict[str, Any]], None]) -> None:
    document = json.loads((set_dir / MANIFEST).read_bytes())
    change(document)
    data = json.dumps(document, sort_keys=True, separators=(",", ":")).encode()
    (set_dir / MANIFEST).write_bytes(data)
    (set_dir / SIGNATURE).write_bytes(load_signing_key(key_path).signature_document(data))
    (set_dir / "SHA256SUMS").unlink(missing_ok=True)  # stale now; it is optional


def flipped_blob_byte(victim: Path, sets: Sets) -> str:
    part = big_item_parts(victim)[1]
    flip(part, 1000)
    return part.name


def flipped_manifest_byte(victim: Path, sets: Sets) -> str:
    data = (victim / MANIFEST).read_bytes()
    flip(victim / MANIFEST, data.index(b'"size":') + 7)
    return SIGNATURE


def unknown_key(victim: Path, sets: Sets) -> str:
    other = generate_keypair(victim.parent / "intruder")
    resign(victim, other.private_path, lambda d: d.update(key_id=other.key_id))
    return "not trusted"


def missing_part(victim: Path, sets: Sets) -> str:
    part = big_item_parts(victim)[1]
    part.unlink()
    return part.name


def swapped_part(victim: Path, sets: Sets) -> str:
    mine = big_item_parts(victim)[1]
    donor = big_item_parts(sets.s3)[1]
    assert mine.stat().st_size == donor.stat().st_size
    shutil.copyfile(donor, mine)
    return mine.name


def padded_blob(victim: Path, sets: Sets) -> str:
    last = big_item_parts(victim)[-1]
    with open(last, "ab") as handle:
        handle.write(b"\0" * 16)
    return last.name


def escaping_item(victim: Path, sets: Sets) -> str:
    def escape(document: dict[str, Any]) -> None:
        document["items"][0]["version"] = "../../../../tmp/escape"

    resign(victim, sets.key_pair[0], escape)
    return "not a version label"


def escaping_part(victim: Path, sets: Sets) -> str:
    def escape(document: dict[str, Any]) -> None:
        document["items"][0]["parts"][0]["name"] = "blobs/../../outside"

    resign(victim, sets.key_pair[0], escape)
    return "is not the expected"


def unsigned(victim: Path, sets: Sets) -> str:
    (victim / SIGNATURE).unlink()
    return SIGNATURE


def tampering(damage: Callable[[Path, Sets], str]) -> Any:
    case = f"tamper: {damage.__name__.replace('_', ' ')}"
    fault = pytest.mark.fault(case, "exit 5 naming it, one line, bucket unchanged")
    return pytest.param(damage, marks=fault, id=damage.__name__)


@pytest.mark.parametrize(
    "damage",
    [
        tampering(damage)
        for damage in (
            flipped_blob_byte,
            flipped_manifest_byte,
            unknown_key,
            missing_part,
            swapped_part,
            padded_blob,
            escaping_item,
            escaping_part,
            unsigned,
        )
    ],
)
def test_a_damaged_set_is_refused_and_the_bucket_is_unchanged(
    damage: Callable[[Path, Sets], str],
    sets: Sets,
    tmp_path: Path,
    object_store: ObjectStore,
    target_settings: TargetSettings,
    fault_got: list[str],
) -> None:
    config = baseline(sets, tmp_path, object_store, target_settings)
    victim = tmp_path / "victim"
    shutil.copytree(sets.s2, victim)
    named = damage(victim, sets)
    before = bucket_listing(object_store.client, object_store.bucket)
    result = mirror_cli("--config", str(config), "transfer", "import", str(victim))
    fault_got.append(f"exit {result.returncode}")
    assert result.returncode == 5, result.stderr
    assert named in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert bucket_listing(object_store.client, object_store.bucket) == before
    uploads = object_store.client.list_multipart_uploads(Bucket=object_store.bucket)
    assert uploads.get("Uploads", []) == []
    assert not (victim / "receipt.json").exists()


@pytest.mark.fault("tamper: replayed set", "exit 5 (replay), bucket unchanged")
def test_a_replayed_set_is_refused(
    sets: Sets, tmp_path: Path, object_store: ObjectStore, target_settings: TargetSettings
) -> None:
    config = baseline(sets, tmp_path, object_store, target_settings)
    replay = tmp_path / "replay"
    shutil.copytree(sets.s1, replay)
    before = bucket_listing(object_store.client, object_store.bucket)
    result = mirror_cli("--config", str(config), "transfer", "import", str(replay))
    assert result.returncode == 5, result.stderr
    assert "already imported (replay)" in result.stderr
    assert bucket_listing(object_store.client, object_store.bucket) == before


@pytest.mark.fault("tamper: older set after a newer one", "exit 5 (rollback), bucket unchanged")
def test_an_older_set_after_a_newer_one_is_refused(
    sets: Sets, tmp_path: Path, object_store: ObjectStore, target_settings: TargetSettings
) -> None:
    config = baseline(sets, tmp_path, object_store, target_settings)
    trusted = load_trusted_keys([sets.key_pair[1]])
    newer = tmp_path / "newer"
    shutil.copytree(sets.s3, newer)
    import_set(object_store, newer, trusted)
    older = tmp_path / "older"
    shutil.copytree(sets.s2, older)
    before = bucket_listing(object_store.client, object_store.bucket)
    result = mirror_cli("--config", str(config), "transfer", "import", str(older))
    assert result.returncode == 5, result.stderr
    assert "rollback" in result.stderr
    assert bucket_listing(object_store.client, object_store.bucket) == before


@pytest.mark.fault("tamper: none (control)", "exit 0, both versions in the index")
def test_the_untouched_set_imports(
    sets: Sets, tmp_path: Path, object_store: ObjectStore, target_settings: TargetSettings
) -> None:
    """The control: the same steps without damage succeed, so the battery can fail."""
    config = baseline(sets, tmp_path, object_store, target_settings)
    good = tmp_path / "good"
    shutil.copytree(sets.s2, good)
    result = mirror_cli("--config", str(config), "transfer", "import", str(good))
    assert result.returncode == 0, result.stderr
    index, _ = object_store.read_json(object_store.key(DOCS, "index.json"))
    assert index is not None
    assert [v["version"] for v in index["versions"]] == ["2026-11-20", "2026-11-21"]


def baseline(
    sets: Sets, tmp_path: Path, store: ObjectStore, target_settings: TargetSettings
) -> Path:
    """Import s1 into the fresh bucket; return the air-gapped side's config file."""
    first = tmp_path / "s1"
    shutil.copytree(sets.s1, first)
    import_set(store, first, load_trusted_keys([sets.key_pair[1]]))
    return airgap_config(tmp_path, sets.key_pair, target_settings)


def airgap_config(
    tmp_path: Path,
    key_pair: tuple[Path, Path],
    target_settings: TargetSettings,
    work: Path | None = None,
) -> Path:
    """The air-gapped side's config file (no signing key; `work` as its work directory)."""
    document = transfer_config(tmp_path / "airgap-store", key_pair, target_settings)
    del document["transfer"]
    if work is not None:
        document["target"]["work_dir"] = str(work)
    return write_config(tmp_path / "airgap.toml", document)


# ---- deltas (issue 13): a correctly signed set around a wrong delta ---------------------------

DELTA_BIG = os.urandom(9 * MiB)  # unchanged, so never carried; the rebuild is a multipart upload
DELTA_BASE = {
    "index.html": b"<h1>home</h1>\n",
    "guides/a.html": b"<p>a</p>\n" * 50,
    "guides/b.html": b"<p>b</p>\n" * 50,
    "assets/big.bin": DELTA_BIG,
}
DELTA_NEW = {
    **DELTA_BASE,
    "index.html": b"<h1>home, changed</h1>\n",
    "guides/b.html": b"<p>b, changed</p>\n" * 50,
}
DELTA_OTHER_BASE = {**DELTA_BASE, "guides/a.html": b"<p>another a</p>\n"}
BASE_VERSION, NEW_VERSION = "2026-11-20", "2026-11-21"
NEW_EXPORTED = "2026-11-21T03:00:00Z"


@dataclass(frozen=True)
class DeltaTrees:
    root: Path
    key_pair: tuple[Path, Path]
    base_set: Path
    base_manifest_sha256: str
    base: Path
    new: Path
    other_base: Path


@pytest.fixture(scope="module")
def delta_trees(tmp_path_factory: pytest.TempPathFactory) -> DeltaTrees:
    root = tmp_path_factory.mktemp("delta-tampering")
    key_pair = new_key_pair(root)
    trees = {}
    for name, files in (("base", DELTA_BASE), ("new", DELTA_NEW), ("other", DELTA_OTHER_BASE)):
        bundle = make_tar_gz(root / f"{name}.tar.gz", files)
        trees[name] = unpack(bundle, root / name)
    full = full_item(DOCS, BASE_VERSION, root / "base.tar.gz", "2026-11-20T03:00:00Z")
    digest = write_set(root / "base-set", [full], load_signing_key(key_pair[0]))
    return DeltaTrees(
        root,
        key_pair,
        root / "base-set",
        digest,
        trees["base"],
        trees["new"],
        trees["other"],
    )


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _honest(trees: DeltaTrees) -> list[TreeFile]:
    return tree_files(trees.new)


def wrong_base(trees: DeltaTrees) -> tuple[DeltaSpec, str | None, list[str]]:
    return DeltaSpec(), "other", ["wrong base", BASE_VERSION]


def base_missing(trees: DeltaTrees) -> tuple[DeltaSpec, str | None, list[str]]:
    spec = DeltaSpec(delta={"base_version": "2026-11-19"})
    remedy = "mirror transfer pack --full --from-set 2 OUT"
    return spec, None, [f"{DOCS} 2026-11-19", "is not in", remedy]


def missing_content(trees: DeltaTrees) -> tuple[DeltaSpec, str | None, list[str]]:
    spec = DeltaSpec(carried=[_sha(DELTA_NEW["guides/b.html"])])
    return spec, None, ["index.html", "its content", "nothing was published"]


def swapped_content(trees: DeltaTrees) -> tuple[DeltaSpec, str | None, list[str]]:
    index, page = DELTA_NEW["index.html"], DELTA_NEW["guides/b.html"]
    spec = DeltaSpec(content={_sha(index): page, _sha(page): index})
    return spec, None, ["from the delta", "nothing was published"]


def file_list_not_the_signed_tree(trees: DeltaTrees) -> tuple[DeltaSpec, str | None, list[str]]:
    files = _honest(trees)
    files = [f if f.path != "guides/a.html" else replace(f, path="guides/aa.html") for f in files]
    return DeltaSpec(files=files), None, ["the tree of the delta's file list hashes to"]


def path_escaping_the_root(trees: DeltaTrees) -> tuple[DeltaSpec, str | None, list[str]]:
    escape = TreeFile("../../etc/cron.d/evil", 4, _sha(b"evil"))
    files = [*_honest(trees), escape]
    signed = tree_hash((f.path, f.sha256) for f in files)
    spec = DeltaSpec(files=files, carried=[*honest_carried(trees), escape.sha256])
    spec.content[escape.sha256] = b"evil"
    spec.tree_sha256 = signed
    return spec, None, ["escapes the root"]


def honest_carried(trees: DeltaTrees) -> list[str]:
    base = {f.sha256 for f in tree_files(trees.base)}
    return list(dict.fromkeys(f.sha256 for f in _honest(trees) if f.sha256 not in base))


DeltaDamage = Callable[[DeltaTrees], tuple[DeltaSpec, "str | None", list[str]]]
BOTH_KINDS = (
    wrong_base,
    base_missing,
    missing_content,
    swapped_content,
    file_list_not_the_signed_tree,
    path_escaping_the_root,
)


def _recipe_spec(trees: DeltaTrees, damage: RecipeDamage | None = None) -> DeltaSpec:
    """A spliced delta carrying the recipe the pack makes over the base's bundle."""
    return DeltaSpec(spliced=True, recipe_base=trees.root / "base.tar.gz", recipe_damage=damage)


def _wrong_digest(segments: bytes, literals: bytes, recipe: SpliceRecipe) -> RecipeParts:
    return segments, literals, recipe.model_copy(update={"sha256": "0" * 64})


def _literal_flipped(segments: bytes, literals: bytes, recipe: SpliceRecipe) -> RecipeParts:
    return segments, literals[:-9] + bytes([literals[-9] ^ 1]) + literals[-8:], recipe


def _copy_past_the_base(segments: bytes, literals: bytes, recipe: SpliceRecipe) -> RecipeParts:
    document = json.loads(segments)
    document["segments"][0][1] = recipe.base_size
    return json.dumps(document).encode(), literals, recipe


def _size_past_any_disk(segments: bytes, literals: bytes, recipe: SpliceRecipe) -> RecipeParts:
    """A size the upload would cut into parts of terabytes, each a buffer of its size."""
    return segments, literals, recipe.model_copy(update={"size": 2**62})


def _other_base(segments: bytes, literals: bytes, recipe: SpliceRecipe) -> RecipeParts:
    """A recipe over other base bytes: the import splices instead (no damage, a fallback)."""
    return segments, literals, recipe.model_copy(update={"base_sha256": "1" * 64})


RecipeParts = tuple[bytes, bytes, SpliceRecipe]
REMEDY = "mirror transfer pack --full --from-set 2 OUT"


def recipe_signed_with_a_wrong_digest(trees: DeltaTrees) -> tuple[DeltaSpec, str | None, list[str]]:
    spec = _recipe_spec(trees, _wrong_digest)
    return spec, None, ["the archive of the delta's recipe hashes to", NEW_VERSION, REMEDY]


def recipe_with_a_literal_flipped(trees: DeltaTrees) -> tuple[DeltaSpec, str | None, list[str]]:
    spec = _recipe_spec(trees, _literal_flipped)
    return spec, None, ["the archive of the delta's recipe hashes to", NEW_VERSION, REMEDY]


def recipe_copying_past_the_base(trees: DeltaTrees) -> tuple[DeltaSpec, str | None, list[str]]:
    spec = _recipe_spec(trees, _copy_past_the_base)
    return spec, None, ["does not read the base forward", NEW_VERSION, REMEDY]


def recipe_naming_a_size_past_any_disk(
    trees: DeltaTrees,
) -> tuple[DeltaSpec, str | None, list[str]]:
    spec = _recipe_spec(trees, _size_past_any_disk)
    return spec, None, ["and the literals its delta carries can make", NEW_VERSION, REMEDY]


def recipe_blob_cut_short(trees: DeltaTrees) -> tuple[DeltaSpec, str | None, list[str]]:
    """A blob signed as it is, cut short: read on the replay's path, not the splice's."""
    spec = _recipe_spec(trees)
    spec.blob_damage = lambda blob: blob[: len(blob) // 2]
    return spec, None, ["the delta blob is not a readable tar.gz", REMEDY]


RECIPE_DAMAGES = (
    recipe_blob_cut_short,
    recipe_signed_with_a_wrong_digest,
    recipe_with_a_literal_flipped,
    recipe_copying_past_the_base,
    recipe_naming_a_size_past_any_disk,
)


def delta_tampering(damage: DeltaDamage, *, spliced: bool) -> Any:
    kind = "spliced delta" if spliced else "delta"
    case = f"13 {kind}: {damage.__name__.replace('_', ' ')}"
    fault = pytest.mark.fault(case, "exit 5, bucket unchanged")
    return pytest.param(damage, spliced, marks=fault, id=f"{kind}-{damage.__name__}")


def signed_delta_set(
    trees: DeltaTrees,
    tmp_path: Path,
    object_store: ObjectStore,
    spec: DeltaSpec,
    base_root: Path | None = None,
) -> Path:
    """The base set imported into the bucket, then set 2: the new version as a delta of
    `base_root` (the base's own tree by default) made by `spec`, correctly signed."""
    first = tmp_path / "base-set"
    shutil.copytree(trees.base_set, first)
    import_set(object_store, first, load_trusted_keys([trees.key_pair[1]]))
    item = delta_item(
        DOCS,
        NEW_VERSION,
        BASE_VERSION,
        base_root or trees.base,
        trees.new,
        NEW_EXPORTED,
        tmp_path / "b",
        spec,
    )
    delta_set = tmp_path / "delta-set"
    previous = (1, trees.base_manifest_sha256)
    write_set(delta_set, [item], load_signing_key(trees.key_pair[0]), sequence=2, previous=previous)
    return delta_set


@pytest.mark.parametrize(
    ("damage", "spliced"),
    [delta_tampering(damage, spliced=True) for damage in (*BOTH_KINDS, *RECIPE_DAMAGES)],
)
def test_a_wrong_delta_is_refused_and_the_bucket_is_unchanged(
    damage: DeltaDamage,
    spliced: bool,
    delta_trees: DeltaTrees,
    tmp_path: Path,
    object_store: ObjectStore,
    target_settings: TargetSettings,
    fault_got: list[str],
) -> None:
    trees = delta_trees
    spec, base_tree, named = damage(trees)
    spec.spliced = spliced
    base_root = trees.other_base if base_tree == "other" else trees.base
    victim = signed_delta_set(trees, tmp_path, object_store, spec, base_root)
    work = tmp_path / "work"
    work.mkdir()
    config = airgap_config(tmp_path, trees.key_pair, target_settings, work)
    client, bucket = object_store.client, object_store.bucket
    before = bucket_listing(client, bucket)

    result = mirror_cli("--config", str(config), "transfer", "import", str(victim))

    fault_got.append(f"exit {result.returncode}: {result.stderr.strip()[:90]}")
    assert result.returncode == 5, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    for words in named:
        assert words in result.stderr, result.stderr
    assert bucket_listing(client, bucket) == before
    assert not client.list_multipart_uploads(Bucket=bucket).get("Uploads")
    assert not (victim / "receipt.json").exists()
    assert list(work.iterdir()) == []


@pytest.mark.fault("13 recipe: none (control), and one over other base bytes", "exit 0")
@pytest.mark.parametrize("damage", [None, _other_base], ids=["replayed", "spliced instead"])
def test_an_honest_recipe_is_replayed_and_one_over_other_bytes_is_spliced_instead(
    damage: RecipeDamage | None,
    delta_trees: DeltaTrees,
    tmp_path: Path,
    object_store: ObjectStore,
    target_settings: TargetSettings,
) -> None:
    """The control of the battery above; and a recipe whose base is not the bucket's object
    (a base published from a delta, say) costs only speed: the file-by-file splice, which
    makes the same bytes from the same base."""
    trees = delta_trees
    good = signed_delta_set(trees, tmp_path, object_store, _recipe_spec(trees, damage))
    recipe = parse_manifest((good / MANIFEST).read_bytes()).items[0].delta.recipe  # type: ignore[union-attr]
    assert recipe is not None
    config = airgap_config(tmp_path, trees.key_pair, target_settings)

    result = mirror_cli("--config", str(config), "--json", "transfer", "import", str(good))

    assert result.returncode == 0, result.stderr
    (published,) = json.loads(result.stdout)["items"]
    assert published["sha256"] == recipe.sha256  # the same bytes either way: deterministic
    head = object_store.head(published["object"])
    assert head is not None
    # a replayed archive is uploaded as known bytes, a splice's named by its tree
    assert (head["sha256"] == recipe.sha256) is (damage is None), head["metadata"]
    body = object_store.client.get_object(Bucket=object_store.bucket, Key=published["object"])
    data = body["Body"].read()
    assert hashlib.sha256(data).hexdigest() == published["sha256"]
    unpacked = tmp_path / "published"
    (tmp_path / "published.tar.gz").write_bytes(data)
    assert tree_files(unpack(tmp_path / "published.tar.gz", unpacked)) == tree_files(trees.new)


def _byte_replaced(original: bytes) -> bytes:
    return bytes([original[0]]) + b"\0" + original[2:]


def _truncated(original: bytes) -> bytes:
    return original[: len(original) // 2]


@pytest.mark.fault(
    "13 recipe: the base object replaced or truncated in the bucket",
    "exit 5, the bucket unchanged",
)
@pytest.mark.parametrize("replace", [_byte_replaced, _truncated], ids=["replaced", "truncated"])
def test_a_base_object_replaced_under_an_honest_recipe_publishes_nothing(
    replace: Callable[[bytes], bytes],
    delta_trees: DeltaTrees,
    tmp_path: Path,
    object_store: ObjectStore,
    target_settings: TargetSettings,
) -> None:
    """The bucket's base object is not what its manifest names (the recipe's base): the
    replay reads it, and the base's check refuses it, naming it, before anything is
    published; one cut short too (the replay meets its end before its recipe's)."""
    trees = delta_trees
    victim = signed_delta_set(trees, tmp_path, object_store, _recipe_spec(trees))
    client, bucket = object_store.client, object_store.bucket
    key = object_store.key(DOCS, BASE_VERSION, "bundle.tar.gz")
    original = client.get_object(Bucket=bucket, Key=key)["Body"].read()
    client.put_object(Bucket=bucket, Key=key, Body=replace(original))
    config = airgap_config(tmp_path, trees.key_pair, target_settings)
    before = bucket_listing(client, bucket)

    result = mirror_cli("--config", str(config), "transfer", "import", str(victim))

    assert result.returncode == 5, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "does not match its manifest" in result.stderr, result.stderr
    assert "--full --from-set 2" in result.stderr, result.stderr
    assert bucket_listing(client, bucket) == before


@pytest.mark.fault("13 delta: none (control)", "exit 0, the rebuilt version in the index")
def test_the_untouched_delta_imports(
    delta_trees: DeltaTrees,
    tmp_path: Path,
    object_store: ObjectStore,
    target_settings: TargetSettings,
) -> None:
    """The control: the same steps with an honest delta succeed, so the battery can fail."""
    trees = delta_trees
    good = signed_delta_set(trees, tmp_path, object_store, DeltaSpec())
    config = airgap_config(tmp_path, trees.key_pair, target_settings)
    result = mirror_cli("--config", str(config), "transfer", "import", str(good))
    assert result.returncode == 0, result.stderr
    index, _ = object_store.read_json(object_store.key(DOCS, "index.json"))
    assert index is not None
    assert [v["version"] for v in index["versions"]] == [BASE_VERSION, NEW_VERSION]


@pytest.mark.fault(
    "13 delta: a tree archive an earlier release packed (the way dropped)",
    "exit 2, one line naming transfer pack --full, bucket unchanged",
)
def test_a_tree_archive_delta_is_refused_with_the_remedy_before_any_upload(
    delta_trees: DeltaTrees,
    tmp_path: Path,
    object_store: ObjectStore,
    target_settings: TargetSettings,
) -> None:
    """docs/delta.md: the tree-archive way is gone; its sets are refused before anything is
    uploaded, in one line naming the remedy, which then carries the version whole."""
    trees = delta_trees
    victim = signed_delta_set(trees, tmp_path, object_store, DeltaSpec(spliced=False))
    config = airgap_config(tmp_path, trees.key_pair, target_settings)
    before = bucket_listing(object_store.client, object_store.bucket)

    result = mirror_cli("--config", str(config), "transfer", "import", str(victim))

    assert result.returncode == 2, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "its delta is a tree archive" in result.stderr, result.stderr
    assert "mirror transfer pack --full --from-set 2 OUT" in result.stderr, result.stderr
    assert bucket_listing(object_store.client, object_store.bucket) == before


@pytest.mark.fault(
    "13 spliced delta: signed with an archive digest, or a tree-archive delta without one",
    "exit 5, bucket unchanged",
)
@pytest.mark.parametrize("spliced", [False, True], ids=["delta", "spliced delta"])
def test_a_delta_entry_of_the_wrong_shape_is_refused_before_anything(
    spliced: bool,
    delta_trees: DeltaTrees,
    tmp_path: Path,
    object_store: ObjectStore,
    target_settings: TargetSettings,
) -> None:
    """A signer's manifest whose delta entry is neither kind (`spliced` flipped): refused
    when the manifest is read, the bucket as it was."""
    trees = delta_trees
    victim = signed_delta_set(trees, tmp_path, object_store, DeltaSpec(spliced=spliced))

    def flipped(document: dict[str, Any]) -> None:
        (entry,) = document["items"]
        entry["delta"]["spliced"] = not spliced

    resign(victim, trees.key_pair[0], flipped)
    config = airgap_config(tmp_path, trees.key_pair, target_settings)
    before = bucket_listing(object_store.client, object_store.bucket)

    result = mirror_cli("--config", str(config), "transfer", "import", str(victim))

    assert result.returncode == 5, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "manifest.json: items.0.delta: a " in result.stderr, result.stderr
    assert ("tree-archive" if spliced else "spliced") in result.stderr, result.stderr
    assert bucket_listing(object_store.client, object_store.bucket) == before
