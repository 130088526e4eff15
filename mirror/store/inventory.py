"""What the connected side's store holds, and whether the blobs still match the index.

Promises: `list_versions` reads only the index; `verify_store` re-hashes every
blob against the `bundles` rows and reports every problem it finds (missing,
corrupt, extra) without raising, so a caller sees all of them at once. Blobs are
hashed on every core at once (hashlib and file reads release the GIL), and the
problems come in the same order as from `BlobStore.verify`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import InstrumentedAttribute, Session

from mirror.fsutil import VALIDATOR_SUFFIX
from mirror.store.app import App
from mirror.store.blobs import BlobHashing, BlobProblem
from mirror.store.bundles import version_ref
from mirror.store.models import Bundle, ExportRun, Version
from mirror.store.sitestate import first_delivered
from mirror.timestamps import rfc3339, rfc3339_or_none
from mirror.versions import VersionRef


@dataclass(frozen=True)
class StoredVersion:
    """One version of one domain (`ref`), what the index adds to it, and its blob's path."""

    ref: VersionRef
    tree_sha256: str
    file_count: int
    created_at: datetime
    delivered_at: datetime | None
    path: Path

    def as_dict(self) -> dict[str, Any]:
        """One entry of `store list --json` (docs/json.md)."""
        return {
            **self.ref.as_dict(),
            "tree_sha256": self.tree_sha256,
            "file_count": self.file_count,
            "created_at": rfc3339(self.created_at),
            "delivered_at": rfc3339_or_none(self.delivered_at),
            "path": str(self.path),
        }


@dataclass(frozen=True)
class VerifyReport:
    """The outcome of `verify_store`: blobs checked, problems found, stray temp files."""

    checked: int
    problems: list[BlobProblem] = field(default_factory=list)
    stray_temp_files: list[Path] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def as_dict(self) -> dict[str, Any]:
        """The `store verify --json` document (docs/json.md)."""
        return {
            "ok": self.ok,
            "checked": self.checked,
            "problems": [
                {"kind": p.kind, "sha256": p.sha256, "detail": p.detail} for p in self.problems
            ],
            "stray_temp_files": [str(p) for p in self.stray_temp_files],
        }


def named_by_active_runs(session: Session, column: InstrumentedAttribute[str | None]) -> set[str]:
    """What the unfinished runs name in `column` (their partial files, or their blobs):
    the things recovery, verify and gc leave for those runs to claim."""
    query = select(column).where(ExportRun.active.is_(True), column.is_not(None))
    return {value for value in session.scalars(query) if value}


def list_versions(app: App, domain: str | None = None) -> list[StoredVersion]:
    """Every stored version (of `domain`, if given), by domain, then label order."""
    query = select(Version, Bundle).join(Bundle, Bundle.sha256 == Version.bundle_sha256)
    if domain is not None:
        query = query.where(Version.domain == domain.strip().lower())
    with app.db.session() as session:
        delivered = first_delivered(session)
        rows = [
            StoredVersion(
                ref=version_ref(version, bundle),
                tree_sha256=version.tree_sha256,
                file_count=bundle.file_count,
                created_at=version.created_at,
                delivered_at=delivered.get(version.id),
                path=app.store.blob_path(bundle.sha256),
            )
            for version, bundle in session.execute(query)
        ]
    return sorted(rows, key=lambda v: (v.ref.domain, v.ref.label))


def verify_store(app: App, hashing: BlobHashing | None = None) -> VerifyReport:
    """Re-hash every blob against the index: missing, corrupt and extra blobs are problems;
    temp files that belong to no unfinished run are listed (not problems: gc removes them).
    A store bound to another index is refused (ConfigError) rather than reported. With
    `hashing` (`BlobStore.hash_in_background`, started before the index was opened), the
    blobs' digests are taken from it."""
    app.binding  # noqa: B018 - refuses a store of another index
    with app.db.session() as session:
        expected = {sha: size for sha, size in session.execute(select(Bundle.sha256, Bundle.size))}
        live_partials = named_by_active_runs(session, ExportRun.partial_name)
    problems = app.store.verify(expected, hashing=hashing)
    stray = [
        p
        for p in app.store.temp_files()
        if p.name.removesuffix(VALIDATOR_SUFFIX) not in live_partials
    ]
    return VerifyReport(checked=len(expected), problems=problems, stray_temp_files=stray)
