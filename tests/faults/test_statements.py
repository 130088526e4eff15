"""Issue 38 classes 3 and 4: statements and bytes that disagree, and publishing order.

Every set here is correctly signed by a trusted key (what a packer with a bug, or a
compromised one, would make), so only comparing what a statement or manifest says with the
bytes it describes catches it. Each refusal is exit 5 with the bucket unchanged: no object
of the set, not even a bundle, is left behind. The real `mirror transfer import` runs
against SeaweedFS.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from mirror.airgap.importer import import_set
from mirror.airgap.layout import Index, IndexEntry, VersionManifest
from mirror.airgap.provenance import RECORD_IDENTITY, check_in_bucket, check_object
from mirror.airgap.s3.objectstore import ObjectStore
from mirror.archive import inspect_archive
from mirror.config import TargetSettings
from mirror.errors import IntegrityError
from mirror.transferset.keys import generate_keypair, load_signing_key, load_trusted_keys
from mirror.transferset.provenance import sign_statement, statement
from tests.fixtures.archives import make_tar_gz
from tests.fixtures.cli import mirror_cli, write_config
from tests.fixtures.deltasets import (
    DeltaSpec,
    SetItem,
    Statement,
    delta_item,
    full_item,
    unpack,
    write_set,
)
from tests.fixtures.s3 import bucket_listing, new_key_pair, transfer_config

pytestmark = pytest.mark.s3

DOCS = "docs.example.com"
V0, V1, V2 = "2026-11-19", "2026-11-20", "2026-11-21"
SITE = {
    "index.html": b"<h1>home</h1>\n",
    "guides/a.html": b"<p>a</p>\n" * 50,
    "guides/b.html": b"<p>b</p>\n" * 400,
}
SITE0 = {**SITE, "guides/a.html": b"<p>an older a</p>\n" * 40}
SITE2 = {**SITE, "guides/a.html": b"<p>a, changed</p>\n" * 50}


def config(
    tmp_path: Path,
    target: TargetSettings,
    *public: Path,
    work: Path | None = None,
    receipt: Path | None = None,
) -> Path:
    """The air-gapped side's config, trusting `public` (the first pair's key when none);
    signing its verification records with `receipt`, when given."""
    document = transfer_config(tmp_path / "airgap-store", (public[0], public[0]), target)
    del document["transfer"]
    if receipt is not None:
        document["transfer"] = {"signing_key": str(receipt)}
    document["target"]["transfer_keys"] = [str(p) for p in public]
    if work is not None:
        document["target"]["work_dir"] = str(work)
    return write_config(tmp_path / "airgap.toml", document)


def item(tmp_path: Path, version: str, files: dict[str, bytes]) -> SetItem:
    bundle = make_tar_gz(tmp_path / f"{version}.tar.gz", files)
    return full_item(DOCS, version, bundle, f"{version}T03:00:00Z")


def import_cli(config_file: Path, set_dir: Path) -> Any:
    return mirror_cli("--config", str(config_file), "transfer", "import", str(set_dir))


def refused_unchanged(
    result: Any, store: ObjectStore, before: dict[str, str], got: list[str]
) -> str:
    """Exit 5, one line, and the bucket as it was before the import: nothing published."""
    stderr = result.stderr.strip()
    got.append(f"exit {result.returncode}: {stderr[:90]}")
    assert result.returncode == 5, stderr
    assert len(stderr.splitlines()) == 1, stderr
    assert bucket_listing(store.client, store.bucket) == before
    assert not store.client.list_multipart_uploads(Bucket=store.bucket).get("Uploads")
    return stderr


# ---- class 3: the import compares the statement with the bytes -------------------------------


def _another_bundle(one: SetItem, other: SetItem) -> Statement:
    """Statement and entry both about another bundle (of the same version and tree)."""
    return Statement.honest(one, subject_sha256=other.blob.sha256)


def _another_label(one: SetItem, other: SetItem) -> Statement:
    return Statement.honest(one, subject_name=f"{DOCS}/{other.version}/bundle.tar.gz")


def _another_domain(one: SetItem, other: SetItem) -> Statement:
    return Statement.honest(one, subject_name=f"docs.other.test/{one.version}/bundle.tar.gz")


def _predicate_of_another(one: SetItem, other: SetItem) -> Statement:
    honest = Statement.honest(one)
    return replace(honest, predicate={**honest.predicate, "version": other.version})


STATEMENT_LIES = [_another_bundle, _another_label, _another_domain, _predicate_of_another]


@pytest.mark.fault(
    "38.3 a carried statement naming another bundle, label or domain",
    "exit 5 before anything is published",
)
@pytest.mark.parametrize("lie", STATEMENT_LIES, ids=lambda f: f.__name__.strip("_"))
def test_a_statement_about_something_else_is_refused_by_the_import(
    lie: Callable[[SetItem, SetItem], Statement],
    tmp_path: Path,
    object_store: ObjectStore,
    target_settings: TargetSettings,
    fault_got: list[str],
) -> None:
    private, public = new_key_pair(tmp_path)
    one, other = item(tmp_path, V1, SITE), item(tmp_path, V0, SITE0)
    victim = tmp_path / "set"
    write_set(victim, [replace(one, statement=lie(one, other))], load_signing_key(private))
    before = bucket_listing(object_store.client, object_store.bucket)
    result = import_cli(config(tmp_path, target_settings, public), victim)
    stderr = refused_unchanged(result, object_store, before, fault_got)
    assert "intoto.json" in stderr


def _published(tmp_path: Path, store: ObjectStore, private: Path, public: Path) -> SetItem:
    """V1 imported whole with its honest statement."""
    one = item(tmp_path, V1, SITE)
    first = tmp_path / "s1"
    write_set(first, [replace(one, statement=Statement.honest(one))], load_signing_key(private))
    import_set(store, first, load_trusted_keys([public]))
    return one


def _lying_about_its_tree(tmp_path: Path) -> SetItem:
    """V1's bundle, its manifest entry and its honest statement both naming V0's tree."""
    one, other = item(tmp_path, V1, SITE), item(tmp_path, V0, SITE0)
    lie = replace(one, tree_sha256=other.tree_sha256)
    return replace(lie, statement=Statement.honest(lie))


@pytest.mark.fault(
    "38.3 a whole item whose manifest and statement name another tree than its bundle holds",
    "exit 5 before anything is published",
)
def test_a_whole_item_whose_signed_tree_is_not_its_bundles_is_refused_by_the_import(
    tmp_path: Path,
    object_store: ObjectStore,
    target_settings: TargetSettings,
    fault_got: list[str],
) -> None:
    """W4: the tree is hashed as the bundle is uploaded; the honest item before it in the
    same set is not published either (its upload is aborted with the rest)."""
    private, public = new_key_pair(tmp_path)
    honest = item(tmp_path, V2, SITE2)
    victim = tmp_path / "set"
    write_set(victim, [honest, _lying_about_its_tree(tmp_path)], load_signing_key(private))
    before = bucket_listing(object_store.client, object_store.bucket)
    result = import_cli(config(tmp_path, target_settings, public), victim)
    stderr = refused_unchanged(result, object_store, before, fault_got)
    one = inspect_archive(tmp_path / f"{V1}.tar.gz").tree_sha256
    assert f"{DOCS} {V1}" in stderr or V1 in stderr, stderr
    assert f"holds tree {one[:12]}" in stderr, stderr


def _another_tree_said(tmp_path: Path, store: ObjectStore, one: SetItem, private: Path) -> str:
    """V1 published honestly, then its manifest's tree and a statement signed by the trusted
    key both made to name V0's tree: they agree with each other, not with the object."""
    other = item(tmp_path, V0, SITE0).tree_sha256
    described, _ = store.read_json(store.key(DOCS, V1, "manifest.json"))
    assert described is not None
    described["tree_sha256"] = other
    store.client.put_object(Bucket=store.bucket, Key=store.key(DOCS, V1, "manifest.json"),
                            Body=json.dumps(described).encode())  # fmt: skip
    said = Statement.honest(replace(one, tree_sha256=other))
    envelope = sign_statement(
        statement(said.subject_name, said.subject_sha256, said.predicate), load_signing_key(private)
    )
    key = store.key(DOCS, V1, "provenance.intoto.json")
    store.client.put_object(Bucket=store.bucket, Key=key, Body=envelope)
    return other


