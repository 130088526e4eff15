"""Each version's documents, once every bundle is in place: its inventory and provenance,
its verification record (signed with this side's receipt key, when it has one), then its
`manifest.json` naming them, and the index entry that will list it."""

from __future__ import annotations

import logging

from mirror.airgap import layout, provenance, publish
from mirror.airgap.importer._admission import Admitted
from mirror.airgap.importer._bundles import Staged, bundle_key
from mirror.airgap.importer._result import ImportedItem, Status
from mirror.airgap.s3.objectstore import ObjectStore
from mirror.airgap.verification import ImportFacts
from mirror.errors import IntegrityError
from mirror.integrity import Digest
from mirror.sites import DEFAULT_SITE
from mirror.transferset.format import ManifestItem
from mirror.transferset.keys import SigningKey
from mirror.transferset.reader import VerifiedSet
from mirror.versions import VersionLabel, VersionRef

log = logging.getLogger("mirror.airgap.importer")

BUNDLE_SHA256_META = "bundle-sha256"

Entries = dict[str, list[layout.IndexEntry]]
"""Index entries to add, by domain."""


def publish_provenance(store: ObjectStore, admitted: Admitted) -> None:
    """Every bundle matched and is complete: each version's inventory, then its provenance,
    go before its manifest."""
    verified = admitted.verified
    provenance.publish_inventories(store, verified.path, verified.manifest, admitted.provenance)
    provenance.publish(store, verified.manifest, admitted.provenance)


def publish_versions(
    store: ObjectStore,
    verified: VerifiedSet,
    bundles: dict[str, Staged],
    imported_at: str,
    signer: SigningKey | None,
) -> tuple[list[ImportedItem], Entries]:
    """Each version's manifest, in the set's order; the items and their index entries."""
    items: list[ImportedItem] = []
    entries: Entries = {}
    for item in verified.manifest.items:
        bundle = bundles[bundle_key(store, item)]
        published, entry = publish_version(
            store, verified, item, bundle, imported_at=imported_at, signer=signer
        )
        items.append(published)
        entries.setdefault(item.domain, []).append(entry)
        log.info(
            "version %s %s",
            published.status,
            item.label,
            extra={"domain": item.domain, "version": item.version, "status": published.status},
        )
    return items, entries


def publish_version(
    store: ObjectStore,
    verified: VerifiedSet,
    item: ManifestItem,
    bundle: Staged,
    *,
    imported_at: str,
    signer: SigningKey | None = None,
) -> tuple[ImportedItem, layout.IndexEntry]:
    """The version's manifest, once its bundle is in place (or, the same tree in other bytes
    `kept`, the version's manifest there) and its verification record signed by `signer`
    (when this side has a receipt key); returns the item and its index entry."""
    key = layout.version_manifest_key(store, item.domain, item.version)
    if bundle.kept is not None:
        if signer is not None and published_by(bundle.kept, verified):
            write_record(store, verified, item, bundle.digest, imported_at, signer)
        return _published(store, item, bundle.kept, key, "already there")
    record = write_record(store, verified, item, bundle.digest, imported_at, signer)
    document = _version_manifest(store, verified, item, bundle.digest, imported_at, record)
    document, manifest_status = _put_manifest(store, key, document)
    status: Status = (
        "published" if "created" in (bundle.outcome, manifest_status) else "already there"
    )
    return _published(store, item, document, key, status)


def published_by(kept: layout.VersionManifest, verified: VerifiedSet) -> bool:
    """The version the bucket holds with the same tree in other bytes is the one this very set
    published (a spliced delta, whose digest the signed manifest cannot name): imported
    again (`--allow-replay`, the remedy for a version without a record) it gets the record it
    lacks, about that object, which this set made and checked. A version another set
    published keeps what it has."""
    manifest = verified.manifest
    return kept.transfer_sequence == manifest.sequence and kept.source_id == manifest.source_id


def _version_manifest(
    store: ObjectStore,
    verified: VerifiedSet,
    item: ManifestItem,
    digest: Digest,
    imported_at: str,
    record: str | None,
) -> layout.VersionManifest:
    """The version's `manifest.json`: its bundle object as published, and where it came from."""
    return layout.VersionManifest(
        domain=item.domain,
        version=item.version,
        object=bundle_key(store, item),
        sha256=digest.sha256,
        size=digest.size,
        archive_format=item.archive_format,
        tree_sha256=item.tree_sha256,
        exported_at=item.exported_at,
        imported_at=imported_at,
        transfer_sequence=verified.manifest.sequence,
        source_id=verified.manifest.source_id,
        record=record,
        **publish.manifest_fields(item),
    )


def _put_manifest(
    store: ObjectStore, key: str, document: layout.VersionManifest
) -> tuple[layout.VersionManifest, str]:
    """Create the manifest once; one already there (an import killed after writing it) is
    kept when it describes the same bundle, refused otherwise: judged by what it says, as
    `_conflicts` judged it before any upload (its metadata may be gone: a manifest rewritten
    by hand). The manifest the bucket holds, and whether this import created it."""
    if layout.read_version_manifest(store, document.domain, document.version) is not None:
        return _kept_manifest(store, key, document), "exists"
    status = store.put_immutable(
        key, document.to_bytes(), identity={BUNDLE_SHA256_META: document.sha256}
    )
    if status == "exists":
        return _kept_manifest(store, key, document), status
    return document, status


def _kept_manifest(
    store: ObjectStore, key: str, document: layout.VersionManifest
) -> layout.VersionManifest:
    stored = layout.read_version_manifest(store, document.domain, document.version)
    if stored is None or stored.sha256 != document.sha256 or stored.object != document.object:
        raise IntegrityError(
            f"{store.bucket}/{key} describes another bundle; objects are never overwritten"
        )
    return stored


def write_record(
    store: ObjectStore,
    verified: VerifiedSet,
    item: ManifestItem,
    digest: Digest,
    at: str,
    signer: SigningKey | None,
) -> str | None:
    """Sign and publish the version's verification record (mirror.airgap.verification) for
    the object `digest` describes, once every check of the set and of that object passed;
    its bucket key, or None without a receipt key on this side."""
    if signer is None:
        return None
    manifest = verified.manifest
    facts = ImportFacts(
        domain=item.domain,
        version=item.version,
        object_name=bundle_key(store, item),
        sha256=digest.sha256,
        size=digest.size,
        tree_sha256=item.tree_sha256,
        sequence=manifest.sequence,
        manifest_sha256=verified.manifest_sha256,
        source_id=manifest.source_id,
        site=manifest.site or DEFAULT_SITE,
        transfer_key_id=verified.key_id,
        provenance_sha256=(
            provenance.provenance_digest(store, item.domain, item.version)
            if item.provenance is not None
            else None
        ),
        delta_base=item.delta.base_version if item.delta is not None else None,
        verified_at=at,
    )
    return provenance.publish_record(store, facts, signer)


def _published(
    store: ObjectStore,
    item: ManifestItem,
    document: layout.VersionManifest,
    key: str,
    status: Status,
) -> tuple[ImportedItem, layout.IndexEntry]:
    """The imported item and its index entry, as the version's manifest `document` says."""
    entry = layout.IndexEntry(
        version=item.version,
        sha256=document.sha256,
        size=document.size,
        object=document.object,
        manifest=key,
        imported_at=document.imported_at,
    )
    ref = VersionRef(
        item.domain,
        VersionLabel(item.version),
        document.sha256,
        document.size,
        document.archive_format,
    )
    published = ImportedItem(ref, document.object, key, status, item.tree_sha256)
    return published, entry
