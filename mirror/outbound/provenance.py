"""The provenance a pack carries for every version: what the index knows, signed.

`attach` writes one DSSE envelope per item (`provenance/DOMAIN/VERSION.intoto.json`, made by
`mirror.transferset.provenance`) into the set being staged and lists it in the manifest
before the manifest is signed. Promises: every version gets a statement, also one stored
before completeness checks existed (its `completeness` is then null and `checks` says
only what was checked); a delta item carries the statement of the bundle it was made from
(the tree is the same), so the rebuilt version has the same provenance; the statement's
bytes depend only on the index, so packing a version again gives the same statement.

Every item also carries its SPDX inventory (`outbound/inventory.py`) as
`provenance/DOMAIN/VERSION.spdx.json`, listed in the manifest (`ManifestItem.inventory`) and
signed by the statement (predicate `inventory.sha256`). Its files come from the listing kept
beside the bundle (`store.digests.files_of`): a version stored before listings kept each
file's SHA-1 has its bundle read once, here, and its listing kept then, so every version gets
an inventory and the next pack of it reads nothing.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from sqlalchemy import select
from sqlalchemy.orm import Session

from mirror import __version__
from mirror.archive.completeness import site_line
from mirror.archive.spill import FileList
from mirror.fsutil import fsync_dir
from mirror.integrity import HashingWriter, hash_bytes
from mirror.outbound.inventory import (
    SPDX_VERSION,
    FileEntry,
    InventoryFacts,
    document,
    supplier_of,
)
from mirror.store import digests
from mirror.store.app import App
from mirror.store.models import Bundle, ExportRun, SiteCheck, Version
from mirror.timestamps import rfc3339_or_none
from mirror.transferset.format import (
    PROVENANCE_DIR,
    InventoryEntry,
    Manifest,
    ManifestItem,
    ProvenanceEntry,
)
from mirror.transferset.keys import SigningKey
from mirror.transferset.provenance import sign_statement, statement


def _rows(session: Session, item: ManifestItem) -> tuple[Version, Bundle, ExportRun | None]:
    """The index's rows of a packed item: its version, its bundle and the run that made it."""
    version = session.scalars(
        select(Version).where(Version.domain == item.domain, Version.label == item.version)
    ).one()
    bundle = session.get(Bundle, version.bundle_sha256)
    assert bundle is not None
    run = session.get(ExportRun, version.run_id) if version.run_id is not None else None
    return version, bundle, run


def predicate_of(
    app: App, session: Session, item: ManifestItem, inventory_sha256: str | None = None
) -> tuple[str, str, dict[str, Any]]:
    """(subject name, bundle sha256, predicate) of a packed item, from the index; with
    `inventory_sha256`, the predicate signs the inventory carried beside it."""
    version, bundle, run = _rows(session, item)
    check = session.scalars(
        select(SiteCheck)
        .where(SiteCheck.domain == item.domain, SiteCheck.label == item.version)
        .order_by(SiteCheck.id.desc())
    ).first()
    checks = ["bundle-sha256", "archive-safety", "tree-sha256"]
    if check is not None:
        checks.append("completeness")
    acceptance = None
    if check is not None and check.status == "accepted":
        acceptance = {"reason": check.reason, "accepted_at": rfc3339_or_none(check.accepted_at)}
    predicate = {
        "domain": item.domain,
        "version": item.version,
        "tree_sha256": version.tree_sha256,
        "vendor": _vendor(app, run, check),
        "completeness": _completeness(check),
        "checks": checks,
        "acceptance": acceptance,
        "tool": {"name": "mirror", "version": __version__},
    }
    if inventory_sha256 is not None:
        predicate["inventory"] = {"sha256": inventory_sha256, "spdx_version": SPDX_VERSION}
    subject = f"{item.domain}/{item.version}/bundle.{bundle.format}"
    return subject, bundle.sha256, predicate


def _vendor(app: App, run: ExportRun | None, check: SiteCheck | None) -> dict[str, Any]:
    """What the vendor's export said of the version: its project, job, times and pages."""
    return {
        "project_id": app.settings.api.project_id or None,
        "job_id": run.vendor_job_id if run is not None else None,
        "started_at": rfc3339_or_none(run.vendor_started_at if run else None),
        "completed_at": rfc3339_or_none(run.finished_at if run else None),
        "page_count": check.page_count if check is not None else None,
    }


def _completeness(check: SiteCheck | None) -> dict[str, Any] | None:
    """The site check's findings, or None when the version was never checked."""
    if check is None:
        return None
    return {
        "pages": check.pages,
        "broken_links": check.broken_links,
        "missing_assets": check.missing_assets,
        "page_count_compared": not check.paths_named and check.page_count is not None,
        "tolerance": check.tolerance,
        "report_sha256": check.report_sha256,
        "summary": _summary(check),
    }


def _summary(check: SiteCheck) -> str:
    return site_line(check.pages, check.page_count, check.broken_links, check.missing_assets)


def attach(app: App, staging: Path, manifest: Manifest, key: SigningKey) -> Manifest:
    """The manifest with every item's provenance written into `staging` and listed."""
    items: list[ManifestItem] = []
    with app.db.session() as session:
        for item in manifest.items:
            listed = write_inventory(app, session, staging, item)
            subject, sha256, predicate = predicate_of(app, session, item, listed.sha256)
            envelope = sign_statement(statement(subject, sha256, predicate), key)
            name = f"{PROVENANCE_DIR}/{item.domain}/{item.version}.intoto.json"
            _write(staging / name, envelope)
            entry = ProvenanceEntry(
                name=name, size=len(envelope), sha256=hash_bytes(envelope), subject_sha256=sha256
            )
            items.append(item.model_copy(update={"provenance": entry, "inventory": listed}))
    for directory in {(staging / i.provenance.name).parent for i in items if i.provenance}:
        fsync_dir(directory)
    return manifest.model_copy(update={"items": items})


def write_inventory(
    app: App, session: Session, staging: Path, item: ManifestItem
) -> InventoryEntry:
    """Write the item's SPDX inventory into `staging` (module docstring), hashed as written."""
    version, bundle, run = _rows(session, item)
    facts = InventoryFacts(
        domain=item.domain,
        version=item.version,
        bundle_format=bundle.format,
        bundle_sha256=bundle.sha256,
        supplier=supplier_of(app.settings.api.base_url),
        exported_at=version.created_at,
        tool_version=__version__,
        project_id=app.settings.api.project_id or None,
        job_id=run.vendor_job_id if run is not None else None,
    )
    name = f"{PROVENANCE_DIR}/{item.domain}/{item.version}.spdx.json"
    (staging / name).parent.mkdir(parents=True, exist_ok=True)
    limits = app.settings.store.archive_limits()
    with (
        digests.files_of(
            app.store, item.label, bundle.sha256, version.tree_sha256, limits, sha1=True
        ) as files,
        _new_file(staging / name) as out,
    ):
        hashing = HashingWriter(out)
        for chunk in document(facts, _with_sha1(files)):
            hashing.write(chunk)
        out.flush()
        os.fsync(out.fileno())
    digest = hashing.result
    return InventoryEntry(name=name, size=digest.size, sha256=digest.sha256)


def _with_sha1(files: FileList) -> Iterator[FileEntry]:
    for path, size, sha256, sha1 in files.with_sha1():
        assert sha1 is not None  # files_of(sha1=True) gives every file's
        yield path, size, sha256, sha1


def _new_file(path: Path) -> BinaryIO:
    return os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644), "wb")


def _write(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
