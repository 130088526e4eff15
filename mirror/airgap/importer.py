"""Import a verified transfer set into the object store and write its receipt (air-gapped side).

Promises:
- Nothing is read from the set before the bucket has answered (a missing
  bucket or refused credentials is a one-line error) and has shown that it verifies
  checksums and honours conditional writes (mirror.airgap.s3.probe), and nothing is published
  before the whole set has been verified and the sequence checked against the
  bucket's import state (replay and rollback are refused, exit 5). Told `skip_imported`, a
  set this bucket already imported (its sequence, with the very manifest recorded) is
  verified and then left alone: nothing is published, promoted or written, and the result
  says `already_imported` (a re-run of a finished import is a success, not a replay).
- The media is read once: the signature, listing, sizes, tool and SHA256SUMS are
  checked first, then every bundle is staged (mirror.airgap.s3.multipart) straight
  from the set's parts, each part checked against its signed sha256 as it passes
  and the whole blob hashed on the way up. No bundle is completed before every
  bundle of the set has matched; on any mismatch or error every upload of the
  import is aborted, so nothing of a bad set is ever visible. A bundle already in
  the bucket (same sha256 and size: a re-run after a kill) is not uploaded again.
- A version the bucket already holds with the same tree in other bytes (published
  from a delta as a rebuilt archive, and now carried whole, or the other way round:
  the remedy for a refused delta, `pack --full --from-set N`, or `pack --all`) is
  "already there": nothing is uploaded and its manifest is kept, never refused.
- Order: the bundles (completed together), then each version's provenance and its
  verification record (signed with this side's receipt key, when it has one), its
  `manifest.json` (naming the record),
  then each domain's `index.json`, then the promotions asked for, then the receipt on disk, and
  the bucket's import state last. Every index (and, promoting, `current.json`) is read
  before any upload, so a damaged one (exit 5) refuses the set with the bucket unchanged. An import
  killed at any point and run again
  skips what is already there (after checking its hash metadata) and publishes
  every version exactly once; the index only ever lists versions whose bundle
  and manifest are complete; once the state records a set, its receipt exists.
- The import side needs no SQL database and no connected-side code: `ack` and
  `push` live in mirror.outbound; promotion comes in as a callable (`promote`).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from mirror.airgap import layout, provenance, publish
from mirror.airgap.s3.multipart import Outcome, Reader, StagedUpload, Staging
from mirror.airgap.s3.objectstore import ObjectStore
from mirror.airgap.s3.probe import require_safe_writes
from mirror.airgap.verification import ImportFacts
from mirror.errors import ConfigError, IntegrityError
from mirror.fsutil import atomic_write_bytes
from mirror.integrity import Digest
from mirror.sites import DEFAULT_SITE
from mirror.timestamps import utcnow
from mirror.transferset.format import RECEIPT, Manifest, ManifestItem, iso_time
from mirror.transferset.keys import PublicKey, SigningKey
from mirror.transferset.reader import (
    VerifiedSet,
    find_damaged_part,
    verify_provenance_files,
    verify_set,
)
from mirror.transferset.receipt import Receipt, ReceiptItem
from mirror.transferset.token import open_signing_key
from mirror.versions import VersionLabel, VersionRef, newest

log = logging.getLogger(__name__)

BUNDLE_SHA256_META = "bundle-sha256"
TREE_SHA256_META = "tree-sha256"

Promote = Callable[[ObjectStore, str, str], Any]
Status = Literal["published", "already there"]


@dataclass(frozen=True)
class ImportedItem:
    """A version of the set as the bucket holds it after the import: its bundle (`ref`), the
    bundle and manifest objects, whether this import published it, and its tree."""

    ref: VersionRef
    object: str
    manifest: str
    status: Status
    tree_sha256: str

    def as_dict(self) -> dict[str, Any]:
        reference = {name: value for name, value in self.ref.as_dict().items() if name != "format"}
        return {
            **reference,
            "object": self.object,
            "manifest": self.manifest,
            "status": self.status,
            "tree_sha256": self.tree_sha256,
        }


@dataclass(frozen=True)
class ImportResult:
    sequence: int
    manifest_sha256: str
    source_id: str
    items: list[ImportedItem]
    replayed: bool
    notes: list[str] = field(default_factory=list)
    receipt: Path | None = None
    receipt_signed_by: str | None = None
    promoted: list[tuple[str, str]] = field(default_factory=list)
    never_seen: list[int] = field(default_factory=list)
    site: str | None = None
    already_imported: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {
            "sequence": self.sequence,
            "site": self.site,
            "never_seen": self.never_seen,
            "manifest_sha256": self.manifest_sha256,
            "source_id": self.source_id,
            "replayed": self.replayed,
            "already_imported": self.already_imported,
            "items": [item.as_dict() for item in self.items],
            "notes": self.notes,
            "receipt": str(self.receipt) if self.receipt else None,
            "receipt_signed_by": self.receipt_signed_by,
            "promoted": [{"domain": d, "version": v} for d, v in self.promoted],
        }


def receipt_key_from(settings_key: Path | str | None) -> SigningKey | None:
    """The key that signs receipts on this side (a file, or a key in a token), if one is
    configured here."""
    return open_signing_key(settings_key) if settings_key else None


# ---- import ---------------------------------------------------------------------------------


def import_set(
    store: ObjectStore,
    set_dir: Path,
    trusted: Mapping[str, PublicKey],
    *,
    allow_replay: bool = False,
    skip_imported: bool = False,
    promote: Promote | None = None,
    receipt_key: SigningKey | None = None,
    receipt_path: Path | None = None,
    now: Callable[[], datetime] = utcnow,
    on_progress: Callable[[int], None] | None = None,
    on_verify_progress: Callable[[int], None] | None = None,
    work_dir: Path | None = None,
    site: str = "",
) -> ImportResult:
    """Verify `set_dir`, then publish it into `store` and write its receipt. `site`: this
    installation's name (`target.site`), when it knows one (`check_site`)."""
    receipt = receipt_path or set_dir / RECEIPT
    admitted = _admit(
        store,
        set_dir,
        trusted,
        receipt,
        allow_replay=allow_replay,
        skip_imported=skip_imported,
        promoting=promote is not None,
        on_verify_progress=on_verify_progress,
        work_dir=work_dir,
        site=site,
    )
    if admitted.already_imported:
        return _already_imported(admitted, receipt)
    verified, notes = admitted.verified, admitted.notes
    imported_at = iso_time(now())
    items, entries = _publish_all(store, admitted, imported_at, on_progress, work_dir, receipt_key)
    for domain, domain_entries in entries.items():
        update_index(store, domain, domain_entries, now=now)
    promoted = _promote_newest(store, verified, list(entries), promote)
    result = _result(admitted, items, promoted)
    signed_by = write_receipt(receipt, result, store, receipt_key, at=imported_at)
    if signed_by is None:
        notes.append(
            "receipt written unsigned and no verification record signed (no "
            "transfer.signing_key on this side): `transfer ack` refuses the receipt unless told "
            "--accept-unsigned"
        )
    record_import(store, verified, at=imported_at)
    return ImportResult(**{**result.__dict__, "receipt": receipt, "receipt_signed_by": signed_by})


