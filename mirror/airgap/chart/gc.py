"""`chart gc`: retention on the air-gapped side, old versions of a domain removed from the bucket.

Promises:
- Per domain the `keep` newest versions (by version label order) stay, and so
  do, however old: the current version (the promoted one, or the newest when
  nothing is promoted), the rollback target (what `chart rollback` would make
  current) and the newest version in the index (the base the connected side
  builds its next delta on).
- Only versions the index lists are removed. A version being imported (bundle
  and manifest written, index entry not yet) and any object the index does not
  list are never touched.
- Index last, as with publishing, through a journal: the versions are first
  written to `DOMAIN/gc.json` as pending, then taken out of `index.json`, then
  their manifests, their evidence (verification record, provenance, inventory) and
  their bundles are deleted, then the journal entry is cleared. A version removed can
  be carried again (`transfer pack --full --from-set N`) and imports as new.
  A gc killed at any instant leaves no index entry pointing at a missing
  object; the next gc finishes the journal it finds before anything else (a
  dry run reports it).
- Every pointer document changes by one conditional read-modify-write, so an
  import or promotion meanwhile is never lost; a version that became current
  or the rollback target while gc took it out of the index is put back before
  any of its objects is deleted.
- `dry_run` changes nothing and reports exactly what a real run would remove,
  with the bytes it would free (bundle and manifest objects).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from mirror.airgap import layout
from mirror.airgap.chart.bucket import require_index
from mirror.airgap.chart.promotion import rollback_target
from mirror.errors import ConfigError, OperationFailed
from mirror.timestamps import rfc3339, utcnow
from mirror.versions import VersionLabel, VersionRef

log = logging.getLogger(__name__)

Clock = Callable[[], datetime]

CURRENT = "current"
ROLLBACK_TARGET = "rollback target"
DELTA_BASE = "delta base"
NEWEST = "newest"
PROMOTED_MEANWHILE = "promoted meanwhile"

EVIDENCE = (layout.record_key, layout.provenance_key, layout.inventory_key)
"""A version's evidence, removed with it (after its manifest, before its bundle): left
behind, it would be about an object that is gone, and a later import of the same version
(carried again) would meet it."""


class Listing(layout.Bucket, Protocol):
    """What finding the bucket's domains needs (`bucket_domains`; gc, `mirror serve`)."""

    @property
    def prefix(self) -> str: ...

    def list_keys(self, prefix: str = "") -> list[str]: ...


class GcStore(Listing, Protocol):
    """What gc needs of mirror.airgap.s3.objectstore.ObjectStore."""

    def head(self, key: str) -> dict[str, Any] | None: ...

    def delete(self, key: str) -> None: ...


@dataclass(frozen=True)
class RemovedVersion:
    """A version gc removes: its bundle (`ref`), its objects, and the bytes its removal frees
    (`freed`: the bundle and the manifest object)."""

    ref: VersionRef
    object: str
    manifest: str
    freed: int

    def as_dict(self) -> dict[str, Any]:
        return {
            "version": str(self.ref.label),
            "sha256": self.ref.sha256,
            "object": self.object,
            "manifest": self.manifest,
            "size": self.freed,
        }


@dataclass(frozen=True)
class KeptVersion:
    """A version gc keeps, and why."""

    label: VersionLabel
    reasons: tuple[str, ...]

    def as_dict(self) -> dict[str, Any]:
        return {"version": str(self.label), "reasons": list(self.reasons)}


@dataclass(frozen=True)
class DomainGc:
    """One domain's outcome: removed (or to remove), kept and why, journal work."""

    domain: str
    removed: list[RemovedVersion]
    kept: list[KeptVersion]
    finished: list[str] = field(default_factory=list)
    restored: list[str] = field(default_factory=list)

    @property
    def bytes_freed(self) -> int:
        return sum(version.freed for version in self.removed)

    def as_dict(self) -> dict[str, Any]:
        return {
            "domain": self.domain,
            "removed": [version.as_dict() for version in self.removed],
            "kept": [version.as_dict() for version in self.kept],
            "finished": self.finished,
            "restored": self.restored,
            "bytes_freed": self.bytes_freed,
        }


@dataclass(frozen=True)
class GcReport:
    keep: int
    dry_run: bool
    domains: list[DomainGc]

    @property
    def bytes_freed(self) -> int:
        return sum(domain.bytes_freed for domain in self.domains)

    def as_dict(self) -> dict[str, Any]:
        return {
            "keep": self.keep,
            "dry_run": self.dry_run,
            "domains": [domain.as_dict() for domain in self.domains],
            "bytes_freed": self.bytes_freed,
        }


