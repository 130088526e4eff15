"""Retention: drop old versions and the blobs nothing refers to any more.

Promises:
- Per domain the newest `keep` versions (by version label order) are kept, and so is
  every version a site still needs (`mirror.sites.needed`): one a site that takes its
  domain has not acknowledged (lost sets included), and each site's newest delta base
  per domain, however old.
- Rows go first, in one transaction; blob files are removed only after it commits.
  A crash in between leaves an orphan blob (adopted or removed at the next
  start-up), never a row pointing at a missing file.
- A bundle is removed only when no remaining version and no unfinished run refers to it.
- `dry_run` changes nothing and reports exactly what a real run would remove.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass, field

from sqlalchemy import delete, exists, select
from sqlalchemy.orm import Session

from mirror.sites import needed
from mirror.store.app import App
from mirror.store.inventory import named_by_active_runs
from mirror.store.models import Bundle, Delivery, ExportRun, SiteCheck, TransferItem, Version
from mirror.store.sitestate import held_versions, site_facts
from mirror.versions import VersionLabel, VersionRef

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class GcReport:
    """What gc removed (or, with dry_run, would remove)."""

    keep: int
    dry_run: bool
    versions: list[VersionRef] = field(default_factory=list)
    blobs: list[str] = field(default_factory=list)
    bytes_freed: int = 0
    kept_undelivered: int = 0

    def as_dict(self) -> dict[str, object]:
        """The `store gc --json` document (docs/json.md): a removed version by domain,
        version and sha256."""
        return {
            "keep": self.keep,
            "dry_run": self.dry_run,
            "versions_removed": [
                {key: ref.as_dict()[key] for key in ("domain", "version", "sha256")}
                for ref in self.versions
            ],
            "blobs_removed": self.blobs,
            "bytes_freed": self.bytes_freed,
            "kept_undelivered": self.kept_undelivered,
        }


def versions_to_remove(
    versions: list[Version], keep: int, needed: set[int]
) -> tuple[list[Version], int]:
    """The versions outside the newest `keep` per domain that no site needs, and how many
    old ones were kept only because a site still `needed` them."""
    by_domain: dict[str, list[Version]] = defaultdict(list)
    for version in versions:
        by_domain[version.domain].append(version)
    doomed: list[Version] = []
    kept_undelivered = 0
    for domain_versions in by_domain.values():
        domain_versions.sort(key=lambda v: (VersionLabel(v.label), v.id), reverse=True)
        for version in domain_versions[keep:]:
            if version.id in needed:
                kept_undelivered += 1
            else:
                doomed.append(version)
    return doomed, kept_undelivered


def gc(app: App, keep: int, dry_run: bool = False) -> GcReport:
    """Apply the retention rule to the whole store; returns what was (or would be) freed."""
    if keep < 1:
        raise ValueError("keep must be at least 1")
    with app.db.session() as session:
        # Bundles first: a version committed later than this read refers to a bundle read here
        # or to a newer one, so no bundle a live version needs is ever taken for an orphan.
        bundles = {b.sha256: (b.size, b.format) for b in session.scalars(select(Bundle))}
        versions = list(session.scalars(select(Version)))
        doomed, kept_undelivered = versions_to_remove(versions, keep, site_needs(app, session))
        doomed_ids = [v.id for v in doomed]
        doomed_set = set(doomed_ids)
        still_referenced = {v.bundle_sha256 for v in versions if v.id not in doomed_set}
        still_referenced |= named_by_active_runs(session, ExportRun.sha256)
        candidates = sorted(sha for sha in bundles if sha not in still_referenced)
        removed = sorted(
            (_ref(version, *bundles[version.bundle_sha256]) for version in doomed),
            key=lambda ref: (ref.domain, ref.label),
        )
        orphan_bundles = candidates if dry_run else _delete_rows(session, doomed_ids, candidates)
        bytes_freed = sum(bundles[sha][0] for sha in orphan_bundles)
    if not dry_run:
        bytes_freed = _remove_blobs(app, orphan_bundles, versions_removed=len(removed))
    return GcReport(
        keep=keep,
        dry_run=dry_run,
        versions=removed,
        blobs=orphan_bundles,
        bytes_freed=bytes_freed,
        kept_undelivered=kept_undelivered,
    )


def _remove_blobs(app: App, orphan_bundles: list[str], *, versions_removed: int) -> int:
    """Remove the blobs whose rows are gone; the bytes freed on disk (logged)."""
    freed_on_disk = 0
    for sha in orphan_bundles:
        freed_on_disk += app.store.remove(sha)
    if orphan_bundles or versions_removed:
        log.info(
            "store gc",
            extra={
                "versions_removed": versions_removed,
                "blobs_removed": len(orphan_bundles),
                "bytes_freed": freed_on_disk,
            },
        )
    return freed_on_disk


def site_needs(app: App, session: Session) -> set[int]:
    """The versions some configured site still needs (`mirror.sites.needed`)."""
    held = held_versions(session)
    needs: set[int] = set()
    for site in app.settings.site_list():
        facts = site_facts(session, site.name)
        taken = [version for version in held if site.takes(version.domain)]
        needs |= needed(facts, site.delta_bases, taken)
    return needs


def _ref(version: Version, size: int, fmt: str) -> VersionRef:
    return VersionRef(version.domain, VersionLabel(version.label), version.bundle_sha256, size, fmt)


def _delete_rows(session: Session, version_ids: list[int], candidates: list[str]) -> list[str]:
    """Delete the versions, then those candidate bundles that no version refers to (checked
    again inside the delete); returns the bundles actually deleted."""
    if version_ids:
        session.execute(delete(TransferItem).where(TransferItem.version_id.in_(version_ids)))
        session.execute(delete(Delivery).where(Delivery.version_id.in_(version_ids)))
        session.execute(delete(Version).where(Version.id.in_(version_ids)))
    if not candidates:
        return []
    by_version = exists().where(Version.bundle_sha256 == Bundle.sha256)
    by_run = exists().where(ExportRun.active.is_(True), ExportRun.sha256 == Bundle.sha256)
    # A refused bundle is kept aside (store accept); the checks of deleted versions go too.
    kept_aside = exists().where(
        SiteCheck.bundle_sha256 == Bundle.sha256, SiteCheck.status == "refused"
    )
    session.execute(
        delete(SiteCheck)
        .where(
            SiteCheck.bundle_sha256.in_(candidates),
            SiteCheck.status != "refused",
            ~exists().where(Version.bundle_sha256 == SiteCheck.bundle_sha256),
        )
        .execution_options(synchronize_session=False)
    )
    session.execute(
        delete(Bundle)
        .where(Bundle.sha256.in_(candidates), ~by_version, ~by_run, ~kept_aside)
        .execution_options(synchronize_session=False)
    )
    left = set(session.scalars(select(Bundle.sha256).where(Bundle.sha256.in_(candidates))))
    return [sha for sha in candidates if sha not in left]
