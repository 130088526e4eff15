"""Import a verified transfer set into the object store; receipts and their acknowledgement; push.

Promises:
- Nothing is read from the set before the bucket has answered (a missing
  bucket or refused credentials is a one-line error), and nothing is published
  before the whole set has been verified and the sequence checked against the
  bucket's import state (replay and rollback are refused, exit 5).
- Order: each version's bundle, then its `manifest.json`, then each domain's
  `index.json`, then the promotions asked for, then the receipt on disk, and
  the bucket's import state last. An import killed at any point and run again
  skips what is already there (after checking its hash metadata) and publishes
  every version exactly once; the index only ever lists versions whose bundle
  and manifest are complete; once the state records a set, its receipt exists.
- The import side needs no SQL database; `ack` and `push` use the connected
  side's index.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from sqlalchemy import select

from mirror.airgap.objectstore import ObjectStore
from mirror.errors import ConfigError, IntegrityError, NotFound, TemporaryFailure
from mirror.fsutil import atomic_write_bytes
from mirror.store.app import App
from mirror.store.models import Transfer, TransferItem, Version
from mirror.timestamps import utcnow
from mirror.transferset.format import (
    RECEIPT,
    BlobReader,
    ManifestItem,
    VerifiedSet,
    canonical_json,
    forget_transfer,
    iso_time,
    pack,
    parse_strict_json,
    signing_key_from,
    temporary_set_dir,
    verify_set,
)
from mirror.transferset.keys import (
    PublicKey,
    SigningKey,
    load_signing_key,
    load_trusted_keys,
    read_signature_file,
)
from mirror.versions import label_key

log = logging.getLogger(__name__)

STATE_KEY = ("_mirror", "import-state.json")
MAX_HISTORY = 1000
POINTER_ATTEMPTS = 5
BUNDLE_SHA256_META = "bundle-sha256"

Promote = Callable[[ObjectStore, str, str], Any]
Status = Literal["published", "already there"]


@dataclass(frozen=True)
class ImportedItem:
    domain: str
    version: str
    sha256: str
    size: int
    object: str
    manifest: str
    status: Status


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

    def as_dict(self) -> dict[str, Any]:
        return {
            "sequence": self.sequence,
            "manifest_sha256": self.manifest_sha256,
            "source_id": self.source_id,
            "replayed": self.replayed,
            "items": [item.__dict__ for item in self.items],
            "notes": self.notes,
            "receipt": str(self.receipt) if self.receipt else None,
            "receipt_signed_by": self.receipt_signed_by,
            "promoted": [{"domain": d, "version": v} for d, v in self.promoted],
        }


def promote_hook() -> Promote:
    """`mirror.airgap.chart.promote` when the chart module provides it; ConfigError otherwise."""
    try:
        chart = importlib.import_module("mirror.airgap.chart")
    except ImportError:
        chart = None
    hook = getattr(chart, "promote", None)
    if not callable(hook):
        raise ConfigError("--promote is not available: this build has no chart promotion")
    return hook  # type: ignore[no-any-return]


def receipt_key_from(settings_key: Path | None) -> SigningKey | None:
    """The key that signs receipts on this side, if one is configured here."""
    return load_signing_key(Path(settings_key)) if settings_key else None


# ---- import ---------------------------------------------------------------------------------


def import_set(
    store: ObjectStore,
    set_dir: Path,
    trusted: Mapping[str, PublicKey],
    *,
    allow_replay: bool = False,
    promote: Promote | None = None,
    receipt_key: SigningKey | None = None,
    receipt_path: Path | None = None,
    now: Callable[[], datetime] = utcnow,
    on_progress: Callable[[int], None] | None = None,
    on_verify_progress: Callable[[int], None] | None = None,
) -> ImportResult:
    """Verify `set_dir`, then publish it into `store` and write its receipt."""
    receipt = receipt_path or set_dir / RECEIPT
    if set_dir.is_dir() and not os.access(receipt.parent, os.W_OK):
        raise ConfigError(
            f"cannot write the receipt to {receipt.parent} (read-only?)",
            hint="pass --receipt PATH on a writable disk",
        )
    store.check_access()
    verified = verify_set(set_dir, trusted, on_progress=on_verify_progress)
    state_key = store.key(*STATE_KEY)
    state, _ = store.read_json(state_key)
    notes: list[str] = []
    replayed = check_sequence(state, verified, allow_replay=allow_replay, notes=notes)
    manifest = verified.manifest
    if manifest.tool is not None:
        notes.append(
            f"{manifest.tool.path} (the mirror tool) stays beside the set; it is not published"
        )
    imported_at = iso_time(now())
    items: list[ImportedItem] = []
    entries: dict[str, list[dict[str, Any]]] = {}
    for item in manifest.items:
        published, entry = publish_version(
            store, verified, item, imported_at=imported_at, on_progress=on_progress
        )
        items.append(published)
        entries.setdefault(item.domain, []).append(entry)
        log.info(
            "version %s %s",
            published.status,
            item.label,
            extra={"domain": item.domain, "version": item.version, "status": published.status},
        )
    for domain, domain_entries in entries.items():
        update_index(store, domain, domain_entries, now=now)
    promoted: list[tuple[str, str]] = []
    if promote is not None:
        for domain in entries:
            newest = max((i.version for i in manifest.items if i.domain == domain), key=label_key)
            promote(store, domain, newest)
            promoted.append((domain, newest))
    result = ImportResult(
        sequence=manifest.sequence,
        manifest_sha256=verified.manifest_sha256,
        source_id=manifest.source_id,
        items=items,
        replayed=replayed,
        notes=notes,
        promoted=promoted,
    )
    signed_by = write_receipt(receipt, result, store, receipt_key, at=imported_at)
    if signed_by is None:
        notes.append("receipt written unsigned (no transfer.signing_key on this side)")
    record_import(store, verified, at=imported_at)
    return ImportResult(**{**result.__dict__, "receipt": receipt, "receipt_signed_by": signed_by})


def check_sequence(
    state: dict[str, Any] | None, verified: VerifiedSet, *, allow_replay: bool, notes: list[str]
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
    last = state.get("last_sequence")
    last_hash = state.get("manifest_sha256")
    if not isinstance(last, int):
        raise IntegrityError("the bucket's import state has no valid last_sequence")
    history = {
        entry.get("sequence"): entry.get("manifest_sha256")
        for entry in state.get("imported", [])
        if isinstance(entry, dict)
    }
    history.setdefault(last, last_hash)
    sequence, digest = manifest.sequence, verified.manifest_sha256
    problem: str | None = None
    replay = False
    if sequence in history and history[sequence] == digest:
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
    if manifest.previous_sequence != last:
        notes.append(
            f"set {sequence} follows set {manifest.previous_sequence}, but the newest set "
            f"imported here is {last}: the sets in between were not imported"
        )
    return False


def bundle_key(store: ObjectStore, item: ManifestItem) -> str:
    return store.key(item.domain, item.version, f"bundle.{item.archive_format}")


def manifest_key(store: ObjectStore, item: ManifestItem) -> str:
    return store.key(item.domain, item.version, "manifest.json")


def publish_version(
    store: ObjectStore,
    verified: VerifiedSet,
    item: ManifestItem,
    *,
    imported_at: str,
    on_progress: Callable[[int], None] | None = None,
) -> tuple[ImportedItem, dict[str, Any]]:
    """Bundle first, then its manifest; returns the item and its index entry."""
    bundle = bundle_key(store, item)
    with BlobReader(verified.path, item, check_whole=False) as reader:
        bundle_status = store.upload_blob(
            bundle,
            reader,
            sha256=item.sha256,
            size=item.size,
            content_type=_content_type(item.archive_format),
            on_progress=on_progress,
        )
    key = manifest_key(store, item)
    document = {
        "format": 1,
        "domain": item.domain,
        "version": item.version,
        "object": bundle,
        "sha256": item.sha256,
        "size": item.size,
        "archive_format": item.archive_format,
        "tree_sha256": item.tree_sha256,
        "exported_at": item.exported_at,
        "imported_at": imported_at,
        "transfer_sequence": verified.manifest.sequence,
        "source_id": verified.manifest.source_id,
    }
    manifest_status = store.put_immutable(
        key,
        canonical_json(document) + b"\n",
        identity={BUNDLE_SHA256_META: item.sha256},
    )
    if manifest_status == "exists":
        stored, _ = store.read_json(key)
        if stored is None or stored.get("sha256") != item.sha256 or stored.get("object") != bundle:
            raise IntegrityError(
                f"{store.bucket}/{key} describes another bundle; objects are never overwritten"
            )
        document = stored
    status: Status = (
        "published" if "created" in (bundle_status, manifest_status) else "already there"
    )
    entry = {
        "version": item.version,
        "sha256": item.sha256,
        "size": item.size,
        "object": bundle,
        "manifest": key,
        "imported_at": document.get("imported_at", imported_at),
    }
    return ImportedItem(item.domain, item.version, item.sha256, item.size, bundle, key, status), (
        entry
    )


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
    entries: list[dict[str, Any]],
    *,
    now: Callable[[], datetime] = utcnow,
) -> dict[str, Any]:
    """Add complete versions to DOMAIN/index.json with If-Match; re-read and retry on a race."""
    key = store.key(domain, "index.json")
    for attempt in range(POINTER_ATTEMPTS):
        current, etag = store.read_json(key)
        versions: dict[str, dict[str, Any]] = {}
        for entry in (current or {}).get("versions", []):
            if isinstance(entry, dict) and isinstance(entry.get("version"), str):
                versions[entry["version"]] = entry
        changed = current is None
        for entry in entries:
            existing = versions.get(entry["version"])
            if existing is not None and existing.get("sha256") != entry["sha256"]:
                raise IntegrityError(
                    f"{store.bucket}/{key} lists {domain} {entry['version']} with another sha256"
                )
            if existing is None:
                versions[entry["version"]] = entry
                changed = True
        if not changed and current is not None:
            return current
        document = {
            "format": 1,
            "domain": domain,
            "updated_at": iso_time(now()),
            "versions": [versions[label] for label in sorted(versions, key=label_key)],
        }
        try:
            store.write_json(key, document, if_match=etag)
            return document
        except TemporaryFailure:
            if attempt == POINTER_ATTEMPTS - 1:
                raise
            log.info("index.json of %s changed meanwhile; merging again", domain)
    raise AssertionError("unreachable")


def record_import(store: ObjectStore, verified: VerifiedSet, *, at: str) -> dict[str, Any]:
    """Write the import state last: the newest sequence, its manifest hash, a bounded history."""
    key = store.key(*STATE_KEY)
    manifest = verified.manifest
    for attempt in range(POINTER_ATTEMPTS):
        state, etag = store.read_json(key)
        history = [e for e in (state or {}).get("imported", []) if isinstance(e, dict)]
        if any(
            e.get("sequence") == manifest.sequence
            and e.get("manifest_sha256") == verified.manifest_sha256
            for e in history
        ):
            return state or {}
        history.append(
            {
                "sequence": manifest.sequence,
                "manifest_sha256": verified.manifest_sha256,
                "source_id": manifest.source_id,
                "at": at,
            }
        )
        prior = state or {}
        last = prior.get("last_sequence")
        newest = not isinstance(last, int) or manifest.sequence >= last
        document = {
            "format": 1,
            "last_sequence": manifest.sequence if newest else last,
            "manifest_sha256": verified.manifest_sha256 if newest else prior.get("manifest_sha256"),
            "source_id": manifest.source_id if newest else prior.get("source_id"),
            "imported": history[-MAX_HISTORY:],
        }
        try:
            store.write_json(key, document, if_match=etag)
            return document
        except TemporaryFailure:
            if attempt == POINTER_ATTEMPTS - 1:
                raise
    raise AssertionError("unreachable")


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
    document = {
        "format": 1,
        "kind": "mirror-transfer-receipt",
        "sequence": result.sequence,
        "manifest_sha256": result.manifest_sha256,
        "source_id": result.source_id,
        "bucket": store.bucket,
        "prefix": store.prefix,
        "imported_at": at,
        "signed_by": key.key_id if key else None,
        "items": [
            {
                "domain": item.domain,
                "version": item.version,
                "sha256": item.sha256,
                "object": item.object,
                "status": item.status,
            }
            for item in result.items
        ],
    }
    data = canonical_json(document) + b"\n"
    signature_path = path.with_name(path.name + ".sig")
    atomic_write_bytes(path, data)
    if key is not None:
        atomic_write_bytes(signature_path, key.signature_document(data))
        return key.key_id
    signature_path.unlink(missing_ok=True)
    return None


@dataclass(frozen=True)
class AckResult:
    sequence: int
    manifest_sha256: str
    marked: list[tuple[str, str]]
    already: list[tuple[str, str]]
    signature: str
    complete: bool

    def as_dict(self) -> dict[str, Any]:
        return {
            "sequence": self.sequence,
            "manifest_sha256": self.manifest_sha256,
            "marked": [{"domain": d, "version": v} for d, v in self.marked],
            "already": [{"domain": d, "version": v} for d, v in self.already],
            "signature": self.signature,
            "complete": self.complete,
        }


def read_receipt(path: Path, trusted: Mapping[str, PublicKey]) -> tuple[dict[str, Any], str]:
    """The receipt and how its signature stands: "verified by KEY", "unsigned" or "untrusted"."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise NotFound(f"receipt {path} does not exist") from None
    except OSError as exc:
        raise ConfigError(f"cannot read receipt {path}: {exc.strerror}") from None
    document = parse_strict_json(data, path.name)
    if (
        not isinstance(document, dict)
        or document.get("kind") != "mirror-transfer-receipt"
        or document.get("format") != 1
        or not isinstance(document.get("sequence"), int)
        or not isinstance(document.get("manifest_sha256"), str)
        or not isinstance(document.get("items"), list)
    ):
        raise IntegrityError(f"{path.name}: not a mirror transfer receipt")
    signature_path = path.with_name(path.name + ".sig")
    if not signature_path.exists():
        return document, "unsigned"
    key_id, signature = read_signature_file(signature_path)
    key = trusted.get(key_id)
    if key is None:
        return document, f"signed by untrusted key {key_id[:16]} (not checked)"
    if not key.verify(signature, data):
        raise IntegrityError(f"{signature_path.name}: the signature does not match {path.name}")
    return document, f"verified (key {key_id})"