# ---- what stays -----------------------------------------------------------------------------


def _rollback_target(current: layout.Current | None, domain: str) -> str | None:
    try:
        return rollback_target(current, domain)
    except OperationFailed:
        return None


def protected_versions(
    labels: Iterable[str], current: layout.Current | None, domain: str, keep: int
) -> dict[str, tuple[str, ...]]:
    """{version: why it stays} for the listed `labels`; every other label may go."""
    ordered = sorted(map(VersionLabel, labels))
    reasons: dict[str, list[str]] = {}

    def protect(version: str | None, why: str) -> None:
        if version is not None and version in ordered:
            reasons.setdefault(version, []).append(why)

    newest = ordered[-1] if ordered else None
    live = current.current if current is not None and current.current else newest
    protect(live, CURRENT)
    protect(_rollback_target(current, domain), ROLLBACK_TARGET)
    protect(newest, DELTA_BASE)
    for label in ordered[-keep:]:
        protect(label, f"{NEWEST} {keep}")
    return {version: tuple(why) for version, why in reasons.items()}


# ---- the journal and the index ----------------------------------------------------------------


def _write_journal(store: GcStore, domain: str, entries: list[layout.IndexEntry]) -> None:
    """Add `entries` to the journal's pending list (before the index loses them)."""

    def add(journal: layout.GcJournal | None) -> layout.GcJournal | None:
        pending = {entry.version: entry for entry in journal.pending} if journal else {}
        if all(entry.version in pending for entry in entries):
            return None
        pending.update({entry.version: entry for entry in entries})
        fields = {"domain": domain, "pending": sorted(pending.values(), key=_entry_order)}
        if journal is None:
            return layout.GcJournal.model_validate(fields)
        return journal.model_copy(update=fields)

    layout.update_document(store, layout.gc_journal_key(store, domain), layout.GcJournal, add)
    log.info("gc journal written", extra={"domain": domain, "versions": _labels(entries)})


def _clear_journal(
    store: GcStore, domain: str, removed: list[layout.IndexEntry], kept: list[str], now: Clock
) -> None:
    """Take the finished versions off the pending list; record the removed ones (bounded)."""
    done = {entry.version for entry in removed} | set(kept)

    def clear(journal: layout.GcJournal | None) -> layout.GcJournal | None:
        if journal is None:
            return None
        at = rfc3339(now())
        records = [layout.RemovedRecord(version=entry.version, at=at) for entry in removed]
        fields = {
            "pending": [entry for entry in journal.pending if entry.version not in done],
            "removed": [*journal.removed, *records][-layout.HISTORY_LIMIT :],
        }
        return journal.model_copy(update=fields)

    layout.update_document(store, layout.gc_journal_key(store, domain), layout.GcJournal, clear)


def _change_index(
    store: GcStore,
    domain: str,
    now: Clock,
    change: Callable[[dict[str, layout.IndexEntry]], bool],
) -> None:
    """Apply `change` (True when it changed anything) to the index's {version: entry}."""

    def apply(index: layout.Index | None) -> layout.Index | None:
        if index is None:
            return None
        versions = {entry.version: entry for entry in index.versions}
        if not change(versions):
            return None
        ordered = sorted(versions.values(), key=_entry_order)
        return index.model_copy(update={"versions": ordered, "updated_at": rfc3339(now())})

    layout.update_document(store, layout.index_key(store, domain), layout.Index, apply)


def _drop_from_index(
    store: GcStore, domain: str, entries: list[layout.IndexEntry], now: Clock
) -> None:
    doomed = {entry.version for entry in entries}

    def drop(versions: dict[str, layout.IndexEntry]) -> bool:
        present = doomed & set(versions)
        for version in present:
            del versions[version]
        return bool(present)

    _change_index(store, domain, now, drop)


def _put_back_protected(
    store: GcStore, domain: str, entries: list[layout.IndexEntry], now: Clock
) -> list[str]:
    """Versions of `entries` that became current or the rollback target meanwhile go back
    into the index (their objects are still there); returns their labels."""
    current = layout.read_current(store, domain)
    live = current.current if current is not None else None
    wanted = {live, _rollback_target(current, domain)}
    back = [entry for entry in entries if entry.version in wanted]
    if not back:
        return []

    def restore(versions: dict[str, layout.IndexEntry]) -> bool:
        missing = [entry for entry in back if entry.version not in versions]
        versions.update({entry.version: entry for entry in missing})
        return bool(missing)

    _change_index(store, domain, now, restore)
    log.warning("promoted meanwhile; kept", extra={"domain": domain, "versions": _labels(back)})
    return _labels(back)


