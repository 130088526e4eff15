"""The one way a bundle row enters the index: insert unless present, safe when replicas race.

Promises: `add_bundle` writes the `bundles` row of a checked archive in the caller's session
(so it commits with whatever else the caller writes there) unless a row with that hash exists;
then it changes nothing, the first writer's row stays, and no error is raised. It says
whether it inserted. The export run, the adoption of orphan blobs and the repair all use it.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy.orm import Session

from mirror.archive import ArchiveReport
from mirror.store.db import dialect_insert
from mirror.store.models import Bundle
from mirror.timestamps import utcnow


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
