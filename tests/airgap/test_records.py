"""Verification records in the bucket, and `mirror evidence`'s VERIFY.md run as written: real
signed sets (a version whole, the next as a delta rebuilt here) imported into SeaweedFS."""

from __future__ import annotations

import hashlib
import re
import shutil
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from mirror.airgap import layout
from mirror.airgap.chart.gc import gc
from mirror.airgap.evidence import gather, write_evidence
from mirror.airgap.importer import import_set
from mirror.airgap.provenance import (
    INVENTORY_IDENTITY,
    RECORD_IDENTITY,
    check_in_bucket,
    check_record_in_bucket,
)
from mirror.airgap.s3.objectstore import ObjectStore
from mirror.archive import inspect_archive
from mirror.errors import IntegrityError, NotFound
from mirror.integrity import hash_file
from mirror.outbound.inventory import InventoryFacts, document, supplier_of
from mirror.transferset.format import MANIFEST, parse_manifest
from mirror.transferset.keys import (
    PublicKey,
    SigningKey,
    generate_keypair,
    load_signing_key,
    load_trusted_keys,
)
from tests.fixtures.deltasets import (
    DeltaSpec,
    Statement,
    delta_item,
    full_item,
    hand_made,
    write_set,
)
from tests.fixtures.docs import run_verify
from tests.fixtures.s3 import bucket_listing

pytestmark = pytest.mark.s3

DOCS = "docs.example.com"
V1, V2 = "2026-11-21", "2026-11-22"
BASE = {"index.html": b"<h1>home</h1>\n", "guides/a.html": b"<p>a</p>\n" * 200}
NEW = {**BASE, "index.html": b"<h1>home, changed</h1>\n", "guides/b.html": b"<p>b</p>\n"}


@dataclass(frozen=True)
class Imported:
    """Set 1 (V1 whole) and set 2 (V2 as a delta) imported, records signed by `receipt`."""

    sets: tuple[Path, Path]
    receipt: SigningKey
    receipt_keys: dict[str, PublicKey]
    other: SigningKey


def make_sets(
    tmp_path: Path, signing: SigningKey, spec: DeltaSpec | None = None
) -> tuple[Path, Path]:
    old, old_tree = hand_made(tmp_path, "v1", BASE)
    new, new_tree = hand_made(tmp_path, "v2", NEW)
    whole = full_item(DOCS, V1, old, "2026-11-21T03:00:00Z")
    first = write_set(tmp_path / "s1", [replace(whole, statement=Statement.honest(whole))], signing)
    delta = delta_item(
        DOCS, V2, V1, old_tree, new_tree, "2026-11-22T03:00:00Z", tmp_path / "b", spec
    )
    said = Statement.honest(delta, subject_sha256=hash_file(new).sha256)
    write_set(
        tmp_path / "s2", [replace(delta, statement=said)], signing, sequence=2, previous=(1, first)
    )
    return tmp_path / "s1", tmp_path / "s2"


def keypair(tmp_path: Path, name: str) -> tuple[SigningKey, dict[str, PublicKey]]:
    made = generate_keypair(tmp_path / "keys" / name)
    return load_signing_key(made.private_path), load_trusted_keys([made.public_path])


@pytest.fixture
def imported(
    tmp_path: Path, object_store: ObjectStore, signing: SigningKey, trusted: Any
) -> Imported:
    sets = make_sets(tmp_path, signing)
    receipt, receipt_keys = keypair(tmp_path, "receipt")
    other, _ = keypair(tmp_path, "other")
    for set_dir in sets:
        import_set(object_store, set_dir, trusted, receipt_key=receipt, work_dir=tmp_path)
    return Imported(sets, receipt, receipt_keys, other)


def read(store: ObjectStore, key: str) -> bytes:
    return b"".join(store.open_stream(key))


def test_each_version_has_a_record_of_what_was_checked(
    imported: Imported, object_store: ObjectStore, signing: SigningKey
) -> None:
    for version, carried_as in ((V1, "full"), (V2, "delta")):
        described = layout.read_version_manifest(object_store, DOCS, version)
        assert described is not None
        assert described.record == layout.record_key(object_store, DOCS, version)
        record = check_record_in_bucket(object_store, DOCS, version, imported.receipt_keys)
        assert record is not None and record.key_id == imported.receipt.key_id
        assert record.sha256 == described.sha256  # the object the bucket holds
        said = record.predicate
        assert said["carried_as"] == carried_as and said["transfer_key_id"] == signing.key_id
        assert said["set"]["sequence"] == (1 if version == V1 else 2)
        provenance = read(object_store, layout.provenance_key(object_store, DOCS, version))
        assert said["provenance_sha256"] == hashlib.sha256(provenance).hexdigest()
        rebuilt = ["delta-rebuild"] if carried_as == "delta" else []
        assert said["checks"] == ["signatures", "completeness", "digests", "provenance", *rebuilt]


