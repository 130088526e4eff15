"""Version labels: per domain, monotonic, the UTC export date, `.2`, `.3` later that day."""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import datetime

_LABEL = re.compile(r"^(\d{4}-\d{2}-\d{2})(?:\.(\d+))?$")


def label_key(label: str) -> tuple[str, int]:
    """Sort key: date, then the same-day counter (a bare date is the first of its day)."""
    match = _LABEL.match(label)
    if not match:
        return (label, 0)
    return (match.group(1), int(match.group(2) or 1))


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