def ack(app: App, receipt_path: Path, *, now: Callable[[], datetime] = utcnow) -> AckResult:
    """Mark the versions a receipt lists (and its transfer lists) as delivered."""
    trusted: dict[str, PublicKey] = dict(load_trusted_keys(app.settings.target.trusted_keys))
    if app.settings.transfer.signing_key:
        own = signing_key_from(app).public
        trusted[own.key_id] = own
    document, signature = read_receipt(receipt_path, trusted)
    digest = document["manifest_sha256"]
    moment = now()
    marked: list[tuple[str, str]] = []
    already: list[tuple[str, str]] = []
    listed = {
        (entry.get("domain"), entry.get("version"), entry.get("sha256"))
        for entry in document["items"]
        if isinstance(entry, dict)
    }
    with app.db.session() as session:
        transfer = session.execute(
            select(Transfer).where(Transfer.manifest_sha256 == digest)
        ).scalar_one_or_none()
        if transfer is None:
            raise NotFound(
                f"no transfer set packed here has manifest {digest[:16]}…",
                hint="acknowledge the receipt on the host that packed the set",
            )
        if transfer.sequence != document["sequence"]:
            raise IntegrityError(
                f"{receipt_path.name}: sequence {document['sequence']} does not match the "
                f"packed set {transfer.sequence}"
            )
        versions = session.execute(
            select(Version)
            .join(TransferItem, TransferItem.version_id == Version.id)
            .where(TransferItem.transfer_id == transfer.id)
        ).scalars()
        complete = True
        for version in versions:
            if (version.domain, version.label, version.bundle_sha256) not in listed:
                complete = False
                continue
            if version.delivered_at is None:
                version.delivered_at = moment
                marked.append((version.domain, version.label))
            else:
                already.append((version.domain, version.label))
        if complete and transfer.acknowledged_at is None:
            transfer.acknowledged_at = moment
        sequence = transfer.sequence
    return AckResult(sequence, digest, marked, already, signature, complete)


