"""`current.json`: promote a version, roll back to the one before, show the history.

Promises:
- Only a complete version can become current (NotFound otherwise), and only one whose bundle
  object is in the bucket at the size its manifest names (`present_version`: a missing
  object is NotFound, exit 3; another size is IntegrityError, exit 5), checked before
  `current.json` is touched: a pointer to an object that is gone would make every pod's
  fetch fail while every check of the pointer is green.
- `current.json` is changed by one conditional read-modify-write on its ETag
  (`layout.update_document`): two operators at once never lose each other's
  change. If another writer changed which version is current since this one
  read it, the slower one gets TemporaryFailure (exit 75) and runs again: it
  decided on a state that no longer holds.
- Promoting the version that is already current changes nothing; the history
  is bounded to HISTORY_LIMIT entries.
- `read_history` of a domain the bucket does not hold (no current.json, no index) is
  NotFound (exit 3), like `chart values`; a domain with versions and no promotion yet
  has an empty history.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, Protocol

from mirror.airgap import layout
from mirror.airgap.chart.bucket import BundleVersion, complete_version, require_index
from mirror.airgap.s3.conditional import WriteConflict
from mirror.errors import IntegrityError, NotFound, OperationFailed
from mirror.timestamps import rfc3339, utcnow
from mirror.versions import VersionLabel

log = logging.getLogger(__name__)

HISTORY_LIMIT = layout.HISTORY_LIMIT

Clock = Callable[[], datetime]


def _promotion_stack(history: Iterable[layout.HistoryRecord]) -> list[str]:
    """Versions in the order they were promoted, with rolled-back ones taken off again."""
    stack: list[str] = []
    for entry in history:
        if entry.action == "rollback":
            while stack and stack[-1] != entry.version:
                stack.pop()
            if not stack:
                stack.append(entry.version)
        else:
            stack.append(entry.version)
    return stack


def with_promotion(
    document: layout.Current | None,
    domain: str,
    version: str,
    at: datetime,
    action: Literal["promote", "rollback"] = "promote",
) -> layout.Current:
    """The `current.json` that makes `version` current, its history extended (and bounded)."""
    history = list(document.history) if document else []
    history.append(layout.HistoryRecord(version=version, action=action, at=rfc3339(at)))
    fields = {"domain": domain, "current": version, "history": history[-HISTORY_LIMIT:]}
    if document is None:
        return layout.Current.model_validate(fields)
    return document.model_copy(update=fields)  # keeps what a newer tool added


def rollback_target(document: layout.Current | None, domain: str) -> str:
    """The version promoted before the current one; OperationFailed when there is none."""
    if document is None or not document.current:
        raise OperationFailed(
            f"nothing to roll back to: no version of {domain} has been promoted yet "
            f"(mirror chart promote {domain} VERSION)"
        )
    current = document.current
    stack = _promotion_stack(document.history)
    while stack and stack[-1] == current:
        stack.pop()
    if not stack:
        labels = {entry.version for entry in document.history} - {current}
        others = sorted(map(VersionLabel, labels))
        if not others:
            raise OperationFailed(
                f"nothing to roll back to: {current} is the only version of {domain} ever promoted"
            )
        raise OperationFailed(
            f"nothing to roll back to: {current} is the oldest promotion of {domain} left; "
            f"the later ones ({', '.join(others)}) were rolled back "
            f"(make one current again with: mirror chart promote {domain} VERSION)"
        )
    return stack[-1]


@dataclass(frozen=True)
class HistoryEntry:
    version: str
    action: str
    at: str
    current: bool


def read_history(store: layout.Bucket, domain: str) -> layout.Current | None:
    """`domain`'s current.json; None when nothing was promoted yet; NotFound when the bucket
    does not hold the domain at all."""
    document = layout.read_current(store, domain)
    if document is None:
        require_index(store, domain)
    return document


def history_view(document: layout.Current | None) -> list[HistoryEntry]:
    """The history, newest first; the newest entry is marked current."""
    if document is None:
        return []
    entries = list(reversed(document.history))
    return [
        HistoryEntry(
            version=entry.version,
            action=entry.action,
            at=entry.at,
            current=index == 0 and entry.version == document.current,
        )
        for index, entry in enumerate(entries)
    ]


def _change_current(
    store: layout.Bucket,
    domain: str,
    change: Callable[[layout.Current | None], layout.Current | None],
) -> layout.Current:
    """Apply `change` to current.json; refuse (WriteConflict) when, between the first read
    and the write, someone else made another version current and this change would write
    over theirs. When they made current exactly what this change wants (two imports of one
    set, both promoting), there is nothing left to write and nothing is refused."""
    key = layout.current_key(store, domain)
    seen: list[str | None] = []

    def guarded(document: layout.Current | None) -> layout.Current | None:
        live = document.current if document else None
        updated = change(document)
        if updated is not None and seen and seen[0] != live:
            raise WriteConflict(f"{store.bucket}/{key} was changed by someone else; run again")
        seen.append(live)
        return updated

    updated = layout.update_document(store, key, layout.Current, guarded)
    assert updated is not None  # every change below makes a version current
    return updated


class Promotable(layout.Bucket, Protocol):
    """What promote and rollback need of the bucket: the layout, and a HEAD of an object."""

    def head(self, key: str) -> dict[str, Any] | None: ...


def present_version(store: Promotable, domain: str, version: str) -> BundleVersion:
    """`version` if it is complete (`complete_version`) and its bundle object is there at
    the size its manifest names; NotFound (missing) or IntegrityError (another size)."""
    found = complete_version(store, domain, version)
    facts = store.head(found.key)
    if facts is None:
        raise NotFound(
            f"version {version} of {domain} has no bundle object ({store.bucket}/{found.key} "
            "is missing); import its transfer set again (with --allow-replay), then promote"
        )
    if facts["size"] != found.ref.size:
        raise IntegrityError(
            f"version {version} of {domain}: {store.bucket}/{found.key} is {facts['size']} "
            f"bytes, its manifest names {found.ref.size}; import its transfer set again "
            "(with --allow-replay), then promote"
        )
    return found


def promote(store: Promotable, domain: str, version: str, *, now: Clock = utcnow) -> layout.Current:
    """Make `version` (present, else NotFound) the current one; returns the new current.json.

    Promoting the version that is already current changes nothing.
    """
    present_version(store, domain, version)

    def make_current(document: layout.Current | None) -> layout.Current | None:
        if document is not None and document.current == version:
            return None
        return with_promotion(document, domain, version, now())

    updated = _change_current(store, domain, make_current)
    log.info("promoted", extra={"domain": domain, "version": version})
    return updated


def rollback(store: Promotable, domain: str, *, now: Clock = utcnow) -> layout.Current:
    """Make the previously promoted version current again (present, else NotFound); returns
    the new current.json."""

    def roll_back(document: layout.Current | None) -> layout.Current:
        target = rollback_target(document, domain)
        present_version(store, domain, target)
        return with_promotion(document, domain, target, now(), action="rollback")

    updated = _change_current(store, domain, roll_back)
    log.info("rolled back", extra={"domain": domain, "version": updated.current})
    return updated
