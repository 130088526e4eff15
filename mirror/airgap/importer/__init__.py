"""Import a verified transfer set into the object store and write its receipt (air-gapped side).

`import_set` tells the story; each step is a module: `_admission` (every refusal before a
byte is published; `_conflicts`, every key a version will write), `_bundles` (the bundles,
staged and completed together), `_manifests` (each version's provenance, record and
manifest), `_documents` (the indexes, promotions and import state), `_result` (what the
import did, and its receipt).

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

from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import datetime
from pathlib import Path

from mirror.airgap.importer._admission import Admitted, Asked, admit
from mirror.airgap.importer._bundles import stage_bundles
from mirror.airgap.importer._documents import (
    Promote,
    promote_newest,
    record_import,
    update_indexes,
)
from mirror.airgap.importer._manifests import publish_provenance, publish_versions
from mirror.airgap.importer._result import (
    ImportedItem,
    ImportResult,
    already_imported,
    receipt_key_from,
    result_of,
    write_receipt,
)
from mirror.airgap.s3.objectstore import ObjectStore
from mirror.timestamps import utcnow
from mirror.transferset.format import RECEIPT, iso_time
from mirror.transferset.keys import PublicKey, SigningKey

__all__ = ["ImportResult", "ImportedItem", "Promote", "import_set", "receipt_key_from"]

UNSIGNED = (
    "receipt written unsigned and no verification record signed (no transfer.signing_key on "
    "this side): `transfer ack` refuses the receipt unless told --accept-unsigned"
)


def _record_keys(
    receipt_keys: Mapping[str, PublicKey] | None, receipt_key: SigningKey | None
) -> dict[str, PublicKey]:
    """The keys a record already in the bucket must verify with: target.receipt_keys and the
    public half of the key that signs here."""
    keys = dict(receipt_keys or {})
    if receipt_key is not None:
        keys[receipt_key.key_id] = receipt_key.public
    return keys


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
    receipt_keys: Mapping[str, PublicKey] | None = None,
) -> ImportResult:
    """Verify `set_dir`, then publish it into `store` and write its receipt. `site`: this
    installation's name (`target.site`), when it knows one (`check_site`). A verification
    record already in the bucket must verify with `receipt_keys` (target.receipt_keys) or
    `receipt_key`'s public half."""
    receipt = receipt_path or set_dir / RECEIPT
    trusted_records = _record_keys(receipt_keys, receipt_key)
    asked = Asked(allow_replay, skip_imported, promote is not None, site, work_dir)
    asked = replace(asked, on_verify_progress=on_verify_progress, record_keys=trusted_records)
    admitted = admit(store, set_dir, trusted, receipt, asked)
    if admitted.already_imported:
        return already_imported(admitted, receipt)
    verified, imported_at = admitted.verified, iso_time(now())
    bundles = stage_bundles(store, verified, on_progress, work_dir=work_dir, bases=admitted.bases)
    publish_provenance(store, admitted)
    items, entries = publish_versions(store, verified, bundles, imported_at, receipt_key)
    update_indexes(store, entries, now=now)
    promoted = promote_newest(store, verified, list(entries), promote)
    result = result_of(admitted, items, promoted)
    return _receipt_then_state(store, admitted, result, receipt, receipt_key, imported_at)


def _receipt_then_state(
    store: ObjectStore,
    admitted: Admitted,
    result: ImportResult,
    receipt: Path,
    receipt_key: SigningKey | None,
    imported_at: str,
) -> ImportResult:
    """The receipt on disk, then the bucket's import state last: once the state records a
    set, its receipt exists."""
    signed_by = write_receipt(receipt, result, store, receipt_key, at=imported_at)
    if signed_by is None:
        result.notes.append(UNSIGNED)
    record_import(store, admitted.verified, at=imported_at)
    return replace(result, receipt=receipt, receipt_signed_by=signed_by)