def _finish(
    store: GcStore, domain: str, entries: list[layout.IndexEntry], now: Clock
) -> tuple[list[layout.IndexEntry], list[str]]:
    """Journaled `entries`: out of the index, objects deleted, journal cleared.
    Returns (the entries removed, the labels put back because they became protected)."""
    _drop_from_index(store, domain, entries, now)
    restored = _put_back_protected(store, domain, entries, now)
    removed = [entry for entry in entries if entry.version not in restored]
    for entry in removed:
        store.delete(entry.manifest)
        for evidence in EVIDENCE:
            store.delete(evidence(store, domain, entry.version))
        store.delete(entry.object)
        log.info("version removed", extra={"domain": domain, "version": entry.version})
    _clear_journal(store, domain, removed, restored, now)
    return removed, restored


# ---- one domain, every domain -------------------------------------------------------------------


def _entry_order(entry: layout.IndexEntry) -> VersionLabel:
    return VersionLabel(entry.version)


def _labels(entries: Iterable[layout.IndexEntry]) -> list[str]:
    return [entry.version for entry in entries]


def _measured(store: GcStore, domain: str, entry: layout.IndexEntry) -> RemovedVersion:
    """The version with the bytes its removal frees: the bundle and the manifest object."""
    manifest = store.head(entry.manifest)
    ref = VersionRef(
        domain, VersionLabel(entry.version), entry.sha256, entry.size, layout.format_of(entry)
    )
    freed = entry.size + (manifest["size"] if manifest is not None else 0)
    return RemovedVersion(ref, object=entry.object, manifest=entry.manifest, freed=freed)


def gc_domain(
    store: GcStore, domain: str, keep: int, *, dry_run: bool = False, now: Clock = utcnow
) -> DomainGc:
    """Apply the retention rule to one domain (NotFound when the bucket has no index for it)."""
    journal = layout.read_gc_journal(store, domain)
    pending = list(journal.pending) if journal is not None else []
    restored: list[str] = []
    if pending and not dry_run:
        log.info("finishing an interrupted gc", extra={"domain": domain})
        _, restored = _finish(store, domain, pending, now)
    index = require_index(store, domain)
    unfinished = set() if not dry_run else set(_labels(pending))
    listed = [entry for entry in index.versions if entry.version not in unfinished]
    current = layout.read_current(store, domain)
    reasons = protected_versions(_labels(listed), current, domain, keep)
    doomed = [entry for entry in listed if entry.version not in reasons]
    removed = [_measured(store, domain, entry) for entry in doomed]
    if doomed and not dry_run:
        _write_journal(store, domain, doomed)
        gone, put_back = _finish(store, domain, doomed, now)
        restored += put_back
        removed = [version for version in removed if version.ref.label in _labels(gone)]
        reasons.update({label: (PROMOTED_MEANWHILE,) for label in put_back})
    kept = [
        KeptVersion(label, reasons[label])
        for label in sorted(map(VersionLabel, reasons), reverse=True)
    ]
    return DomainGc(
        domain=domain,
        removed=sorted(removed, key=lambda version: version.ref.label),
        kept=kept,
        finished=[label for label in _labels(pending) if label not in restored],
        restored=restored,
    )


def bucket_domains(store: Listing) -> list[str]:
    """Every domain with an index in the bucket, sorted."""
    root = f"{store.prefix}/" if store.prefix else ""
    found: set[str] = set()
    for key in store.list_keys(root):
        parts = key[len(root) :].split("/")
        if len(parts) == 2 and parts[1] == layout.INDEX:
            found.add(parts[0])
    return sorted(found)


def gc(
    store: GcStore,
    keep: int,
    domains: Iterable[str] = (),
    *,
    dry_run: bool = False,
    now: Clock = utcnow,
) -> GcReport:
    """Apply the retention rule to `domains` (every domain in the bucket when empty)."""
    if keep < 1:
        raise ConfigError(f"keep must be at least 1 (got {keep})")
    chosen = list(dict.fromkeys(domains)) or bucket_domains(store)
    results = [gc_domain(store, domain, keep, dry_run=dry_run, now=now) for domain in chosen]
    return GcReport(keep=keep, dry_run=dry_run, domains=results)