@pytest.mark.fault(
    "38.3 a bucket whose manifest and statement name another tree than the object holds",
    "chart check --provenance: exit 5 naming the object's tree",
)
def test_a_signed_tree_the_object_does_not_hold_is_found_by_the_provenance_check(
    tmp_path: Path, object_store: ObjectStore, fault_got: list[str]
) -> None:
    private, public = new_key_pair(tmp_path)
    one = _published(tmp_path, object_store, private, public)
    other = _another_tree_said(tmp_path, object_store, one, private)
    trusted = load_trusted_keys([public])
    proven = check_in_bucket(object_store, DOCS, V1, trusted)  # they agree with each other
    assert proven.predicate["tree_sha256"] == other
    with pytest.raises(IntegrityError, match="not the tree its provenance signs") as refused:
        check_object(object_store, DOCS, V1, proven)
    fault_got.append(f"exit {refused.value.exit_code}: {refused.value.message[:80]}")
    assert refused.value.exit_code == 5 and one.tree_sha256[:16] in refused.value.message


@pytest.mark.fault(
    "38.3 a statement in the bucket naming another label or domain (chart check --provenance)",
    "IntegrityError (exit 5) naming the statement's subject",
)
@pytest.mark.parametrize("lie", [_another_label, _another_domain], ids=["label", "domain"])
def test_a_statement_in_the_bucket_about_another_version_is_refused_by_the_check(
    lie: Callable[[SetItem, SetItem], Statement],
    tmp_path: Path,
    object_store: ObjectStore,
    fault_got: list[str],
) -> None:
    private, public = new_key_pair(tmp_path)
    one = _published(tmp_path, object_store, private, public)
    trusted = load_trusted_keys([public])
    assert check_in_bucket(object_store, DOCS, V1, trusted).sha256 == one.blob.sha256
    said = lie(one, item(tmp_path, V0, SITE0))
    forged = sign_statement(
        statement(said.subject_name, said.subject_sha256, said.predicate),
        load_signing_key(private),
    )
    key = object_store.key(DOCS, V1, "provenance.intoto.json")
    object_store.client.put_object(Bucket=object_store.bucket, Key=key, Body=forged)
    with pytest.raises(IntegrityError, match="subject") as refused:
        check_in_bucket(object_store, DOCS, V1, trusted)
    fault_got.append(f"exit {refused.value.exit_code}: {refused.value.message[:80]}")
    assert refused.value.exit_code == 5


