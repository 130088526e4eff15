"""Lost and damaged media for one site: `transfer lost` and `transfer resend` (issue 22).

Promises:
- `mark_lost` records a packed set of a site as lost: its versions the site did not
  acknowledge wait again (`mirror.sites.waiting`), so the next `transfer pack --site` for
  it carries them, and they are no delta base for that site (`mirror.sites.held_bases`).
  Marking it again changes nothing; a set whose receipt acknowledged all of it is not
  lost (ConfigError, exit 2). Other sites are untouched.
- `resend` copies the set exactly as it was packed (same sequence, same bytes) from where
  it was written to a new directory, for a disk that was damaged: the source's manifest
  must hash to the one recorded, every file of the source and of the copy is checked
  against the signed manifest (this side's own key), and the copy appears under OUT only
  when whole. A source gone or damaged is one error naming the remedy that always works
  (`transfer lost` then `transfer pack`); nothing is recorded, the set keeps its place.
"""

from __future__ import annotations

import secrets
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import select

from mirror.errors import ConfigError, IntegrityError, NotFound, OperationFailed
from mirror.fsutil import fsync_dir, is_disk_full
from mirror.integrity import hash_bytes
from mirror.outbound.pack import check_out, no_room, signing_key_from
from mirror.outbound.records import by_sequence, carried_versions
from mirror.store.app import App
from mirror.store.models import Delivery
from mirror.timestamps import rfc3339, utcnow
from mirror.transferset.format import RECEIPT, RECEIPT_SIGNATURE
from mirror.transferset.reader import read_manifest_bytes, set_bytes, verify_set


@dataclass(frozen=True)
class LostResult:
    """A set marked lost: the versions that wait again for the site."""

    site: str
    sequence: int
    lost_at: datetime
    waiting_again: list[tuple[str, str]]
    already: bool

    def as_dict(self) -> dict[str, Any]:
        return {
            "site": self.site,
            "sequence": self.sequence,
            "lost_at": rfc3339(self.lost_at),
            "already_lost": self.already,
            "waiting_again": [{"domain": d, "version": v} for d, v in self.waiting_again],
        }


def mark_lost(
    app: App, site: str | None, sequence: int, *, now: Callable[[], datetime] = utcnow
) -> LostResult:
    """Mark set `sequence` of `site` (None: the only site) lost (module docstring)."""
    name = app.settings.site(site).name
    with app.db.session() as session:
        transfer = by_sequence(session, name, sequence)
        if transfer.acknowledged_at is not None:
            raise ConfigError(
                f"set {sequence} for site {name} was acknowledged (its receipt listed every "
                "version); it is not lost",
                hint=f"`mirror sites` shows what site {name} still waits for",
            )
        delivered = set(session.scalars(select(Delivery.version_id).where(Delivery.site == name)))
        again = sorted(
            (version.domain, version.label)
            for version in carried_versions(session, transfer)
            if version.id not in delivered
        )
        already = transfer.lost_at is not None
        if not already:
            transfer.lost_at = now()
        assert transfer.lost_at is not None
        return LostResult(name, sequence, transfer.lost_at, again, already)


@dataclass(frozen=True)
class ResendResult:
    """An identical copy of a packed set: where from, where to, its manifest hash."""

    site: str
    sequence: int
    source: Path
    path: Path
    manifest_sha256: str
    total_bytes: int

    def as_dict(self) -> dict[str, Any]:
        return {
            "site": self.site,
            "sequence": self.sequence,
            "source": str(self.source),
            "path": str(self.path),
            "manifest_sha256": self.manifest_sha256,
            "total_bytes": self.total_bytes,
        }


def resend(app: App, site: str | None, sequence: int, out: Path) -> ResendResult:
    """Copy set `sequence` of `site` as it was packed into `out` (module docstring)."""
    name = app.settings.site(site).name
    out = out.absolute()
    check_out(out)
    with app.db.session() as session:
        transfer = by_sequence(session, name, sequence)
        source, recorded = Path(transfer.path), transfer.manifest_sha256
    remedy = (
        f"mark it lost and pack again: `mirror transfer lost --site {name} {sequence}`, "
        f"then `mirror transfer pack --site {name} OUT`"
    )
    if not source.is_dir():
        raise NotFound(
            f"set {sequence} for site {name} is no longer at {source}; "
            "an identical copy cannot be made",
            hint=remedy,
        )
    key = signing_key_from(app)
    own = {key.key_id: key.public}
    try:
        if hash_bytes(read_manifest_bytes(source)) != recorded:
            raise IntegrityError(f"{source}: its manifest is not the one packed as set {sequence}")
        verify_set(source, own)
    except IntegrityError as exc:
        raise IntegrityError(
            f"the copy of set {sequence} at {source} is damaged: {exc}", hint=remedy
        ) from None
    size = set_bytes(source) or 0
    _copy(source, out, size)
    verify_set(out, own)
    return ResendResult(name, sequence, source, out, recorded, size)


def _copy(source: Path, out: Path, size: int) -> None:
    """Copy the set (not a receipt beside it) under a staging name, then rename it to OUT."""
    staging = out.parent / f"{out.name}.partial-{secrets.token_hex(4)}"
    free = shutil.disk_usage(out.parent).free
    if free < size:
        raise no_room(f"not enough free space in {out.parent}", size, free)
    try:
        shutil.copytree(source, staging, ignore=shutil.ignore_patterns(RECEIPT, RECEIPT_SIGNATURE))
        fsync_dir(staging)
        staging.rename(out)
        fsync_dir(out.parent)
    except OSError as exc:
        shutil.rmtree(staging, ignore_errors=True)
        if is_disk_full(exc):
            raise no_room(f"the disk holding {out.parent} filled up", size, None) from None
        raise OperationFailed(
            f"copying set to {out} failed: {exc.strerror or exc}; nothing was left behind"
        ) from None
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
