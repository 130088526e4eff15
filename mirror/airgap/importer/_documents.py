"""The documents an import shares with every other: each domain's `index.json`, the
promotions asked for, and the bucket's import state, written last."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from mirror.airgap import layout
from mirror.airgap.s3.objectstore import ObjectStore
from mirror.errors import IntegrityError
from mirror.sites import DEFAULT_SITE
from mirror.timestamps import utcnow
from mirror.transferset.format import iso_time
from mirror.transferset.reader import VerifiedSet
from mirror.versions import VersionLabel, newest

Promote = Callable[[ObjectStore, str, str], Any]


def update_indexes(
    store: ObjectStore,
    entries: dict[str, list[layout.IndexEntry]],
    *,
    now: Callable[[], datetime] = utcnow,
) -> None:
    """Add each domain's complete versions to its index, domain by domain."""
    for domain, domain_entries in entries.items():
        update_index(store, domain, domain_entries, now=now)


def promote_newest(
    store: ObjectStore, verified: VerifiedSet, domains: list[str], promote: Promote | None
) -> list[tuple[str, str]]:
    promoted: list[tuple[str, str]] = []
    if promote is None:
        return promoted
    for domain in domains:
        label = newest(i.version for i in verified.manifest.items if i.domain == domain)
        assert label is not None  # every domain given has an item in the set
        promote(store, domain, str(label))
        promoted.append((domain, str(label)))
    return promoted


def update_index(
    store: ObjectStore,
    domain: str,
    entries: list[layout.IndexEntry],
    *,
    now: Callable[[], datetime] = utcnow,
) -> layout.Index | None:
    """Add complete versions to DOMAIN/index.json (conditional read-modify-write)."""
    key = layout.index_key(store, domain)

    def add(current: layout.Index | None) -> layout.Index | None:
        versions = {entry.version: entry for entry in current.versions} if current else {}
        changed = current is None
        for entry in entries:
            existing = versions.get(entry.version)
            if existing is not None and existing.sha256 != entry.sha256:
                raise IntegrityError(
                    f"{store.bucket}/{key} lists {domain} {entry.version} with another sha256"
                )
            if existing is None:
                versions[entry.version] = entry
                changed = True
        if not changed:
            return None
        fields = {
            "domain": domain,
            "updated_at": iso_time(now()),
            "versions": [versions[label] for label in sorted(map(VersionLabel, versions))],
        }
        if current is None:
            return layout.Index.model_validate(fields)
        return current.model_copy(update=fields)

    return layout.update_document(store, key, layout.Index, add)


def record_import(
    store: ObjectStore, verified: VerifiedSet, *, at: str
) -> layout.ImportState | None:
    """Write the import state last: the newest sequence, its manifest hash, a bounded history."""
    manifest = verified.manifest

    def add(state: layout.ImportState | None) -> layout.ImportState | None:
        if state is not None and state.has(manifest.sequence, verified.manifest_sha256):
            return None
        record = layout.ImportRecord(
            sequence=manifest.sequence,
            manifest_sha256=verified.manifest_sha256,
            source_id=manifest.source_id,
            at=at,
        )
        history = [*(state.imported if state else []), record][-layout.MAX_IMPORT_HISTORY :]
        fields: dict[str, Any] = {"imported": history, "site": manifest.site or DEFAULT_SITE}
        if state is None or manifest.sequence >= state.last_sequence:
            fields.update(
                last_sequence=manifest.sequence,
                manifest_sha256=verified.manifest_sha256,
                source_id=manifest.source_id,
            )
        if state is None:
            return layout.ImportState.model_validate(fields)
        return state.model_copy(update=fields)

    return layout.update_document(store, layout.state_key(store), layout.ImportState, add)