@pytest.mark.fault(
    "38.3 a spliced delta over a base replaced consistently (object and manifest digest)",
    "exit 5 naming the base's tree, nothing published",
)
def test_a_spliced_delta_over_a_consistently_replaced_base_is_refused(
    tmp_path: Path,
    object_store: ObjectStore,
    target_settings: TargetSettings,
    fault_got: list[str],
) -> None:
    """V1's object and its manifest's digest replaced by V0's: the digests agree, the tree
    does not; V2 changes the one file V0 and V1 differ in, so the splice alone would publish
    the right tree over the wrong base and say nothing."""
    private, public = new_key_pair(tmp_path)
    key = load_signing_key(private)
    old, base = item(tmp_path, V0, SITE0), item(tmp_path, V1, SITE)
    digest = write_set(tmp_path / "s1", [old, base], key)
    import_set(object_store, tmp_path / "s1", load_trusted_keys([public]))
    new = make_tar_gz(tmp_path / "new.tar.gz", SITE2)
    delta = delta_item(
        DOCS,
        V2,
        V1,
        unpack(tmp_path / f"{V1}.tar.gz", tmp_path / "base-tree"),
        unpack(new, tmp_path / "new-tree"),
        f"{V2}T03:00:00Z",
        tmp_path / "b",
        DeltaSpec(spliced=True),
    )
    write_set(tmp_path / "s2", [delta], key, sequence=2, previous=(1, digest))
    _replace_base(object_store)
    work = tmp_path / "work"
    work.mkdir()
    before = bucket_listing(object_store.client, object_store.bucket)
    result = import_cli(config(tmp_path, target_settings, public, work=work), tmp_path / "s2")
    stderr = refused_unchanged(result, object_store, before, fault_got)
    assert "tree" in stderr and "--full --from-set 2" in stderr