def test_a_record_by_an_untrusted_key_or_for_another_object_is_refused(
    imported: Imported, object_store: ObjectStore, tmp_path: Path
) -> None:
    _, strangers = keypair(tmp_path, "stranger")
    with pytest.raises(IntegrityError, match="which is not trusted here"):
        check_record_in_bucket(object_store, DOCS, V1, strangers)
    key = layout.record_key(object_store, DOCS, V1)
    other = read(object_store, layout.record_key(object_store, DOCS, V2))
    object_store.client.put_object(Bucket=object_store.bucket, Key=key, Body=other)
    with pytest.raises(IntegrityError, match="the record is about object"):
        check_record_in_bucket(object_store, DOCS, V1, imported.receipt_keys)


def test_a_version_imported_again_keeps_its_record(
    imported: Imported, object_store: ObjectStore, trusted: Any, tmp_path: Path
) -> None:
    """Run again (`--allow-replay`), signed by another key even: "already there", kept."""
    before = {v: read(object_store, layout.record_key(object_store, DOCS, v)) for v in (V1, V2)}
    for set_dir in imported.sets:
        result = import_set(
            object_store,
            set_dir,
            trusted,
            allow_replay=True,
            receipt_key=imported.other,
            work_dir=tmp_path,
            receipt_keys=imported.receipt_keys,  # the key rotated out, still trusted here
        )
        assert [item.status for item in result.items] == ["already there"]
    after = {v: read(object_store, layout.record_key(object_store, DOCS, v)) for v in (V1, V2)}
    assert after == before


def test_a_version_without_a_record_is_told_apart_from_one_whose_record_is_gone(
    tmp_path: Path, object_store: ObjectStore, signing: SigningKey, trusted: Any
) -> None:
    """Imported before records (no receipt key, the manifest names none): no record, None;
    its set imported again where a receipt key is set (the remedy `chart check` prints)
    signs one. A record the manifest names and that is gone is refused."""
    sets = make_sets(tmp_path, signing)
    receipt, receipt_keys = keypair(tmp_path, "receipt")
    import_set(object_store, sets[0], trusted)
    assert check_record_in_bucket(object_store, DOCS, V1, receipt_keys) is None
    with pytest.raises(NotFound, match="no verification record"):
        gather(object_store, DOCS, V1, trusted, receipt_keys)
    import_set(object_store, sets[0], trusted, allow_replay=True, receipt_key=receipt)
    assert check_record_in_bucket(object_store, DOCS, V1, receipt_keys) is not None
    import_set(object_store, sets[1], trusted, receipt_key=receipt, work_dir=tmp_path)
    object_store.delete(layout.record_key(object_store, DOCS, V2))
    with pytest.raises(IntegrityError, match="names this record and it is gone"):
        check_record_in_bucket(object_store, DOCS, V2, receipt_keys)


@pytest.mark.parametrize("version", ["../other.example.com/2026-11-21", "2026-11-21/x", ""])
def test_evidence_of_what_is_no_version_label_is_not_found(
    object_store: ObjectStore, trusted: Any, version: str
) -> None:
    """`mirror evidence DOMAIN ../X` was an unexpected ValueError, exit 1 (trial37 D8)."""
    with pytest.raises(NotFound, match="no version"):
        gather(object_store, DOCS, version, trusted, trusted)


