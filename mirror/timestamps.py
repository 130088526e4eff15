"""The one timestamp form of every JSON document and message: RFC 3339, UTC, `Z`, whole seconds.

Scripts compare and sort these as strings; one form everywhere keeps that safe.
"""

from __future__ import annotations

from datetime import UTC, datetime


def utcnow() -> datetime:
    """The current time, timezone-aware UTC: the one clock default of the package."""
    return datetime.now(UTC)


def rfc3339(moment: datetime) -> str:
    """`2026-11-29T02:00:00Z` (a naive datetime is taken as UTC)."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def rfc3339_or_none(moment: datetime | None) -> str | None:
    return rfc3339(moment) if moment is not None else None


def parse_zoned(text: str) -> datetime:
    """The moment RFC 3339 text names; ValueError (saying why) for text that is not a time
    or names no zone: in a signed document a time without a zone means nothing."""
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"not an ISO 8601 time: {text!r}") from None
    if moment.tzinfo is None:
        raise ValueError(f"time without a zone: {text!r}")
    return moment
