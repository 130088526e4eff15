"""The index's record of the transfer sets packed here (connected side).

`pack` records a set once it is written, `ack`, `pack --from-set`, `transfer lost` and
`transfer resend` look one up, `push` forgets one that never left this host. One place
reads and writes the `transfers`/`transfer_items` rows, so every command finds a set the
same way. Each site has its own chain: a sequence names a set only with its site.

Promises:
- `packed_set` raises NotFound (exit 3) naming the set and a remedy when no set was
  packed here under that sequence or manifest hash; nothing else answers for "which set".
- `record_set` writes the set and the versions it carries in one transaction; a second
  set under the same site and sequence fails on the index's unique key (the caller's race).
- `forget_set` of a sequence never packed changes nothing.
"""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import ColumnElement, and_, func, select
from sqlalchemy.orm import Session

from mirror.errors import NotFound
from mirror.sites import DEFAULT_SITE
from mirror.store.app import App
from mirror.store.models import Transfer, TransferItem, Version
from mirror.transferset.format import Manifest
from mirror.transferset.trust import ChainLink

RUN_WHERE_PACKED = "run it on the host that packed the set (`mirror status` there)"


def find_set(session: Session, which: ColumnElement[bool]) -> Transfer | None:
    return session.execute(select(Transfer).where(which)).scalar_one_or_none()


def packed_set(session: Session, which: ColumnElement[bool], what: str, hint: str) -> Transfer:
    """The set `which` selects; NotFound ("no transfer set WHAT was packed here") otherwise."""
    transfer = find_set(session, which)
    if transfer is None:
        raise NotFound(f"no transfer set {what} was packed here", hint=hint)
    return transfer


def by_sequence(session: Session, site: str, sequence: int) -> Transfer:
    return packed_set(
        session,
        and_(Transfer.site == site, Transfer.sequence == sequence),
        str(sequence) if site == DEFAULT_SITE else f"{sequence} for site {site}",
        RUN_WHERE_PACKED,
    )


def carried_versions(session: Session, transfer: Transfer) -> list[Version]:
    """The versions `transfer` carried (as the index records them, delivered since or not)."""
    return list(
        session.execute(
            select(Version)
            .join(TransferItem, TransferItem.version_id == Version.id)
            .where(TransferItem.transfer_id == transfer.id)
        ).scalars()
    )


def newest_set(session: Session, site: str) -> ChainLink | None:
    """The set the site's next one follows (its highest sequence packed here, lost or
    not: the chain stays whole), or None."""
    highest = select(func.max(Transfer.sequence)).where(Transfer.site == site).scalar_subquery()
    newest = find_set(session, and_(Transfer.site == site, Transfer.sequence == highest))
    return ChainLink(newest.sequence, newest.manifest_sha256) if newest else None


def orphaned_default_chain(session: Session, configured: list[str]) -> ChainLink | None:
    """The newest set of the implicit site `default` when `[[sites]]` are set and none of
    them is named `default`: that chain's installation would next get a set 1 again."""
    if not configured or DEFAULT_SITE in configured:
        return None
    return newest_set(session, DEFAULT_SITE)


def record_set(
    app: App, manifest: Manifest, manifest_sha256: str, out: Path, version_ids: list[int]
) -> None:
    """Record a written set (for the site its manifest names) and the versions it carries."""
    with app.db.session() as session:
        transfer = Transfer(
            site=manifest.site or DEFAULT_SITE,
            sequence=manifest.sequence,
            previous_sequence=manifest.previous_sequence,
            manifest_sha256=manifest_sha256,
            path=str(out),
            item_count=len(manifest.items),
            total_bytes=sum(item.size for item in manifest.blobs()),
        )
        session.add(transfer)
        session.flush()
        for version_id in version_ids:
            session.add(TransferItem(transfer_id=transfer.id, version_id=version_id))


def forget_set(app: App, site: str, sequence: int) -> None:
    """Drop the record of a packed set that never left this host (a failed push)."""
    with app.db.session() as session:
        transfer = find_set(session, and_(Transfer.site == site, Transfer.sequence == sequence))
        if transfer is None:
            return
        for item in session.execute(
            select(TransferItem).where(TransferItem.transfer_id == transfer.id)
        ).scalars():
            session.delete(item)
        session.flush()
        session.delete(transfer)
