"""Repairing damaged blobs: a stored blob whose bytes no longer match its name, or that is gone.

A good copy of a damaged blob can be:

- a verified download of the same bytes (the same sha256): it is copied into place
  with one atomic rename (`BlobStore.add_file`, whose adopt step re-checks the target);
- a verified bundle of the same site (the same tree hash) under another sha256, as
  a vendor that stamps each archive with its build time sends: the versions that
  named the damaged blob are re-pointed to it (the content they stand for is the
  same) and the damaged blob is dropped, all in one index transaction;
- a finished download in `tmp/` of a run that has not stored it yet.

`repair_from_download` is what an export calls with its verified download, so the
next export of a domain repairs its blobs; `repair_store` is `store verify --repair`.
A damaged blob with no good copy anywhere is left as it is and reported with the remedy.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import delete, select, update

from mirror.archive import ArchiveReport
from mirror.integrity import hash_file, require_digest
from mirror.store.app import App
from mirror.store.bundles import add_bundle
from mirror.store.inventory import VerifyReport, verify_store
from mirror.store.maintenance.recovery import reconcile_orphan_blobs
from mirror.store.models import Bundle, ExportRun, SiteCheck, Version

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Repair:
    """What was done about one damaged blob; `repaired` False means it is still damaged."""

    sha256: str
    repaired: bool
    detail: str


@dataclass(frozen=True)
class RepairReport:
    """What `repair_store` did, and the verification after it."""

    repairs: list[Repair]
    adopted: list[str]
    removed: list[str]
    after: VerifyReport

    def as_dict(self) -> dict[str, Any]:
        """The `store verify --repair --json` document (docs/json.md)."""
        return {
            **self.after.as_dict(),
            "repairs": [
                {"sha256": r.sha256, "repaired": r.repaired, "detail": r.detail}
                for r in self.repairs
            ],
            "adopted": self.adopted,
            "removed": self.removed,
        }


def _restore(app: App, source: Path, sha256: str) -> None:
    """Copy `source` into place as blob `sha256` (atomically), after checking its bytes."""
    copied, _ = app.store.add_file(source)
    require_digest(f"{source.name} (not used)", copied, sha256)


def _repoint(app: App, damaged: str, good: str) -> int:
    """Let every version (and site check) of blob `damaged` name the indexed blob `good` of
    the same site, and drop `damaged` (row and file) in the same transaction; returns the
    versions moved."""
    with app.db.session() as session:
        moved = session.execute(
            update(Version)
            .where(Version.bundle_sha256 == damaged)
            .values(bundle_sha256=good)
            .execution_options(synchronize_session=False)
        )
        session.execute(
            update(SiteCheck)
            .where(SiteCheck.bundle_sha256 == damaged)
            .values(bundle_sha256=good)
            .execution_options(synchronize_session=False)
        )
        session.execute(delete(Bundle).where(Bundle.sha256 == damaged))
    app.store.remove(damaged)
    return int(getattr(moved, "rowcount", 0) or 0)


def repair_from_download(
    app: App, source: Path, sha256: str, size: int, report: ArchiveReport
) -> list[Repair]:
    """Repair every damaged blob whose site the verified download `source` holds.

    `source` is left where it is (the caller still stores or drops it). Cheap when
    nothing is damaged: only the blobs with the download's tree hash are re-hashed.
    """
    with app.db.session() as session:
        same_site = list(
            session.execute(
                select(Bundle.sha256, Bundle.size).where(Bundle.tree_sha256 == report.tree_sha256)
            )
        )
    repairs: list[Repair] = []
    for damaged, damaged_size in same_site:
        if app.store.intact(damaged, damaged_size):
            continue
        if damaged == sha256:
            _restore(app, source, sha256)
            detail = "restored from a verified download of the same bytes"
        else:
            if not app.store.intact(sha256, size):
                _restore(app, source, sha256)
            with app.db.session() as session:
                add_bundle(session, sha256, size, report)
            versions = _repoint(app, damaged, sha256)
            detail = f"{versions} version(s) now use blob {sha256} (the same site)"
        log.warning("repaired blob %s: %s", damaged[:12], detail)
        repairs.append(Repair(damaged, True, detail))
    return repairs


def _finished_download(app: App, sha256: str) -> Path | None:
    """A finished partial download in tmp/ that holds exactly blob `sha256`."""
    with app.db.session() as session:
        names = list(
            session.scalars(
                select(ExportRun.partial_name).where(
                    ExportRun.sha256 == sha256, ExportRun.partial_name.is_not(None)
                )
            )
        )
    for name in names:
        path = app.store.temp_path(str(name))
        if path.is_file() and hash_file(path).sha256 == sha256:
            return path
    return None


def _same_site_blob(app: App, sha256: str) -> str | None:
    """An intact, indexed blob of another bundle with the same tree hash as `sha256`'s."""
    with app.db.session() as session:
        damaged = session.get(Bundle, sha256)
        if damaged is None:
            return None
        others = list(
            session.execute(
                select(Bundle.sha256, Bundle.size).where(
                    Bundle.tree_sha256 == damaged.tree_sha256, Bundle.sha256 != sha256
                )
            )
        )
    for other, size in others:
        if app.store.intact(other, size):
            return str(other)
    return None


def _domains_of(app: App, sha256: str) -> list[str]:
    with app.db.session() as session:
        return sorted(
            set(session.scalars(select(Version.domain).where(Version.bundle_sha256 == sha256)))
        )


def repair_store(app: App) -> RepairReport:
    """`store verify --repair`: fix what a good copy exists for, then verify again.

    Extra blobs (on disk, not indexed) are adopted when whole and safe, else removed
    (the start-up recovery step). Corrupt and missing blobs are restored from a finished
    download or re-pointed to an intact blob of the same site; the rest are reported
    with the remedy: export the domain again (the export repairs them) or restore the file.
    """
    adopted, removed = reconcile_orphan_blobs(app)
    repairs: list[Repair] = []
    for problem in verify_store(app).problems:
        if problem.kind == "extra":
            continue
        sha256 = problem.sha256
        download = _finished_download(app, sha256)
        if download is not None:
            _restore(app, download, sha256)
            repairs.append(Repair(sha256, True, f"restored from {download.name}"))
            continue
        good = _same_site_blob(app, sha256)
        if good is not None:
            versions = _repoint(app, sha256, good)
            repairs.append(
                Repair(sha256, True, f"{versions} version(s) now use blob {good} (the same site)")
            )
            continue
        domains = ", ".join(_domains_of(app, sha256)) or "its domain"
        repairs.append(
            Repair(
                sha256,
                False,
                f"{problem.kind} and no good copy is here; run `mirror export run` for "
                f"{domains} (the export repairs it when the vendor still serves that site) "
                "or restore the file from a backup",
            )
        )
    return RepairReport(repairs, adopted, removed, verify_store(app))
