"""When to try an HTTP call again: one Retry-After parser and one backoff for the vendor side.

Both the admin API client (`vendor.client`) and the bundle download (`vendor.download`) wait
between attempts the same way; only their parameters differ, and those are explicit.

Promises:

- `parse_retry_after` reads a Retry-After value as delta seconds (`"120"`, also `"2.5"`) or an
  HTTP date, and gives the seconds to wait from `now` (never negative); None for a missing,
  empty or unreadable value, so a caller falls back to its own backoff;
- `Backoff.delay(attempt, retry_after)` is stamina's formula, capped exponential plus
  jitter (`min(maximum, initial * exp_base ** (attempt - 1) + uniform(0, jitter))`), and a
  server's Retry-After is a floor under it (itself capped at `retry_after_cap`): we never
  come back sooner than the server asked, nor wait longer than the cap because it asked.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

_SECONDS = re.compile(r"\s*([-+]?\d+(?:\.\d+)?)\s*")

Uniform = Callable[[float, float], float]


def parse_retry_after(value: str | None, now: datetime) -> float | None:
    """Seconds to wait from a Retry-After value (delta seconds or HTTP date); None if unusable."""
    if value is None or not value.strip():
        return None
    match = _SECONDS.fullmatch(value)
    if match is not None:
        seconds = float(match.group(1))
        return max(seconds, 0.0) if math.isfinite(seconds) else None
    try:
        when = parsedate_to_datetime(value.strip())
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max((when - now).total_seconds(), 0.0)


def backoff_delay(
    attempt: int,
    *,
    initial: float,
    maximum: float,
    jitter: float,
    exp_base: float = 2.0,
    rng: Uniform = random.uniform,
) -> float:
    """stamina's wait before retry number `attempt` (1-based): capped exponential plus jitter."""
    extra = rng(0.0, jitter) if jitter > 0 else 0.0
    try:
        return min(maximum, initial * exp_base ** (attempt - 1) + extra)
    except OverflowError:
        return maximum


@dataclass(frozen=True)
class Backoff:
    """The wait between attempts of one retry loop, with every parameter explicit."""

    initial: float
    maximum: float
    jitter: float
    exp_base: float = 2.0
    retry_after_cap: float = math.inf

    def delay(
        self, attempt: int, retry_after: float | None = None, *, rng: Uniform = random.uniform
    ) -> float:
        """The wait before retry `attempt` (1-based); the server's Retry-After is a minimum."""
        wait = backoff_delay(
            attempt,
            initial=self.initial,
            maximum=self.maximum,
            jitter=self.jitter,
            exp_base=self.exp_base,
            rng=rng,
        )
        if retry_after is not None:
            wait = max(wait, min(max(retry_after, 0.0), self.retry_after_cap))
        return wait
