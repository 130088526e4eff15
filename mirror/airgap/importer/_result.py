"""What an import did (`ImportResult`, an `ImportedItem` a version) and the receipt that
carries it back to the connected side (`write_receipt`, signed with this side's key)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from mirror.airgap.importer._admission import Admitted
from mirror.airgap.s3.objectstore import ObjectStore
from mirror.fsutil import atomic_write_bytes
from mirror.transferset.keys import SigningKey
from mirror.transferset.receipt import Receipt, ReceiptItem
from mirror.transferset.token import open_signing_key
from mirror.versions import VersionRef

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


def result_of(
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


def already_imported(admitted: Admitted, receipt: Path) -> ImportResult:
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
    return replace(result_of(admitted, [], []), notes=notes, already_imported=True, receipt=found)


def receipt_key_from(settings_key: Path | str | None) -> SigningKey | None:
    """The key that signs receipts on this side (a file, or a key in a token), if one is
    configured here."""
    return open_signing_key(settings_key) if settings_key else None


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
