"""Push: pack, import and acknowledge in one step where the target bucket is reachable.

Promises: the same checks as a carried set (the set is packed into the store's
tmp directory, verified and imported by the air-gapped code, then acknowledged);
no copy is left behind; a push that fails before the bucket recorded the set
forgets the packed set, so its versions are packed again next time.

Keys: push signs the set with this side's `transfer.signing_key` and imports it at once,
so the one key its import trusts is that key's own public half (derived from it, whatever
`target.transfer_keys` holds). The receipt is signed by the same key and acknowledged
against it alone.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from mirror.airgap import layout
from mirror.airgap.importer import ImportResult, Promote, import_set
from mirror.airgap.s3.objectstore import ObjectStore
from mirror.outbound.ack import AckResult, ack
from mirror.outbound.pack import PackResult, Selection, pack, signing_key_from, temporary_set_dir
from mirror.outbound.records import forget_set
from mirror.store.app import App
from mirror.timestamps import utcnow
from mirror.transferset.format import RECEIPT
from mirror.transferset.keys import SigningKey


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
    site: str | None = None,
    max_size: int | None = None,
    allow_replay: bool = False,
    promote: Promote | None = None,
    now: Callable[[], datetime] = utcnow,
    on_progress: Callable[[int], None] | None = None,
) -> PushResult:
    """Pack into STORE/tmp, import with the same checks, acknowledge; no copy is left behind."""
    key = signing_key_from(app)
    store.check_access()
    with temporary_set_dir(app.store.tmp_dir, "push") as set_dir:
        packed = pack(
            app,
            set_dir,
            Selection(domain, include_all, site=site),
            max_size=max_size,
            signing_key=key,
            now=now,
        )
        if packed.nothing or packed.sequence is None:
            return PushResult(None, None)
        with _forgotten_unless_imported(app, store, packed):
            imported = import_set(
                store,
                set_dir,
                {key.key_id: key.public},
                allow_replay=allow_replay,
                promote=promote,
                receipt_key=key,
                now=now,
                on_progress=on_progress,
            )
        return _acknowledged(app, set_dir, imported, key, now)


@contextlib.contextmanager
def _forgotten_unless_imported(app: App, store: ObjectStore, packed: PackResult) -> Iterator[None]:
    """A set whose import fails before the target recorded it is forgotten here (its
    versions go in the next set); one the target has stays recorded."""
    assert packed.sequence is not None
    try:
        yield
    except BaseException:
        if not _target_has(store, packed.sequence, packed.manifest_sha256):
            forget_set(app, packed.site, packed.sequence)
        raise


def _acknowledged(
    app: App, set_dir: Path, imported: ImportResult, key: SigningKey, now: Callable[[], datetime]
) -> PushResult:
    """Acknowledge the set from the receipt the import wrote (signed with our own key)."""
    acknowledged = ack(app, set_dir / RECEIPT, now=now, trusted={key.key_id: key.public})
    receipt = json.loads((set_dir / RECEIPT).read_bytes())
    return PushResult(dataclasses.replace(imported, receipt=None), acknowledged, receipt)


def _target_has(store: ObjectStore, sequence: int, manifest_sha256: str | None) -> bool:
    try:
        state = layout.read_import_state(store)
    except Exception:  # unsure: forget it; a clash on re-import is loud, lost versions are not
        return False
    return state is not None and state.has(sequence, manifest_sha256)
