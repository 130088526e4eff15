"""Every object an import will write for a version, checked before the first is published
(issue 38, class 4): a version's `manifest.json`, its index entry and its verification record
here; its provenance and inventory by mirror.airgap.provenance (`to_publish`,
`check_inventories`), its manifest's tree by `_admission.check_versions_there`; a bundle
object of other bytes is refused by the staging before any upload is completed.

What is already at a key and is the object this import would write there (an import killed
and run again) passes; anything else refuses the set (IntegrityError, exit 5) with the bucket
unchanged, so an object no index names is never left behind. A version the bucket holds with
the same tree in other bytes ("already there", `same_tree_there`) writes nothing but, when
this very set published it, the record it may lack (`_manifests.published_by`): that record
is checked. The digest of a spliced delta's object is learnt only as it is written: its record
is then compared with the object already at the bundle's key, when there is one.
"""

from __future__ import annotations

from collections.abc import Mapping

from mirror.airgap import layout, publish
from mirror.airgap.importer._bundles import bundle_key, same_tree_there
from mirror.airgap.provenance import RECORD_IDENTITY, check_record_there
from mirror.airgap.s3.objectstore import ObjectStore
from mirror.errors import IntegrityError
from mirror.transferset.format import Manifest, ManifestItem
from mirror.transferset.keys import PublicKey

NEVER = "objects are never overwritten"


def check_conflicts(
    store: ObjectStore,
    manifest: Manifest,
    bases: publish.Bases,
    record_keys: Mapping[str, PublicKey] | None = None,
) -> None:
    """Refuse (exit 5), before any upload, a set one of whose versions would meet another
    object at a key the import writes (module docstring). `record_keys`: the receipt keys a
    record already there must verify with (none given: its metadata is all that is read)."""
    indexes: dict[str, dict[str, layout.IndexEntry]] = {}
    for item in manifest.items:
        kept = same_tree_there(store, item)
        if kept is not None:
            if (kept.transfer_sequence, kept.source_id) == (manifest.sequence, manifest.source_id):
                _check_record(store, manifest.sequence, item, kept.sha256, record_keys)
            continue
        sha256 = publish.expected(item, bases).sha256
        if item.domain not in indexes:
            index = layout.read_index(store, item.domain)
            indexes[item.domain] = {e.version: e for e in index.versions} if index else {}
        _check_manifest(store, manifest.sequence, item, sha256)
        _check_index_entry(store, indexes[item.domain].get(item.version), item, sha256)
        _check_record(store, manifest.sequence, item, sha256, record_keys)


def _check_manifest(store: ObjectStore, sequence: int, item: ManifestItem, sha: str | None) -> None:
    """A manifest there of the same tree (another tree: `check_versions_there`) must name the
    object this import writes."""
    stored = layout.read_version_manifest(store, item.domain, item.version)
    if stored is None:
        return
    if stored.object != bundle_key(store, item) or sha not in (None, stored.sha256):
        key = layout.version_manifest_key(store, item.domain, item.version)
        raise IntegrityError(
            f"{store.bucket}/{key} describes object {stored.object} ({stored.sha256[:12]}), "
            f"not the one set {sequence} publishes for {item.label}; refused, nothing was "
            "published",
            hint=f"{NEVER}: find out which is right before removing one",
        )


def _check_index_entry(
    store: ObjectStore, entry: layout.IndexEntry | None, item: ManifestItem, sha: str | None
) -> None:
    """An index entry for the version must list the object this import writes."""
    if entry is None or sha is None or entry.sha256 == sha:
        return
    key = layout.index_key(store, item.domain)
    raise IntegrityError(
        f"{store.bucket}/{key} lists {item.label} with sha256 {entry.sha256[:12]}, and the "
        f"set publishes {sha[:12]}; refused, nothing was published",
        hint=f"{NEVER}: find out which is right before changing the index",
    )


def _check_record(
    store: ObjectStore,
    sequence: int,
    item: ManifestItem,
    sha: str | None,
    record_keys: Mapping[str, PublicKey] | None,
) -> None:
    """A verification record there must be about the object this import publishes, and
    verify with a receipt key this side trusts (`check_record_there`)."""
    key = layout.record_key(store, item.domain, item.version)
    head = store.head(key)
    if head is None:
        return
    if sha is None:  # a splice: the object already there, if any, is the one it is about
        bundle = store.head(bundle_key(store, item))
        if bundle is not None and bundle["sha256"] is None:
            return  # its digest is read back when the version is published
        sha = bundle["sha256"] if bundle is not None else None
    about = head["metadata"].get(RECORD_IDENTITY)
    if about is not None and about == sha:
        if record_keys:
            check_record_there(store, item.domain, item.version, about, record_keys)
        return
    raise IntegrityError(
        f"{store.bucket}/{key} is a verification record about object "
        f"{str(about)[:12]}, not the one set {sequence} publishes for {item.label}; refused, "
        "nothing was published",
        hint=_record_remedy(store, item),
    )


def _record_remedy(store: ObjectStore, item: ManifestItem) -> str:
    """What to do: a record left by an older `chart gc` (the journal says it removed the
    version) is deleted with the rest of that version's evidence; anything else is looked
    into first."""
    journal = layout.read_gc_journal(store, item.domain)
    removed = journal.removed_at(item.version) if journal is not None else None
    if removed is None:
        return f"find out who wrote it; {NEVER}"
    keys = " ".join(
        f"s3://{store.bucket}/{key(store, item.domain, item.version)}"
        for key in (layout.record_key, layout.provenance_key, layout.inventory_key)
    )
    return (
        f"chart gc removed {item.label} at {removed} and a release before this one left its "
        f"evidence behind: delete {keys} (aws s3 rm), then run the import again"
    )
