"""Ack: mark what a receipt says arrived as delivered, so the next pack leaves it out.

Promises: only versions of the packed set the receipt names (by manifest hash)
are marked, and only when the receipt lists them with the same bundle sha256 (or, for a
version carried as a delta and published as a rebuilt archive, the same tree sha256);
acknowledging twice changes nothing.

A receipt is believed only when a trusted receipt key (`target.trusted_keys`) signed it:
an unsigned receipt, or one signed by a key nobody trusts, is refused (exit 5, naming the
key) and marks nothing, since anyone who can write a file beside a set could otherwise
stop versions from ever being carried again. `accept_unsigned` is the operator's explicit
choice to believe it anyway: it logs a warning and records, on the set, how the receipt
was signed (`Transfer.receipt_signature`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session

from mirror.errors import IntegrityError
from mirror.outbound.records import carried_versions, packed_set
from mirror.store.app import App
from mirror.store.models import Transfer
from mirror.timestamps import utcnow
from mirror.transferset.keys import PublicKey, load_trusted_keys
from mirror.transferset.receipt import Receipt, read_receipt

log = logging.getLogger(__name__)
ACCEPTED_UNSIGNED = "accepted by --accept-unsigned"


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


def ack(
    app: App,
    receipt_path: Path,
    *,
    now: Callable[[], datetime] = utcnow,
    trusted: Mapping[str, PublicKey] | None = None,
    accept_unsigned: bool = False,
) -> AckResult:
    """Mark the versions a receipt lists (and its transfer lists) as delivered. The receipt
    must be signed by one of `trusted` (default: `target.trusted_keys`), unless
    `accept_unsigned` (module docstring)."""
    if trusted is None:
        trusted = load_trusted_keys(app.settings.target.trusted_keys)
    receipt, signature = _believe(receipt_path, trusted, accept_unsigned)
    digest = receipt.manifest_sha256
    with app.db.session() as session:
        transfer = packed_set(
            session,
            Transfer.manifest_sha256 == digest,
            f"with manifest {digest[:16]}…",
            "acknowledge the receipt on the host that packed the set",
        )
        if transfer.sequence != receipt.sequence:
            raise IntegrityError(
                f"{receipt_path.name}: sequence {receipt.sequence} does not match the "
                f"packed set {transfer.sequence}"
            )
        result = _mark(session, transfer, receipt, now(), signature)
    return result


def _believe(
    receipt_path: Path, trusted: Mapping[str, PublicKey], accept_unsigned: bool
) -> tuple[Receipt, str]:
    """The receipt and how it was signed; a receipt believed unsigned says so, and is logged."""
    receipt, signature = read_receipt(receipt_path, trusted, accept_unsigned=accept_unsigned)
    if not signature.startswith("verified"):
        signature = f"{signature}, {ACCEPTED_UNSIGNED}"
        log.warning(
            "believing receipt %s although it is %s: its versions are marked delivered "
            "without proof",
            receipt_path,
            signature,
        )
    return receipt, signature


def _mark(
    session: Session, transfer: Transfer, receipt: Receipt, moment: datetime, signature: str
) -> AckResult:
    """Mark what `receipt` lists of the versions `transfer` carried; the set is acknowledged
    once every one of them is listed."""
    marked: list[tuple[str, str]] = []
    already: list[tuple[str, str]] = []
    complete = True
    for version in carried_versions(session, transfer):
        if not receipt.lists(
            version.domain, version.label, version.bundle_sha256, version.tree_sha256
        ):
            complete = False
        elif version.delivered_at is None:
            version.delivered_at = moment
            marked.append((version.domain, version.label))
        else:
            already.append((version.domain, version.label))
    if complete and transfer.acknowledged_at is None:
        transfer.acknowledged_at = moment
    if marked or transfer.receipt_signature is None:
        transfer.receipt_signature = signature
    return AckResult(
        transfer.sequence, transfer.manifest_sha256, marked, already, signature, complete
    )