def _replace_base(store: ObjectStore) -> None:
    """V1's object holds V0's bytes, and V1's manifest names their digest."""
    client, bucket = store.client, store.bucket
    old_key, base_key = (store.key(DOCS, v, "bundle.tar.gz") for v in (V0, V1))
    client.copy_object(Bucket=bucket, Key=base_key, CopySource={"Bucket": bucket, "Key": old_key})
    old, _ = store.read_json(store.key(DOCS, V0, "manifest.json"))
    described, _ = store.read_json(store.key(DOCS, V1, "manifest.json"))
    assert old is not None and described is not None
    described.update(sha256=old["sha256"], size=old["size"])
    body = json.dumps(described).encode()
    client.put_object(Bucket=bucket, Key=store.key(DOCS, V1, "manifest.json"), Body=body)


# ---- class 4: every conflict before the first object; "already there" -------------------------


def _conflicting_statement(store: ObjectStore, one: SetItem, private: Path) -> None:
    """A statement about another tree at V1's provenance key, signed by the trusted key."""
    said = Statement.honest(one)
    predicate = {**said.predicate, "tree_sha256": "0" * 64}
    envelope = sign_statement(
        statement(said.subject_name, said.subject_sha256, predicate), load_signing_key(private)
    )
    key = store.key(DOCS, V1, "provenance.intoto.json")
    store.client.put_object(Bucket=store.bucket, Key=key, Body=envelope)


def _conflicting_manifest(store: ObjectStore, one: SetItem, private: Path) -> None:
    """A well-formed manifest of another site at V1's manifest key (no object of V1 there)."""
    document = VersionManifest(
        domain=DOCS,
        version=V1,
        object=store.key(DOCS, V1, "bundle.tar.gz"),
        sha256="1" * 64,
        size=10,
        archive_format="tar.gz",
        tree_sha256="0" * 64,
        exported_at=one.exported_at,
        imported_at=one.exported_at,
        transfer_sequence=1,
        source_id="another-connected-side",
    )
    key = store.key(DOCS, V1, "manifest.json")
    store.client.put_object(Bucket=store.bucket, Key=key, Body=document.to_bytes())


def _conflicting_record(store: ObjectStore, one: SetItem, private: Path) -> None:
    """A verification record about another object at V1's record key (issue 38 P11)."""
    key = store.key(DOCS, V1, "verification.intoto.json")
    metadata = {RECORD_IDENTITY: "2" * 64}
    store.client.put_object(Bucket=store.bucket, Key=key, Body=b"{}", Metadata=metadata)


def _conflicting_index(store: ObjectStore, one: SetItem, private: Path) -> None:
    """An index listing V1 with another sha256 (its manifest deleted by a bucket writer)."""
    entry = IndexEntry(
        version=V1,
        sha256="3" * 64,
        size=10,
        object=store.key(DOCS, V1, "bundle.tar.gz"),
        manifest=store.key(DOCS, V1, "manifest.json"),
        imported_at=one.exported_at,
    )
    body = Index(domain=DOCS, versions=[entry]).to_bytes()
    store.client.put_object(Bucket=store.bucket, Key=store.key(DOCS, "index.json"), Body=body)


@pytest.mark.fault(
    "38.4 a conflicting statement, manifest, record or index entry at the version's keys",
    "exit 5 before the bundle is written: no orphan object",
)
@pytest.mark.parametrize(
    "conflict",
    [_conflicting_statement, _conflicting_manifest, _conflicting_record, _conflicting_index],
    ids=["statement", "manifest", "record", "index"],
)
def test_a_conflict_in_the_bucket_refuses_before_the_bundle_is_written(
    conflict: Callable[[ObjectStore, SetItem, Path], None],
    tmp_path: Path,
    object_store: ObjectStore,
    target_settings: TargetSettings,
    fault_got: list[str],
) -> None:
    private, public = new_key_pair(tmp_path)
    one = item(tmp_path, V1, SITE)
    victim = tmp_path / "set"
    write_set(victim, [replace(one, statement=Statement.honest(one))], load_signing_key(private))
    conflict(object_store, one, private)
    before = bucket_listing(object_store.client, object_store.bucket)
    result = import_cli(config(tmp_path, target_settings, public, receipt=private), victim)
    refused_unchanged(result, object_store, before, fault_got)
    assert object_store.head(object_store.key(DOCS, V1, "bundle.tar.gz")) is None


