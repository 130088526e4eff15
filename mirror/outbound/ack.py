"""Ack: mark what a receipt says arrived as delivered, so the next pack leaves it out.

Promises: only versions of the packed set the receipt names (by manifest hash)
are marked, and only when the receipt lists them with the same bundle sha256 (or, for a
version carried as a delta and published as a rebuilt archive, the same tree sha256);
acknowledging twice changes nothing. Each delivery records the object the site published
(`Delivery.published_sha256`, `published_size`: the receipt's digest and size; a receipt
written before it carried sizes records none), the fact the pack decides a delta's base
object from (docs/delta.md).

Each site is acknowledged on its own (issue 22): the receipt's set names the site, the
versions are marked delivered to that site only (`Delivery` rows), and the receipt must be
signed by one of that site's keys (`[[sites]] trusted_keys`; the implicit single site's
are `transfer.receipt_keys`). A receipt signed by another site's key is refused (exit 5,
naming the key, its site and the set's), whatever else it says.

A receipt is believed only when a trusted receipt key (`transfer.receipt_keys`) signed it:
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
from mirror.store.models import Delivery, Transfer
from mirror.timestamps import utcnow
from mirror.transferset.keys import PublicKey, load_trusted_keys, read_signature_file
from mirror.transferset.receipt import Receipt, ReceiptItem, read_receipt

log = logging.getLogger(__name__)
ACCEPTED_UNSIGNED = "accepted by --accept-unsigned"


@dataclass(frozen=True)
class AckResult:
    site: str
    sequence: int
    manifest_sha256: str
    marked: list[tuple[str, str]]
    already: list[tuple[str, str]]
    signature: str
    complete: bool

    def as_dict(self) -> dict[str, Any]:
        return {
            "site": self.site,
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
    """Mark the versions a receipt lists (and its transfer lists) as delivered to the set's
    site. The receipt must be signed by one of that site's keys (or, given, one of
    `trusted`), unless `accept_unsigned` (module docstring)."""
    owners = site_keys(app) if trusted is None else {key: set() for key in trusted}
    if trusted is None:
        trusted = _all_keys(app)
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
        if signature.startswith("verified"):
            _check_site(receipt_path, transfer, owners)
        result = _mark(session, transfer, receipt, now(), signature)
    return result


def site_keys(app: App) -> dict[str, set[str]]:
    """key id -> the sites whose receipts it signs."""
    owners: dict[str, set[str]] = {}
    for site in app.settings.site_list():
        for key_id in load_trusted_keys(site.trusted_keys):
            owners.setdefault(key_id, set()).add(site.name)
    return owners


def _all_keys(app: App) -> dict[str, PublicKey]:
    keys: dict[str, PublicKey] = {}
    for site in app.settings.site_list():
        keys.update(load_trusted_keys(site.trusted_keys))
    return keys


def _check_site(receipt_path: Path, transfer: Transfer, owners: Mapping[str, set[str]]) -> None:
    """A receipt signed by a key of another site acknowledges nothing (exit 5). Keys given
    by the caller (`push`: its own key) own no site and answer for the set's."""
    key_id, _ = read_signature_file(receipt_path.with_name(receipt_path.name + ".sig"))
    sites = owners.get(key_id, set())
    if sites and transfer.site not in sites:
        raise IntegrityError(
            f"receipt {receipt_path} is signed by key {key_id} of site "
            f"{', '.join(sorted(sites))}, but set {transfer.sequence} was packed for site "
            f"{transfer.site}; nothing was marked delivered",
            hint=f"acknowledge it with site {transfer.site}'s receipt key in its [[sites]] "
            "trusted_keys, or find the receipt that belongs to this set",
        )


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


def _delivery(transfer: Transfer, version_id: int, item: ReceiptItem, moment: datetime) -> Delivery:
    """The record that the site holds a version, with the digest and size it published."""
    return Delivery(
        site=transfer.site,
        version_id=version_id,
        delivered_at=moment,
        transfer_id=transfer.id,
        published_sha256=item.sha256,
        published_size=item.size,
    )


def _mark(
    session: Session, transfer: Transfer, receipt: Receipt, moment: datetime, signature: str
) -> AckResult:
    """Mark what `receipt` lists of the versions `transfer` carried; the set is acknowledged
    once every one of them is listed."""
    marked: list[tuple[str, str]] = []
    already: list[tuple[str, str]] = []
    complete = True
    for version in carried_versions(session, transfer):
        item = receipt.listed(
            version.domain, version.label, version.bundle_sha256, version.tree_sha256
        )
        delivery = session.get(Delivery, (transfer.site, version.id))
        if item is None:
            complete = False
        elif delivery is None:
            session.add(_delivery(transfer, version.id, item, moment))
            marked.append((version.domain, version.label))
        else:
            already.append((version.domain, version.label))
    if complete and transfer.acknowledged_at is None:
        transfer.acknowledged_at = moment
    if marked or transfer.receipt_signature is None:
        transfer.receipt_signature = signature
    return AckResult(
        transfer.site,
        transfer.sequence,
        transfer.manifest_sha256,
        marked,
        already,
        signature,
        complete,
    )
