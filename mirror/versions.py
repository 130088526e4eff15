"""Versions: the one model of "a domain's version and its bundle", and its ordered label.

Labels are per domain and monotonic: the UTC export date, then `.2`, `.3` later that
day. `VersionLabel` is a `str` (so it is stored, printed and serialised as the label
itself) whose comparisons follow that order, not the alphabet: `2026-01-01.10` is
after `2026-01-01.9`. `VersionRef` is the frozen reference every package passes
around; file formats convert from it at their edge.

Vocabulary (docs/architecture.md): a *version* is identified by its *label*; its bytes
are its *bundle*, named by sha256 and size, in an archive *format*.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

_LABEL = re.compile(r"^(\d{4}-\d{2}-\d{2})(?:\.(\d+))?$")


def label_key(label: str) -> tuple[str, int]:
    """Sort key: date, then the same-day counter (a bare date is the first of its day)."""
    match = _LABEL.match(label)
    if not match:
        return (label, 0)
    return (match.group(1), int(match.group(2) or 1))


def is_label(value: str) -> bool:
    """Whether `value` is a version label as `next_label` makes them (`2026-11-21`, `.2`...)."""
    return _LABEL.match(value) is not None


def next_label(existing: Iterable[str], when: datetime) -> str:
    """The label for a new version exported at `when` (UTC), after all `existing` ones.

    Monotonic even if the clock goes back: a date older than the newest label
    continues on the newest label's day.
    """
    day = when.strftime("%Y-%m-%d")
    newest: tuple[str, int] | None = None
    for label in existing:
        key = label_key(label)
        if _LABEL.match(label) and (newest is None or key > newest):
            newest = key
    if newest is None or newest[0] < day:
        return day
    return f"{newest[0]}.{newest[1] + 1}"


def sort_labels(labels: Iterable[str]) -> list[str]:
    return sorted(labels, key=label_key)


class VersionLabel(str):
    """A version's label, ordered by (date, same-day counter) rather than as text."""

    __slots__ = ()

    @property
    def key(self) -> tuple[str, int]:
        return label_key(self)

    def __lt__(self, other: str) -> bool:
        return label_key(self) < label_key(other)

    def __le__(self, other: str) -> bool:
        return label_key(self) <= label_key(other)

    def __gt__(self, other: str) -> bool:
        return label_key(self) > label_key(other)

    def __ge__(self, other: str) -> bool:
        return label_key(self) >= label_key(other)

    __hash__ = str.__hash__


def newest(labels: Iterable[str]) -> VersionLabel | None:
    """The newest of `labels` in label order; None when there are none."""
    found = [VersionLabel(label) for label in labels]
    return max(found) if found else None


@dataclass(frozen=True)
class VersionRef:
    """One stored version of one domain and the bundle that holds it."""

    domain: str
    label: VersionLabel
    sha256: str
    size: int
    format: str

    def __post_init__(self) -> None:
        if not isinstance(self.label, VersionLabel):
            object.__setattr__(self, "label", VersionLabel(self.label))

    def as_dict(self) -> dict[str, Any]:
        return {
            "domain": self.domain,
            "version": str(self.label),
            "sha256": self.sha256,
            "size": self.size,
            "format": self.format,
        }