# ---- push -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class PushResult:
    """What a push did. The set and its receipt lived in a temporary directory that is gone,
    so `receipt` holds the receipt's content and `imported.receipt` is None."""

    imported: ImportResult | None
    acknowledged: AckResult | None
    receipt: dict[str, Any] | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "nothing": self.imported is None,
            "import": self.imported.as_dict() if self.imported else None,
            "ack": self.acknowledged.as_dict() if self.acknowledged else None,
            "receipt": self.receipt,
        }


def push(
    app: App,
    store: ObjectStore,
    *,
    domain: str | None = None,
    include_all: bool = False,
    max_size: int | None = None,
    allow_replay: bool = False,
    promote: Promote | None = None,
    now: Callable[[], datetime] = utcnow,
    on_progress: Callable[[int], None] | None = None,
) -> PushResult:
    """Pack into STORE/tmp, import with the same checks, acknowledge; no copy is left behind."""
    key = signing_key_from(app)
    trusted = dict(load_trusted_keys(app.settings.target.trusted_keys)) or {key.key_id: key.public}
    store.check_access()
    with temporary_set_dir(app.store.tmp_dir, "push") as set_dir:
        packed = pack(
            app,
            set_dir,
            domain=domain,
            include_all=include_all,
            max_size=max_size,
            signing_key=key,
            now=now,
        )
        if packed.nothing or packed.sequence is None:
            return PushResult(None, None)
        try:
            imported = import_set(
                store,
                set_dir,
                trusted,
                allow_replay=allow_replay,
                promote=promote,
                receipt_key=key,
                now=now,
                on_progress=on_progress,
            )
        except BaseException:
            if not _target_has(store, packed.sequence, packed.manifest_sha256):
                forget_transfer(app, packed.sequence)
            raise
        acknowledged = ack(app, set_dir / RECEIPT, now=now)
        receipt = json.loads((set_dir / RECEIPT).read_bytes())
    return PushResult(dataclasses.replace(imported, receipt=None), acknowledged, receipt)


def _target_has(store: ObjectStore, sequence: int, manifest_sha256: str | None) -> bool:
    try:
        state, _ = store.read_json(store.key(*STATE_KEY))
    except Exception:  # unsure: forget it; a clash on re-import is loud, lost versions are not
        return False
    if state is None:
        return False
    return any(
        isinstance(e, dict)
        and e.get("sequence") == sequence
        and e.get("manifest_sha256") == manifest_sha256
        for e in state.get("imported", [])
    )
