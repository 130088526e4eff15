"""Provenance in the bucket: published beside each version's manifest, verified where it lies.

The statement is about the vendor's bundle and its site tree (`transferset/provenance.py`).
A version imported whole is that bundle; one imported as a delta is an archive of the same
tree in other bytes (spliced, replayed or rebuilt here), whose digest the connected side
could not always sign: the tree is what covers every object a version may have.

Promises: `publish` writes each carried statement (already verified by `verify_set`) once,
at `layout.provenance_key`, before the version's manifest, so a version whose manifest is
there has its provenance there too. What is already at that key is judged by `to_publish`
before the import uploads anything: the same bytes, or a statement that verifies with a
trusted key and names the same subject, domain, version and tree (the version signed again,
by another trusted key after a rotation), is "already there" and kept; anything else refuses
the set with the bucket unchanged (IntegrityError, objects are never overwritten).
`check_in_bucket` reads a version's statement and verifies it against the trusted keys, and
all it says (`transferset.provenance.check_about`: subject, domain, version, tree) against
the version its manifest describes (`chart history`, `chart check --provenance`, `mirror
serve`); `check_object`
proves the version's object is what the statement is about: the object read back, whose
tree must be the signed one and whose bytes the manifest's (the signed bundle's too: its
digest proves the bytes, not the tree said of them; a whole zip, which cannot be read as a
stream, by its digest alone). Either
fails with one IntegrityError (exit 5), or NotFound (exit 3) when the version has none.
Nothing here trusts the manifest's `provenance_subject`: it is written on this side, unsigned.

The version's SPDX inventory (`outbound/inventory.py`), carried beside its statement and
checked by `verify_set` against the digest the statement signs, is published by
`publish_inventories` at `layout.inventory_key` before that statement, whenever the statement
is (so a version whose statement was written by this import has its inventory there too; one
kept from an earlier import keeps what that import wrote). `check_inventories` refuses, before
anything is uploaded, a set whose inventory would meet another object at that key (exit 5).
`check_inventory_in_bucket` reads it back for `chart check --provenance` and `mirror evidence`:
the bytes the verified statement signs, or exit 5 (another one there, or one it signs gone).

This side's verification records (mirror.airgap.verification) are published and checked here
too: `publish_record` writes one before the version's manifest (kept when there), and
`check_record_in_bucket` verifies it against the receipt keys trusted here and the object the
manifest names (IntegrityError, exit 5; None for a version whose manifest names none).
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Protocol

from mirror.airgap import layout
from mirror.airgap.publish import read_back
from mirror.airgap.s3.objectstore import ObjectStore
from mirror.airgap.verification import ImportFacts, make_record, verify_record
from mirror.errors import IntegrityError, NotFound
from mirror.integrity import hash_bytes, require_digest
from mirror.transferset.format import Manifest, ManifestItem
from mirror.transferset.keys import PublicKey, SigningKey
from mirror.transferset.provenance import (
    MAX_ENVELOPE,
    Provenance,
    UntrustedSigner,
    check_about,
    verify_provenance,
)
from mirror.transferset.reader import read_inventory

SHA256_IDENTITY = "provenance-sha256"


class StatementStore(layout.Bucket, Protocol):
    """What reading a published statement needs of the bucket (ObjectStore; `mirror serve`'s
    read-only bucket)."""

    def head(self, key: str) -> dict[str, Any] | None: ...

    def open_stream(self, key: str) -> Iterator[bytes]: ...


def publish(
    store: ObjectStore, manifest: Manifest, carried: Mapping[tuple[str, str], bytes]
) -> int:
    """Write the carried statements of `manifest`'s items (those `to_publish` left); returns
    how many were new."""
    created = 0
    for item in manifest.items:
        envelope = carried.get((item.domain, item.version))
        if envelope is None:
            continue
        key = layout.provenance_key(store, item.domain, item.version)
        outcome = store.put_immutable(
            key, envelope, identity={SHA256_IDENTITY: hash_bytes(envelope)}
        )
        created += outcome == "created"
    return created


INVENTORY_IDENTITY = "inventory-sha256"


def check_inventories(
    store: ObjectStore, manifest: Manifest, left: Mapping[tuple[str, str], bytes]
) -> None:
    """Refuse (IntegrityError, exit 5) before any upload an inventory still to publish (its
    statement is in `left`) whose key holds another object: objects are never overwritten.
    One there is judged by its bytes, not its metadata, which whoever wrote it chose: an
    object whose metadata names the signed inventory and whose bytes are others was kept as
    "already there" and the version published with it (trial37 D4)."""
    for item in manifest.items:
        if item.inventory is not None and (item.domain, item.version) in left:
            key = layout.inventory_key(store, item.domain, item.version)
            if store.existing(key, {INVENTORY_IDENTITY: item.inventory.sha256}) is None:
                continue
            held = _bounded_bytes(store, key)
            if held is None or hash_bytes(held) != item.inventory.sha256:
                raise IntegrityError(
                    f"{store.bucket}/{key} already exists with different content (its bytes "
                    f"are not {item.label}'s signed inventory); objects are never overwritten",
                    hint="remove it by hand only if you are sure it is wrong",
                )


def publish_inventories(
    store: ObjectStore, set_dir: Path, manifest: Manifest, left: Mapping[tuple[str, str], bytes]
) -> int:
    """Write the carried inventory of each item whose statement is still to publish (`left`),
    hashed against the signed manifest once more; returns how many were new."""
    created = 0
    for item in manifest.items:
        if item.inventory is None or (item.domain, item.version) not in left:
            continue
        data = read_inventory(set_dir, item)
        key = layout.inventory_key(store, item.domain, item.version)
        identity = {INVENTORY_IDENTITY: item.inventory.sha256}
        created += store.put_immutable(key, data, identity=identity) == "created"
    return created


MAX_INVENTORY = 256 * 1024 * 1024


def check_inventory_in_bucket(
    store: StatementStore, domain: str, version: str, proven: Provenance
) -> bytes | None:
    """The version's published inventory, once it is the one its verified statement `proven`
    signs (`inventory.sha256`); None when the statement signs none and there is none (imported
    before inventories). One there that it does not sign, or one it signs that is gone, is
    IntegrityError (exit 5): `chart check --provenance` and `mirror evidence`."""
    key = layout.inventory_key(store, domain, version)
    said = proven.predicate.get("inventory")
    signed = said.get("sha256") if isinstance(said, dict) else None
    where = f"{store.bucket}/{key}"
    if store.head(key) is None:
        if signed is None:
            return None
        raise IntegrityError(
            f"{where}: the version's provenance signs this inventory and it is gone"
        )
    data = _bounded_bytes(store, key)
    if data is None or hash_bytes(data) != signed:
        raise IntegrityError(f"{where} is not the inventory {domain} {version}'s provenance signs")
    return data


def _bounded_bytes(store: StatementStore, key: str) -> bytes | None:
    """The object at `key` when it is at most MAX_INVENTORY bytes; None when it is larger."""
    data = bytearray()
    for chunk in store.open_stream(key):
        data += chunk
        if len(data) > MAX_INVENTORY:
            return None
    return bytes(data)


def to_publish(
    store: StatementStore,
    manifest: Manifest,
    carried: Mapping[tuple[str, str], bytes],
    trusted: Mapping[str, PublicKey],
) -> dict[tuple[str, str], bytes]:
    """The carried statements still to write, decided before the import uploads anything, so
    a conflict refuses the set with the bucket unchanged (no bundle left behind that no index
    names). A statement already at the version's key with other bytes is "already there"
    (kept, not written again) when it verifies with a trusted key and names the same subject,
    domain, version and tree as the one carried: the same version signed again, after a
    transfer key rotation say. Anything else there is refused (IntegrityError, exit 5)."""
    left: dict[tuple[str, str], bytes] = {}
    for item in manifest.items:
        envelope = carried.get((item.domain, item.version))
        key = layout.provenance_key(store, item.domain, item.version)
        if envelope is None:
            continue
        if store.head(key) is None:
            left[item.domain, item.version] = envelope
            continue
        held = b"".join(_read(store, key))
        if held != envelope:
            _require_same_statement(store, key, held, item, trusted)
    return left


def _require_same_statement(
    store: StatementStore,
    key: str,
    held: bytes,
    item: ManifestItem,
    trusted: Mapping[str, PublicKey],
) -> None:
    """The statement `held` at `key` says what the one carried for `item` says (`to_publish`)."""
    assert item.provenance is not None
    where = f"{store.bucket}/{key}"
    try:
        proven = verify_provenance(held, trusted, sha256=item.provenance.subject_sha256, what=where)
        check_about(proven, item.domain, item.version, item.tree_sha256, what=where)
    except UntrustedSigner as exc:
        raise IntegrityError(
            f"{exc.message}; {item.label} is in the bucket, signed with a key this side no "
            "longer trusts: refused, nothing was published",
            hint=RETIRED,
        ) from None
    except IntegrityError as exc:
        raise IntegrityError(
            f"{exc.message}; it is not the statement this set carries for {item.label}: "
            "refused, nothing was published",
            hint=f"find out who wrote {where}; objects are never overwritten",
        ) from None


def check_in_bucket(
    store: StatementStore, domain: str, version: str, trusted: Mapping[str, PublicKey]
) -> Provenance:
    """The version's published statement, signed by a trusted key and about the domain,
    version and tree its manifest names (module docstring)."""
    described = _described(store, domain, version)
    key = layout.provenance_key(store, domain, version)
    where = f"{store.bucket}/{key}"
    try:
        proven = verify_provenance(b"".join(_read(store, key)), trusted, what=where)
    except UntrustedSigner as exc:
        raise IntegrityError(exc.message, hint=RETIRED) from None
    check_about(proven, domain, version, described.tree_sha256, what=where)
    return proven


RETIRED = (
    "if it is a transfer key you retired, put its public key back in target.transfer_keys: "
    "objects are never overwritten, so a version stays signed by the key that signed it "
    "first, and its public half stays trusted while the bucket holds such versions (chart gc "
    "removes them with their statements); if you never trusted that key, find out who "
    "signed it"
)


def check_object(store: ObjectStore, domain: str, version: str, proven: Provenance) -> None:
    """The version's object is the site `proven` is about (module docstring): read back
    whole, once, its tree hashed as it passes. The signed bundle's own bytes too: a digest
    proves the bytes are the ones signed, not that they hold the tree the statement (and
    the manifest) name. A zip cannot be read as a stream (its directory is at its end): a
    whole zip is proven by its digest alone here (`mirror serve` hashes its tree from its
    cached file, and the import before it was published)."""
    described = _described(store, domain, version)
    whole = described.sha256 == proven.sha256
    if whole and described.archive_format != "tar.gz":
        return
    where = f"{store.bucket}/{described.object}"
    try:
        tree, digest = read_back(store, described.object, described.size)
    except IntegrityError as exc:
        raise IntegrityError(f"{where} is not the site its provenance is about: {exc}") from None
    if tree != proven.predicate.get("tree_sha256"):
        when = "named so when it was signed" if whole else "changed after the import"
        raise IntegrityError(
            f"{where} holds tree {tree[:16]}…, not the tree its provenance signs "
            f"({str(proven.predicate.get('tree_sha256'))[:16]}…); {when}"
        )
    require_digest(where, digest, described.sha256, described.size)


def _described(store: layout.Bucket, domain: str, version: str) -> layout.VersionManifest:
    described = layout.read_version_manifest(store, domain, version)
    if described is None:
        raise NotFound(f"{store.bucket}: no version {version} of {domain}")
    return described


def read_statement(store: StatementStore, domain: str, version: str) -> dict[str, Any]:
    """The predicate of a version's published statement, NOT verified (for display only,
    where no key is trusted); NotFound when there is none."""
    key = layout.provenance_key(store, domain, version)
    try:
        envelope = json.loads(b"".join(_read(store, key)))
        statement = json.loads(base64.b64decode(envelope.get("payload", ""), validate=True))
    except (ValueError, AttributeError, binascii.Error):
        raise IntegrityError(f"{store.bucket}/{key}: not a DSSE envelope") from None
    predicate = statement.get("predicate") if isinstance(statement, dict) else None
    if not isinstance(predicate, dict):
        raise IntegrityError(f"{store.bucket}/{key}: not a provenance statement")
    return predicate


def _read(store: StatementStore, key: str) -> list[bytes]:
    if store.head(key) is None:
        raise NotFound(
            f"{store.bucket}/{key} does not exist: the version was imported without provenance"
        )
    chunks: list[bytes] = []
    size = 0
    for chunk in store.open_stream(key):
        size += len(chunk)
        if size > MAX_ENVELOPE:
            raise IntegrityError(f"{store.bucket}/{key}: larger than {MAX_ENVELOPE} bytes")
        chunks.append(chunk)
    return chunks


# ---- verification records (mirror.airgap.verification) -------------------------------------

RECORD_IDENTITY = "record-subject-sha256"


def publish_record(store: ObjectStore, facts: ImportFacts, key: SigningKey) -> str:
    """Write the version's verification record, signed by `key`, before its manifest; returns
    its bucket key. One already there about the same object (an import run again, or
    resumed) is kept as it is, whatever its time, once it verifies with a receipt key this
    side trusts (checked before any upload: `importer._conflicts`, `check_record_there`):
    never overwritten; one about another object, or that does not verify, is refused
    (IntegrityError, exit 5)."""
    record = layout.record_key(store, facts.domain, facts.version)
    envelope = make_record(facts, key)
    store.put_immutable(record, envelope, identity={RECORD_IDENTITY: facts.sha256})
    return record


RECORD_REMEDY = (
    "find out who removed it; to sign one, import its set again with `mirror transfer "
    "import --allow-replay SET` where transfer.signing_key is set"
)


def check_record_there(
    store: StatementStore, domain: str, version: str, sha256: str, trusted: Mapping[str, PublicKey]
) -> None:
    """The record already at a version's key, kept by an import as "already there", verifies
    with a key of `trusted` (this side's receipt keys) and is about the object `sha256`;
    IntegrityError otherwise. Its metadata alone, which whoever wrote the object chose, let a
    planted record through, kept for ever (trial37 D4)."""
    key = layout.record_key(store, domain, version)
    envelope = b"".join(_read(store, key))
    where = f"{store.bucket}/{key}"
    verify_record(envelope, trusted, domain=domain, version=version, sha256=sha256, what=where)


def _signs_inventory(proven: Provenance | None) -> bool:
    said = proven.predicate.get("inventory") if proven is not None else None
    return isinstance(said, dict) and said.get("sha256") is not None


def provenance_digest(store: StatementStore, domain: str, version: str) -> str | None:
    """The sha256 of the version's published statement (from the object's metadata, which
    `publish` writes), or None when it has none."""
    head = store.head(layout.provenance_key(store, domain, version))
    return None if head is None else head.get("sha256")


def check_record_in_bucket(
    store: StatementStore,
    domain: str,
    version: str,
    trusted: Mapping[str, PublicKey],
    proven: Provenance | None = None,
) -> Provenance | None:
    """The version's verification record, signed by a trusted receipt key and about the
    object its manifest names; None when the version has none and its manifest names none
    (imported before records, or by a side without a receipt key). A record the manifest
    names that is gone is refused (IntegrityError, exit 5), as is any other failure, and so is
    no record for a version whose verified provenance `proven` signs an inventory: packed by a
    release that writes records, it was imported by one too (the README's upgrade order), so
    "imported before records" cannot be why; the manifest's `record` is unsigned, and someone
    who can write to the bucket could delete both."""
    described = _described(store, domain, version)
    key = layout.record_key(store, domain, version)
    where = f"{store.bucket}/{key}"
    if store.head(key) is None:
        if described.record is None and not _signs_inventory(proven):
            return None
        if described.record is None:
            raise IntegrityError(
                f"{where} does not exist, and {domain} {version}'s provenance signs an "
                "inventory: it was imported by a release that writes records, so its record "
                "was never signed (no receipt key then) or was removed from the bucket",
                hint=RECORD_REMEDY,
            )
        raise IntegrityError(f"{where}: the version's manifest names this record and it is gone")
    return verify_record(
        b"".join(_read(store, key)),
        trusted,
        domain=domain,
        version=version,
        sha256=described.sha256,
        what=where,
    )
