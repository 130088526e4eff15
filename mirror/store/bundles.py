"""How a stored bundle enters the index: its `bundles` row and the versions that name it.

Promises: `add_bundle` is the one way a bundle row is written. It writes the row of a
checked archive in the caller's session (so it commits with whatever else the caller writes
there) unless a row with that hash exists; then it changes nothing, the first writer's row
stays, and no error is raised. It says whether it inserted. The export run, the adoption of
orphan blobs and the repair all use it. `add_version` labels a new version after the
existing ones of its domain (`versions.next_label`).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from mirror.archive import ArchiveReport
from mirror.store.db import dialect_insert
from mirror.store.models import Bundle, Version
from mirror.timestamps import utcnow
from mirror.versions import VersionLabel, VersionRef, next_label


def add_bundle(
    session: Session,
    sha256: str,
    size: int,
    report: ArchiveReport,
    created_at: datetime | None = None,
) -> bool:
    """Index blob `sha256` (`size` bytes, checked as `report`); False when it was indexed."""
    statement = (
        dialect_insert(session, Bundle)
        .values(
            sha256=sha256,
            size=size,
            format=report.format,
            tree_sha256=report.tree_sha256,
            file_count=report.file_count,
            created_at=created_at or utcnow(),
        )
        .on_conflict_do_nothing()
    )
    return bool(getattr(session.execute(statement), "rowcount", 0))


def add_version(
    session: Session,
    domain: str,
    sha256: str,
    report: ArchiveReport,
    *,
    run_id: int | None,
    started_at: datetime,
    created_at: datetime,
) -> str:
    """Add the next version of `domain` (labelled by `started_at`) naming blob `sha256`."""
    labels = session.scalars(select(Version.label).where(Version.domain == domain))
    label = next_label(list(labels), started_at)
    session.add(
        Version(
            domain=domain,
            label=label,
            bundle_sha256=sha256,
            tree_sha256=report.tree_sha256,
            run_id=run_id,
            created_at=created_at,
        )
    )
    session.flush()
    return label


def newest_version(versions: Iterable[Version]) -> Version | None:
    """The newest of `versions` (rows of one domain) in label order; None when there are none."""
    return max(versions, key=lambda v: VersionLabel(v.label), default=None)


def latest_version(session: Session, domain: str) -> Version | None:
    """The domain's newest version by label order."""
    return newest_version(session.scalars(select(Version).where(Version.domain == domain)))


def same_site_as_newest(session: Session, domain: str, tree_sha256: str) -> Version | None:
    """The domain's newest version when it holds the site `tree_sha256`, else None: the one
    rule of "the same site makes no new version", for an export's download
    (`mirror.export.keeper`) and a refused bundle accepted (`mirror.export.sitecheck.accept`)
    alike."""
    latest = latest_version(session, domain)
    return latest if latest is not None and latest.tree_sha256 == tree_sha256 else None


def version_ref(version: Version, bundle: Bundle) -> VersionRef:
    """The index's row of a version and its bundle, as the one reference to it."""
    return VersionRef(
        version.domain, VersionLabel(version.label), bundle.sha256, bundle.size, bundle.format
    )