def test_verify_md_passes_as_written_and_fails_for_any_piece_swapped(
    imported: Imported, object_store: ObjectStore, trusted: Any, tmp_path: Path
) -> None:
    dirs = {}
    for version in (V1, V2):
        found = gather(object_store, DOCS, version, trusted, imported.receipt_keys)
        out = tmp_path / f"evidence-{version}"
        write_evidence(found, out, object_store.open_stream(found.described.object))
        done = run_verify(out)
        assert done.returncode == 0, done.stdout + done.stderr
        assert done.stdout.count("Signature Verified Successfully") == 2
        assert "FAILED" not in done.stdout and "bundle.tar.gz: OK" in done.stdout
        assert f"receipt key id: {imported.receipt.key_id}" in done.stdout
        dirs[version] = out
    _, strangers = keypair(tmp_path, "swapped")
    stranger_pub = next(iter(strangers.values())).source
    swaps = {  # the piece, what replaces it, what the recipe says
        "verification.intoto.json": (dirs[V2] / "verification.intoto.json", "FAILED"),
        "provenance.intoto.json": (dirs[V2] / "provenance.intoto.json", "FAILED"),
        "receipt.pub": (Path(stranger_pub), "Signature Verification Failure"),
        "transfer.pub": (Path(stranger_pub), "Signature Verification Failure"),
        "bundle.tar.gz": (dirs[V2] / "bundle.tar.gz", "FAILED"),
        "object.sha256": (dirs[V2] / "object.sha256", "FAILED"),
    }
    documents = ("verification.intoto.json", "provenance.intoto.json")
    for version, out in dirs.items():
        for name, (source, said) in swaps.items():
            if version == V1 and name not in documents:
                continue  # the keys and the object: once, on the delta (a test takes seconds)
            if source.parent == out:
                source = dirs[V1] / name  # V2's own piece: V1's instead
            tampered = tmp_path / f"tampered-{version}-{name}"
            shutil.copytree(out, tampered)
            shutil.copyfile(source, tampered / name)
            done = run_verify(tampered)
            assert done.returncode != 0, (version, name, done.stdout)
            assert said in done.stdout + done.stderr, (version, name, done.stdout, done.stderr)
    every_piece_of_another_version_fails(dirs[V1], dirs[V2], tmp_path)
    a_changed_object_fails_whatever_its_digest_file_names(dirs[V1], tmp_path)


def a_changed_object_fails_whatever_its_digest_file_names(out: Path, tmp_path: Path) -> None:
    """The object changed and `object.sha256` edited to name an untouched copy beside it:
    `sha256sum -c object.sha256` passed and the digest was read from its text (trial37 D7);
    the recipe hashes the object its title names, and holds the digest file to it."""
    tampered = tmp_path / "object-renamed"
    shutil.copytree(out, tampered)
    shutil.copyfile(tampered / "bundle.tar.gz", tampered / "pristine.tar.gz")
    with open(tampered / "bundle.tar.gz", "ab") as handle:
        handle.write(b"X")
    digest = (tampered / "object.sha256").read_text().split()[0]
    (tampered / "object.sha256").write_text(f"{digest}  pristine.tar.gz\n")
    done = run_verify(tampered)
    assert done.returncode != 0, done.stdout
    assert "the object is the one this file names" in done.stdout, done.stdout + done.stderr
    assert "object.sha256 names it: FAILED" in done.stdout, done.stdout


def every_piece_of_another_version_fails(one: Path, other: Path, tmp_path: Path) -> None:
    """All of `one`'s data files (statements, keys, object, digest, summary) in `other`'s
    evidence beside `other`'s VERIFY.md: consistent with each other, about another version
    than VERIFY.md names (trial E4)."""
    swapped = tmp_path / "every-piece-swapped"
    shutil.copytree(one, swapped)
    shutil.copyfile(other / "VERIFY.md", swapped / "VERIFY.md")
    done = run_verify(swapped)
    assert done.returncode != 0, done.stdout
    assert f"the provenance is about {DOCS} {V2}: FAILED" in done.stdout, done.stdout
    assert "the object is the one this file names" in done.stdout


def inventory_of(bundle: Path, domain: str, version: str) -> bytes:
    """The SPDX inventory a pack makes of `bundle` (`outbound/inventory.py`)."""
    report = inspect_archive(bundle)
    assert report.digests is not None
    facts = InventoryFacts(
        domain=domain,
        version=version,
        bundle_format="tar.gz",
        bundle_sha256=hash_file(bundle).sha256,
        supplier=supplier_of("https://api.vendor.test"),
        exported_at=datetime(2026, 11, 21, 3, tzinfo=UTC),
        tool_version="0.0.test",
    )
    files = [(p, n, d, s1 or "") for p, n, d, s1 in report.digests.with_sha1()]
    return b"".join(document(facts, files))


def set_with_inventory(
    tmp_path: Path, signing: SigningKey, *, carried: bytes | None = None, name: str = "s1"
) -> tuple[Path, bytes]:
    """A set of V1 whole whose statement signs its inventory; `carried` the bytes the set
    carries instead (listed in the signed manifest as they are)."""
    old, _ = hand_made(tmp_path, "v1", BASE)
    whole = full_item(DOCS, V1, old, "2026-11-21T03:00:00Z")
    inventory = inventory_of(old, DOCS, V1)
    honest = Statement.honest(whole)
    signed = {**honest.predicate, "inventory": {"sha256": hashlib.sha256(inventory).hexdigest()}}
    said = replace(honest, predicate=signed)
    item = replace(whole, statement=said, inventory=inventory if carried is None else carried)
    write_set(tmp_path / name, [item], signing)
    return tmp_path / name, inventory