def _result(
    admitted: Admitted, items: list[ImportedItem], promoted: list[tuple[str, str]]
) -> ImportResult:
    """What the import did, before its receipt is written."""
    manifest = admitted.verified.manifest
    return ImportResult(
        sequence=manifest.sequence,
        site=manifest.site,
        never_seen=admitted.never_seen,
        manifest_sha256=admitted.verified.manifest_sha256,
        source_id=manifest.source_id,
        items=items,
        replayed=admitted.replayed,
        notes=admitted.notes,
        promoted=promoted,
    )


def _already_imported(admitted: Admitted, receipt: Path) -> ImportResult:
    """The result of a set skipped as already imported: nothing published, the receipt its
    first import wrote named where it still is."""
    sequence = admitted.verified.manifest.sequence
    notes = [f"set {sequence} was already imported here (the same signed manifest): nothing done"]
    if not receipt.is_file():
        notes.append(
            f"no receipt at {receipt}: `mirror transfer import --allow-replay` without --promote "
            "writes it again, changing nothing in the bucket"
        )
    found = receipt if receipt.is_file() else None
    return replace(_result(admitted, [], []), notes=notes, already_imported=True, receipt=found)


def _admit(
    store: ObjectStore,
    set_dir: Path,
    trusted: Mapping[str, PublicKey],
    receipt: Path,
    *,
    allow_replay: bool,
    skip_imported: bool = False,
    promoting: bool,
    on_verify_progress: Callable[[int], None] | None,
    work_dir: Path | None,
    site: str = "",
) -> Admitted:
    """Every refusal that comes before a byte is published (module docstring): the receipt's
    place, the bucket and its writes, the set, its sequence, its deltas, its provenance, the
    documents it will change."""
    if set_dir.is_dir() and not os.access(receipt.parent, os.W_OK):
        raise ConfigError(
            f"cannot write the receipt to {receipt.parent} (read-only?)",
            hint="pass --receipt PATH on a writable disk",
        )
    store.check_access()
    require_safe_writes(store)
    verified = verify_set(set_dir, trusted, check_blobs=False, on_progress=on_verify_progress)
    check_site(verified, site)
    notes: list[str] = []
    state = layout.read_import_state(store)
    check_chain_site(state, verified)
    if skip_imported and imported_before(state, verified):
        return Admitted(verified, True, notes, {}, {}, already_imported=True)
    replayed = check_sequence(state, verified, allow_replay=allow_replay, notes=notes)
    bases = publish.check_deltas(store, verified.manifest, work_dir=work_dir)
    for domain in dict.fromkeys(item.domain for item in verified.manifest.items):
        layout.read_index(store, domain)  # a damaged document refuses the set before any upload
        if promoting:
            layout.read_current(store, domain)
    if verified.manifest.tool is not None:
        notes.append(
            f"{verified.manifest.tool.path} (the mirror tool) stays beside the set; "
            "it is not published"
        )
    carried = verify_provenance_files(set_dir, verified.manifest, trusted)
    carried = provenance.to_publish(store, verified.manifest, carried, trusted)
    provenance.check_inventories(store, verified.manifest, carried)
    check_versions_there(store, verified.manifest)
    gap = [] if replayed else never_seen(state, verified.manifest.sequence)
    return Admitted(verified, replayed, notes, bases, carried, gap)