@pytest.mark.fault(
    "38.4 a version already in the bucket carried again after a transfer key rotation",
    "exit 0, already there; the first statement kept",
)
def test_a_version_signed_again_by_a_rotated_key_is_already_there(
    tmp_path: Path,
    object_store: ObjectStore,
    target_settings: TargetSettings,
    fault_got: list[str],
) -> None:
    for side in ("old", "new"):
        (tmp_path / side).mkdir()
    old_private, old_public = new_key_pair(tmp_path / "old")
    made = generate_keypair(tmp_path / "new" / "transfer")
    one = item(tmp_path, V1, SITE)
    first = tmp_path / "s1"
    digest = write_set(
        first, [replace(one, statement=Statement.honest(one))], load_signing_key(old_private)
    )
    import_set(object_store, first, load_trusted_keys([old_public]))
    statement_key = object_store.key(DOCS, V1, "provenance.intoto.json")
    kept = object_store.client.get_object(Bucket=object_store.bucket, Key=statement_key)
    kept_bytes = kept["Body"].read()
    again = tmp_path / "s2"
    new_key = load_signing_key(made.private_path)
    write_set(
        again,
        [replace(one, statement=Statement.honest(one))],
        new_key,
        sequence=2,
        previous=(1, digest),
    )
    trusting = config(tmp_path, target_settings, old_public, made.public_path)
    result = mirror_cli("--config", str(trusting), "--json", "transfer", "import", str(again))
    fault_got.append(f"exit {result.returncode}: {result.stderr.strip()[:80]}")
    assert result.returncode == 0, result.stderr
    (published,) = json.loads(result.stdout)["items"]
    assert published["status"] == "already there"
    held = object_store.client.get_object(Bucket=object_store.bucket, Key=statement_key)
    assert held["Body"].read() == kept_bytes


@pytest.mark.fault(
    "38.4 the old transfer key retired from target.transfer_keys, its version carried again",
    "exit 5, nothing published, naming the remedy; the remedy run: exit 0, already there",
)
def test_a_version_of_a_retired_key_names_the_remedy_and_the_remedy_works(
    tmp_path: Path,
    object_store: ObjectStore,
    target_settings: TargetSettings,
    fault_got: list[str],
) -> None:
    """Trial P9 (G4): the refusal said "find out who wrote" it, pointing at an attacker where
    there was a rotation; it names the trust setting now, and doing what it says imports."""
    for side in ("old", "new"):
        (tmp_path / side).mkdir()
    old_private, old_public = new_key_pair(tmp_path / "old")
    made = generate_keypair(tmp_path / "new" / "transfer")
    one = item(tmp_path, V1, SITE)
    said = [replace(one, statement=Statement.honest(one))]
    digest = write_set(tmp_path / "s1", said, load_signing_key(old_private))
    import_set(object_store, tmp_path / "s1", load_trusted_keys([old_public]))
    again = tmp_path / "s2"
    write_set(again, said, load_signing_key(made.private_path), sequence=2, previous=(1, digest))
    before = bucket_listing(object_store.client, object_store.bucket)
    retired = config(tmp_path, target_settings, made.public_path)
    stderr = refused_unchanged(import_cli(retired, again), object_store, before, fault_got)
    assert "put its public key back in target.transfer_keys" in stderr, stderr
    assert "find out who wrote" not in stderr, stderr
    trusting_both = config(tmp_path, target_settings, made.public_path, old_public)
    result = mirror_cli("--config", str(trusting_both), "--json", "transfer", "import", str(again))
    fault_got.append(f"remedy: exit {result.returncode}")
    assert result.returncode == 0, result.stderr
    assert [i["status"] for i in json.loads(result.stdout)["items"]] == ["already there"]