def test_a_record_there_is_judged_by_its_signature_not_its_metadata(
    tmp_path: Path, object_store: ObjectStore, signing: SigningKey, trusted: Any
) -> None:
    """A planted record whose metadata names the object was kept "whatever its signer" and
    the version published with it, for ever (trial37 D4): refused before any upload. A
    record of a receipt key this side trusts (one rotated out of signing) is kept."""
    first = make_sets(tmp_path, signing)[0]
    receipt, receipt_keys = keypair(tmp_path, "receipt")
    other, other_keys = keypair(tmp_path, "other")
    key = layout.record_key(object_store, DOCS, V1)
    (item,) = parse_manifest((first / MANIFEST).read_bytes()).items
    object_store.client.put_object(
        Bucket=object_store.bucket,
        Key=key,
        Body=b'{"payload": "e30=", "signatures": []}',
        Metadata={RECORD_IDENTITY: item.sha256},
    )
    with pytest.raises(IntegrityError, match=r"verification\.intoto\.json"):
        import_set(object_store, first, trusted, receipt_key=receipt)
    assert object_store.list_keys(object_store.key(DOCS)) == [key]
    object_store.delete(key)
    import_set(object_store, first, trusted, receipt_key=receipt)
    import_set(
        object_store, first, trusted, allow_replay=True, receipt_key=other,
        receipt_keys=receipt_keys | other_keys,
    )  # fmt: skip
    assert check_record_in_bucket(object_store, DOCS, V1, receipt_keys) is not None


def test_an_inventory_there_is_judged_by_its_bytes_not_its_metadata(
    tmp_path: Path, object_store: ObjectStore, signing: SigningKey, trusted: Any
) -> None:
    """Metadata is the word of whoever wrote the object: other bytes under the signed
    inventory's digest were kept as "already there" and published (trial37 D4). Refused
    before any upload; the same bytes (an import run again) are kept."""
    set_dir, inventory = set_with_inventory(tmp_path, signing)
    key = layout.inventory_key(object_store, DOCS, V1)
    identity = {INVENTORY_IDENTITY: hashlib.sha256(inventory).hexdigest()}
    object_store.client.put_object(
        Bucket=object_store.bucket, Key=key, Body=b'{"forged": true}', Metadata=identity
    )
    with pytest.raises(IntegrityError, match="already exists with different content"):
        import_set(object_store, set_dir, trusted)
    written = object_store.list_keys(object_store.key(DOCS))
    assert written == [key], written  # nothing published beside the planted object
    object_store.client.put_object(
        Bucket=object_store.bucket, Key=key, Body=inventory, Metadata=identity
    )
    import_set(object_store, set_dir, trusted)
    assert read(object_store, key) == inventory


def test_the_inventory_a_set_carries_is_published_signed_and_carried_by_evidence(
    tmp_path: Path, object_store: ObjectStore, signing: SigningKey, trusted: Any
) -> None:
    """The import publishes the inventory the provenance signs beside the version; `mirror
    evidence` carries it, VERIFY.md checks it, and a swapped one fails both."""
    set_dir, inventory = set_with_inventory(tmp_path, signing)
    receipt, receipt_keys = keypair(tmp_path, "receipt")
    import_set(object_store, set_dir, trusted, receipt_key=receipt)
    key = layout.inventory_key(object_store, DOCS, V1)
    assert read(object_store, key) == inventory
    found = gather(object_store, DOCS, V1, trusted, receipt_keys)
    write_evidence(found, tmp_path / "evidence", object_store.open_stream(found.described.object))
    assert (tmp_path / "evidence" / "inventory.spdx.json").read_bytes() == inventory
    done = run_verify(tmp_path / "evidence")
    assert done.returncode == 0, done.stdout + done.stderr
    said = "the inventory is the one the provenance signs (none if it signs none)"
    assert f"{said}: OK" in done.stdout, done.stdout
    assert "the inventory's package is the signed bundle: OK" in done.stdout, done.stdout
    assert f"{DOCS} {V1}: set 1" in done.stdout, done.stdout
    spdx = tmp_path / "evidence" / "inventory.spdx.json"
    spdx.unlink()  # taken away, though the signed provenance names it (trial E3)
    done = run_verify(tmp_path / "evidence")
    assert done.returncode != 0 and f"{said}: FAILED" in done.stdout, done.stdout
    spdx.write_bytes(b'{"packages": [{}]}\n')
    done = run_verify(tmp_path / "evidence")
    assert done.returncode != 0 and f"{said}: FAILED" in done.stdout, done.stdout
    object_store.delete(key)
    object_store.client.put_object(Bucket=object_store.bucket, Key=key, Body=b"{}\n")
    with pytest.raises(IntegrityError, match="is not the inventory"):
        gather(object_store, DOCS, V1, trusted, receipt_keys)
    object_store.delete(key)
    with pytest.raises(IntegrityError, match="signs this inventory and it is gone"):
        gather(object_store, DOCS, V1, trusted, receipt_keys)