@dataclass(frozen=True)
class Admitted:
    """A set `_admit` let in: what publishing it needs."""

    verified: VerifiedSet
    replayed: bool
    notes: list[str]
    bases: publish.Bases
    provenance: Mapping[tuple[str, str], bytes]
    never_seen: list[int] = field(default_factory=list)
    already_imported: bool = False
    """This very set is in the bucket's import state, and the import was told to skip it."""


def _publish_all(
    store: ObjectStore,
    admitted: Admitted,
    imported_at: str,
    on_progress: Callable[[int], None] | None,
    work_dir: Path | None = None,
    signer: SigningKey | None = None,
) -> tuple[list[ImportedItem], dict[str, list[layout.IndexEntry]]]:
    verified = admitted.verified
    there = {
        _bundle(store, item): stored
        for item in verified.manifest.items
        if (stored := same_tree_there(store, item)) is not None
    }
    bundles = stage_bundles(
        store, verified, on_progress, work_dir=work_dir, there=there, bases=admitted.bases
    )
    # Every bundle matched and is complete: each version's inventory, then its provenance,
    # go before its manifest.
    provenance.publish_inventories(store, verified.path, verified.manifest, admitted.provenance)
    provenance.publish(store, verified.manifest, admitted.provenance)
    items: list[ImportedItem] = []
    entries: dict[str, list[layout.IndexEntry]] = {}
    for item in verified.manifest.items:
        key = _bundle(store, item)
        at, kept = imported_at, there.get(key)
        published, entry = publish_version(
            store, verified, item, bundles[key], imported_at=at, there=kept, signer=signer
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


def check_versions_there(store: ObjectStore, manifest: Manifest) -> None:
    """Refuse (exit 5), before anything is uploaded, an item whose version the bucket holds
    as another site (its manifest names another tree): publishing its bundle would leave an
    object no index names."""
    for item in manifest.items:
        stored = layout.read_version_manifest(store, item.domain, item.version)
        if stored is not None and stored.tree_sha256 != item.tree_sha256:
            key = layout.version_manifest_key(store, item.domain, item.version)
            raise IntegrityError(
                f"{store.bucket}/{key} describes tree {stored.tree_sha256[:12]}, and set "
                f"{manifest.sequence} carries {item.label} as tree {item.tree_sha256[:12]}; "
                "refused, nothing was published",
                hint="objects are never overwritten: find out which is right before removing one",
            )


def stage_bundles(
    store: ObjectStore,
    verified: VerifiedSet,
    on_progress: Callable[[int], None] | None = None,
    *,
    work_dir: Path | None = None,
    there: Mapping[str, layout.VersionManifest] | None = None,
    bases: publish.Bases | None = None,
) -> dict[str, Staged]:
    """Upload every version's bundle straight from the set's parts (a delta's: the archive
    made from its base, mirror.airgap.publish); complete them only once all have matched
    the signed manifest (else all are aborted); the outcome and the object's digest by key.
    Objects in `there` (by key: versions there with the same tree, `same_tree_there`) are
    not sent."""
    skipped: dict[str, Staged] = {}
    uploads: list[StagedUpload] = []
    with Staging(store) as staging:
        for item in verified.manifest.items:
            key = _bundle(store, item)
            if there and key in there:
                skipped[key] = Staged("exists", Digest(there[key].sha256, there[key].size))
                if on_progress is not None:
                    on_progress(there[key].size)
                continue
            with publish.open_published(
                verified.path,
                item,
                store,
                sequence=verified.manifest.sequence,
                site=verified.manifest.site,
                work_dir=work_dir,
                bases=bases,
            ) as reader:
                uploads.append(_stage(staging, verified, item, key, reader, bases, on_progress))
                if isinstance(reader, publish.TreeChecked):
                    reader.finish()  # an object already there was not read: its tree still is
        outcomes = staging.complete()
    trees = {_bundle(store, item): item.tree_sha256 for item in verified.manifest.items}
    staged = {
        u.key: Staged(outcomes[u.key], u.digest or _read_digest(store, u.key, trees[u.key]))
        for u in uploads
    }
    return {**staged, **skipped}


def _stage(
    staging: Staging,
    verified: VerifiedSet,
    item: ManifestItem,
    key: str,
    reader: Reader,
    bases: publish.Bases | None,
    on_progress: Callable[[int], None] | None,
) -> StagedUpload:
    """Stage `item`'s object at `key` from `reader`; a damaged part of a whole item is
    named."""
    try:
        return staging.stage(
            key,
            reader,
            **_expected(item, bases),
            content_type=_content_type(item.archive_format),
            on_progress=on_progress,
        )
    except IntegrityError as exc:
        named = find_damaged_part(verified.path, item) if item.delta is None else None
        raise (named or exc) from None


@dataclass(frozen=True)
class Staged:
    """A bundle object in place: whether this import created it, and its sha256 and size
    (a spliced delta's learnt as it was written)."""

    outcome: Outcome
    digest: Digest


def _expected(item: ManifestItem, bases: publish.Bases | None) -> dict[str, Any]:
    """What the staged upload of `item` must hash to (`publication`, over its base); a
    digest learnt as it is written (a splice) names the object by its tree instead."""
    published = publish.expected(item, bases)
    if published.sha256 is not None:
        return {"sha256": published.sha256, "size": published.size}
    return {"identity": {TREE_SHA256_META: item.tree_sha256}, "size_hint": published.size_hint}


def _read_digest(store: ObjectStore, key: str, tree_sha256: str) -> Digest:
    """The digest of an object already in place that this import did not write (a spliced
    delta's, published by an import killed before the version's manifest): read back, its
    tree proved the signed one (its metadata only claims it; the digest recorded is what
    `chart check` vouches for)."""
    head = store.head(key)
    where = f"{store.bucket}/{key}"
    try:
        tree, digest = publish.read_back(store, key, head["size"] if head is not None else 0)
    except IntegrityError as exc:
        tree, digest = exc.message, None
    if tree != tree_sha256 or digest is None:
        held = f"tree {tree[:12]}" if digest is not None else f"no such tree ({tree})"
        raise IntegrityError(
            f"{where} already exists and names tree {tree_sha256[:12]} but holds {held}; "
            "objects are never overwritten",
            hint="remove it by hand only if you are sure it is wrong",
        )
    return digest


def same_tree_there(store: ObjectStore, item: ManifestItem) -> layout.VersionManifest | None:
    """The version's manifest when the bucket holds `item`'s version, complete, with the same
    tree in other bytes (module docstring); None otherwise (the ordinary path decides)."""
    stored = layout.read_version_manifest(store, item.domain, item.version)
    if stored is None or stored.sha256 == item.published_sha256:
        return None
    if stored.tree_sha256 != item.tree_sha256 or stored.object != _bundle(store, item):
        return None
    head = store.head(stored.object)
    if head is None or head["size"] != stored.size or head["sha256"] not in (None, stored.sha256):
        return None
    return stored


def _bundle(store: ObjectStore, item: ManifestItem) -> str:
    return layout.bundle_key(store, item.domain, item.version, item.archive_format)


def _promote_newest(
    store: ObjectStore, verified: VerifiedSet, domains: list[str], promote: Promote | None
) -> list[tuple[str, str]]:
    promoted: list[tuple[str, str]] = []
    if promote is None:
        return promoted
    for domain in domains:
        label = newest(i.version for i in verified.manifest.items if i.domain == domain)
        assert label is not None  # every domain given has an item in the set
        promote(store, domain, str(label))
        promoted.append((domain, str(label)))
    return promoted


def imported_before(state: layout.ImportState | None, verified: VerifiedSet) -> bool:
    """This very set (its sequence, with the same signed manifest) is in the import state."""
    history = state.history() if state is not None else {}
    return history.get(verified.manifest.sequence, "") == verified.manifest_sha256


def check_sequence(
    state: layout.ImportState | None,
    verified: VerifiedSet,
    *,
    allow_replay: bool,
    notes: list[str],
) -> bool:
    """Refuse replays, rollbacks and forks of the chain (exit 5); True when this is a replay."""
    manifest = verified.manifest
    if state is None:
        if manifest.previous_sequence is not None:
            notes.append(
                f"first import into this bucket; sets before {manifest.sequence} were not "
                "imported here"
            )
        return False
    last, last_hash = state.last_sequence, state.manifest_sha256
    history = state.history()
    sequence = manifest.sequence
    problem: str | None = None
    replay = False
    if imported_before(state, verified):
        replay = True
        problem = f"set {sequence} was already imported (replay)"
    elif sequence in history:
        problem = f"set {sequence} was already imported with a different manifest"
    elif sequence < last:
        problem = f"set {sequence} is older than the newest imported set {last} (rollback)"
    elif manifest.previous_sequence == last and manifest.previous_manifest_sha256 != last_hash:
        problem = (
            f"set {sequence} follows a set {last} whose manifest differs from the one "
            "imported here (broken chain)"
        )
    if problem is not None:
        if not allow_replay:
            raise IntegrityError(f"{problem}; refused", hint="pass --allow-replay if intended")
        notes.append(f"{problem}; allowed by --allow-replay")
        return replay
    notes.extend(_gap_notes(state, manifest))
    return False


def _gap_notes(state: layout.ImportState, manifest: Manifest) -> list[str]:
    """What a set that does not follow the newest imported one says (issue 22): which sets
    never arrived, and why importing this one is safe all the same."""
    last, sequence = state.last_sequence, manifest.sequence
    gap = never_seen(state, sequence)
    if gap:
        return [
            f"set{'s' if len(gap) > 1 else ''} {_sequences(gap)} never arrived here (the "
            f"newest set imported is {last}); importing set {sequence} is safe: each of its "
            "versions is whole or a delta whose base this bucket holds, checked before any "
            "upload"
        ]
    if manifest.previous_sequence != last:
        return [
            f"set {sequence} follows set {manifest.previous_sequence}, but the newest set "
            f"imported here is {last}: the sets in between were not imported"
        ]
    return []


def never_seen(state: layout.ImportState | None, sequence: int) -> list[int]:
    """The sequences between the newest imported here and `sequence` never imported here
    (a lost or skipped set of this site's chain)."""
    if state is None or sequence <= state.last_sequence + 1:
        return []
    history = state.history()
    return [n for n in range(state.last_sequence + 1, sequence) if n not in history]


def _sequences(numbers: list[int]) -> str:
    if len(numbers) > 5:
        return (
            f"{numbers[0]}-{numbers[-1]}"
            if numbers == list(range(numbers[0], numbers[-1] + 1))
            else ", ".join(map(str, numbers[:5])) + ", …"
        )
    return ", ".join(map(str, numbers))


def check_site(verified: VerifiedSet, site: str) -> None:
    """A set packed for another named site is refused (exit 5) when this installation knows
    its own name (`target.site`); a set that names no site (one implicit site), or an
    installation that names none, is not checked."""
    packed_for = verified.manifest.site
    if site and packed_for is not None and packed_for != site:
        raise IntegrityError(
            f"set {verified.manifest.sequence} was packed for site {packed_for}, and this is "
            f"site {site} (target.site); refused, nothing was published",
            hint=f"carry it to site {packed_for}; for this site run `mirror transfer pack "
            f"--site {site} OUT` on the connected side",
        )


def check_chain_site(state: layout.ImportState | None, verified: VerifiedSet) -> None:
    """A bucket follows one site's chain: a set of another site (exit 5) would publish into
    the wrong installation and make that site's own next set look like a rollback."""
    packed_for = verified.manifest.site or DEFAULT_SITE
    if state is None or state.site is None or state.site == packed_for:
        return
    raise IntegrityError(
        f"set {verified.manifest.sequence} was packed for site {packed_for}, and this bucket "
        f"follows site {state.site}'s chain (its newest set is {state.last_sequence}); "
        "refused, nothing was published",
        hint=f"carry it to site {packed_for}; for this bucket run `mirror transfer pack "
        f"--site {state.site} OUT` on the connected side",
    )


def publish_version(
    store: ObjectStore,
    verified: VerifiedSet,
    item: ManifestItem,
    bundle: Staged,
    *,
    imported_at: str,
    there: layout.VersionManifest | None = None,
    signer: SigningKey | None = None,
) -> tuple[ImportedItem, layout.IndexEntry]:
    """The version's manifest, once its bundle is in place (or `there`: the version's
    manifest, the same tree in other bytes, kept) and its verification record signed by
    `signer` (when this side has a receipt key); returns the item and its index entry."""
    key = layout.version_manifest_key(store, item.domain, item.version)
    if there is not None:
        return _published(store, item, there, key, "already there")
    sha256, size = bundle.digest.sha256, bundle.digest.size
    record = write_record(store, verified, item, bundle.digest, imported_at, signer)
    document = layout.VersionManifest(
        domain=item.domain,
        version=item.version,
        object=_bundle(store, item),
        sha256=sha256,
        size=size,
        archive_format=item.archive_format,
        tree_sha256=item.tree_sha256,
        exported_at=item.exported_at,
        imported_at=imported_at,
        transfer_sequence=verified.manifest.sequence,
        source_id=verified.manifest.source_id,
        record=record,
        **publish.manifest_fields(item),
    )
    manifest_status = store.put_immutable(
        key, document.to_bytes(), identity={BUNDLE_SHA256_META: sha256}
    )
    if manifest_status == "exists":
        stored = layout.read_version_manifest(store, item.domain, item.version)
        if stored is None or stored.sha256 != sha256 or stored.object != document.object:
            raise IntegrityError(
                f"{store.bucket}/{key} describes another bundle; objects are never overwritten"
            )
        document = stored
    status: Status = (
        "published" if "created" in (bundle.outcome, manifest_status) else "already there"
    )
    return _published(store, item, document, key, status)


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
        object_name=_bundle(store, item),
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


def _content_type(archive_format: str) -> str:
    return {
        "zip": "application/zip",
        "tar.gz": "application/gzip",
        "tar": "application/x-tar",
        "tar.xz": "application/x-xz",
        "tar.bz2": "application/x-bzip2",
    }.get(archive_format, "application/octet-stream")


def update_index(
    store: ObjectStore,
    domain: str,
    entries: list[layout.IndexEntry],
    *,
    now: Callable[[], datetime] = utcnow,
) -> layout.Index | None:
    """Add complete versions to DOMAIN/index.json (conditional read-modify-write)."""
    key = layout.index_key(store, domain)

    def add(current: layout.Index | None) -> layout.Index | None:
        versions = {entry.version: entry for entry in current.versions} if current else {}
        changed = current is None
        for entry in entries:
            existing = versions.get(entry.version)
            if existing is not None and existing.sha256 != entry.sha256:
                raise IntegrityError(
                    f"{store.bucket}/{key} lists {domain} {entry.version} with another sha256"
                )
            if existing is None:
                versions[entry.version] = entry
                changed = True
        if not changed:
            return None
        fields = {
            "domain": domain,
            "updated_at": iso_time(now()),
            "versions": [versions[label] for label in sorted(map(VersionLabel, versions))],
        }
        if current is None:
            return layout.Index.model_validate(fields)
        return current.model_copy(update=fields)

    return layout.update_document(store, key, layout.Index, add)


def record_import(
    store: ObjectStore, verified: VerifiedSet, *, at: str
) -> layout.ImportState | None:
    """Write the import state last: the newest sequence, its manifest hash, a bounded history."""
    manifest = verified.manifest

    def add(state: layout.ImportState | None) -> layout.ImportState | None:
        if state is not None and state.has(manifest.sequence, verified.manifest_sha256):
            return None
        record = layout.ImportRecord(
            sequence=manifest.sequence,
            manifest_sha256=verified.manifest_sha256,
            source_id=manifest.source_id,
            at=at,
        )
        history = [*(state.imported if state else []), record][-layout.MAX_IMPORT_HISTORY :]
        fields: dict[str, Any] = {"imported": history, "site": manifest.site or DEFAULT_SITE}
        if state is None or manifest.sequence >= state.last_sequence:
            fields.update(
                last_sequence=manifest.sequence,
                manifest_sha256=verified.manifest_sha256,
                source_id=manifest.source_id,
            )
        if state is None:
            return layout.ImportState.model_validate(fields)
        return state.model_copy(update=fields)

    return layout.update_document(store, layout.state_key(store), layout.ImportState, add)


# ---- receipts -------------------------------------------------------------------------------


def write_receipt(
    path: Path,
    result: ImportResult,
    store: ObjectStore,
    key: SigningKey | None,
    *,
    at: str,
) -> str | None:
    """Write receipt.json (and its signature when a key is configured); returns the key id."""
    receipt = Receipt(
        sequence=result.sequence,
        manifest_sha256=result.manifest_sha256,
        source_id=result.source_id,
        bucket=store.bucket,
        prefix=store.prefix,
        imported_at=at,
        signed_by=key.key_id if key else None,
        items=[
            ReceiptItem(
                domain=item.ref.domain,
                version=str(item.ref.label),
                sha256=item.ref.sha256,
                size=item.ref.size,
                object=item.object,
                status=item.status,
                tree_sha256=item.tree_sha256,
            )
            for item in result.items
        ],
    )
    data = receipt.to_bytes()
    signature_path = path.with_name(path.name + ".sig")
    atomic_write_bytes(path, data)
    if key is not None:
        atomic_write_bytes(signature_path, key.signature_document(data))
        return key.key_id
    signature_path.unlink(missing_ok=True)
    return None