@pytest.mark.parametrize("how", ["bytes changed", "another listed"])
def test_an_inventory_that_is_not_the_signed_one_refuses_the_set_before_any_upload(
    tmp_path: Path, object_store: ObjectStore, signing: SigningKey, trusted: Any, how: str
) -> None:
    """Changed on the medium (the manifest's digest tells) or listed in the manifest in place
    of the one the provenance signs: exit 5, the bucket unchanged."""
    if how == "bytes changed":
        set_dir, _ = set_with_inventory(tmp_path, signing)
        (set_dir / "provenance" / DOCS / f"{V1}.spdx.json").write_bytes(b"{}" + b" " * 10)
        said = "spdx.json"
    else:
        set_dir, _ = set_with_inventory(tmp_path, signing, carried=b'{"other": 1}\n')
        said = "is not the inventory"
    with pytest.raises(IntegrityError, match=said) as refused:
        import_set(object_store, set_dir, trusted)
    assert refused.value.exit_code == 5
    listed = object_store.client.list_objects_v2(Bucket=object_store.bucket)
    assert listed.get("KeyCount", 0) == 0, listed


# ---- `chart gc` takes a version's evidence with it (issue 38 class 4: GC1, GC3) --------------

V3 = "2026-11-23"


Left = dict[str, tuple[bytes, dict[str, str]]]


def gc_then_carry_again(
    tmp_path: Path, store: ObjectStore, imported: Imported, signing: SigningKey, trusted: Any
) -> tuple[Path, Left]:
    """V3 imported whole, `chart gc --keep 1` removes V1 and V2 (V2 was a delta: its record is
    about the object rebuilt here); then set 4 carries V2 whole (`pack --full --from-set 2`).
    The set's path, and V2's evidence (bytes, metadata) as it was before gc, by key."""
    newest, _ = hand_made(tmp_path, "v3", {**NEW, "guides/c.html": b"<p>c</p>\n"})
    whole = full_item(DOCS, V3, newest, "2026-11-23T03:00:00Z")
    third = write_set(
        tmp_path / "s3", [replace(whole, statement=Statement.honest(whole))], signing, sequence=3
    )
    import_set(store, tmp_path / "s3", trusted, receipt_key=imported.receipt)
    keys = [key(store, DOCS, V2) for key in (layout.record_key, layout.provenance_key)]
    before = {key: (read(store, key), dict(store.head(key) or {})["metadata"]) for key in keys}
    done = gc(store, 1, [DOCS])
    assert [str(v.ref.label) for v in done.domains[0].removed] == [V1, V2]
    again = tmp_path / "v2.tar.gz"  # the vendor's bundle of V2, made by `make_sets`
    carried = full_item(DOCS, V2, again, "2026-11-22T03:00:00Z")
    write_set(
        tmp_path / "s4",
        [replace(carried, statement=Statement.honest(carried))],
        signing,
        sequence=4,
        previous=(3, third),
    )
    return tmp_path / "s4", before


def test_gc_removes_a_versions_evidence_and_the_version_carried_again_imports_as_new(
    imported: Imported, object_store: ObjectStore, signing: SigningKey, trusted: Any, tmp_path: Path
) -> None:
    set_dir, _ = gc_then_carry_again(tmp_path, object_store, imported, signing, trusted)
    for version in (V1, V2):
        for key in (layout.record_key, layout.provenance_key, layout.inventory_key):
            assert object_store.head(key(object_store, DOCS, version)) is None, (version, key)
    result = import_set(object_store, set_dir, trusted, receipt_key=imported.receipt)
    assert [item.status for item in result.items] == ["published"]
    record = check_record_in_bucket(object_store, DOCS, V2, imported.receipt_keys)
    assert record is not None and record.predicate["carried_as"] == "full"


def test_evidence_an_older_gc_left_refuses_before_any_upload_and_its_remedy_works(
    imported: Imported, object_store: ObjectStore, signing: SigningKey, trusted: Any, tmp_path: Path
) -> None:
    """A record left behind (by a gc of an earlier release) about the object rebuilt then:
    exit 5 with the bucket unchanged, and the refusal names what to delete; done, the
    import publishes the version."""
    set_dir, left = gc_then_carry_again(tmp_path, object_store, imported, signing, trusted)
    for key, (body, metadata) in left.items():
        object_store.client.put_object(
            Bucket=object_store.bucket, Key=key, Body=body, Metadata=metadata
        )
    before = bucket_listing(object_store.client, object_store.bucket)
    with pytest.raises(IntegrityError, match="is a verification record about object") as no:
        import_set(object_store, set_dir, trusted, receipt_key=imported.receipt)
    assert no.value.exit_code == 5
    assert bucket_listing(object_store.client, object_store.bucket) == before
    assert no.value.hint is not None and "chart gc removed" in no.value.hint, no.value
    for url in re.findall(r"s3://\S+", no.value.hint):  # the remedy, as printed
        object_store.delete(url.removeprefix(f"s3://{object_store.bucket}/"))
    result = import_set(object_store, set_dir, trusted, receipt_key=imported.receipt)
    assert [item.status for item in result.items] == ["published"]


def test_a_stripped_record_of_a_version_whose_provenance_signs_an_inventory_is_refused(
    tmp_path: Path, object_store: ObjectStore, signing: SigningKey, trusted: Any
) -> None:
    """Someone who can write to the bucket deletes the record and the manifest's `record`
    (trial P14): a version packed by a release that writes records cannot have been
    imported before them, so no record is exit 5, not "none"; the remedy it names (import
    the set again where a receipt key is set) signs one."""
    set_dir, _ = set_with_inventory(tmp_path, signing)
    receipt, receipt_keys = keypair(tmp_path, "receipt")
    import_set(object_store, set_dir, trusted, receipt_key=receipt)
    object_store.delete(layout.record_key(object_store, DOCS, V1))
    key = layout.version_manifest_key(object_store, DOCS, V1)
    described = layout.read_version_manifest(object_store, DOCS, V1)
    assert described is not None
    stripped = described.model_copy(update={"record": None}).to_bytes()
    object_store.client.put_object(Bucket=object_store.bucket, Key=key, Body=stripped)
    proven = check_in_bucket(object_store, DOCS, V1, trusted)
    with pytest.raises(IntegrityError, match="provenance signs an inventory") as refused:
        check_record_in_bucket(object_store, DOCS, V1, receipt_keys, proven)
    assert refused.value.exit_code == 5 and "--allow-replay" in str(refused.value.hint)
    with pytest.raises(IntegrityError, match="provenance signs an inventory"):
        gather(object_store, DOCS, V1, trusted, receipt_keys)
    import_set(object_store, set_dir, trusted, allow_replay=True, receipt_key=receipt)
    assert check_record_in_bucket(object_store, DOCS, V1, receipt_keys, proven) is not None


def test_the_remedy_for_no_record_signs_one_for_a_spliced_delta_too(
    tmp_path: Path, object_store: ObjectStore, signing: SigningKey, trusted: Any
) -> None:
    """A spliced delta's object is "already there" when its set is imported again (the
    signed manifest cannot name its digest): the remedy `chart check` names for a version
    without a record (`--allow-replay` where a receipt key is set) signs one all the same,
    about the object that set published."""
    sets = make_sets(tmp_path, signing, DeltaSpec(spliced=True))
    for set_dir in sets:
        import_set(object_store, set_dir, trusted, work_dir=tmp_path)
    receipt, receipt_keys = keypair(tmp_path, "receipt")
    assert check_record_in_bucket(object_store, DOCS, V2, receipt_keys) is None
    again = import_set(
        object_store, sets[1], trusted, allow_replay=True, receipt_key=receipt, work_dir=tmp_path
    )
    assert [item.status for item in again.items] == ["already there"]
    described = layout.read_version_manifest(object_store, DOCS, V2)
    record = check_record_in_bucket(object_store, DOCS, V2, receipt_keys)
    assert described is not None and record is not None
    assert record.sha256 == described.sha256 and record.predicate["carried_as"] == "delta"
