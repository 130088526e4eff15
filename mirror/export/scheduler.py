"""The daemon's scheduling decisions, as pure functions of state and a clock reading.

No I/O here: the daemon loads `DomainState`s from the index, asks `plan()` what to
start now and when to wake up next, and carries the decisions out.

Promises:
- A domain with no version and no finished run is due at once (no jitter).
- After a stored or unchanged run the next one is due `every` after the previous
  one started, plus a jitter in [0, jitter × every) that depends only on the seed,
  the domain and the run id, so a restart or a test computes the same time.
- After a failed run the domain is retried sooner than `every` but backing off
  (failure_retry × 2^(n-1), at most `every`) so a broken domain does not hammer the vendor.
- `not_before` (a vendor 409/429 or a spent start budget) always wins over the due time.
- An unfinished run leased by another process is not eligible before its lease
  expires (the holder's heartbeat keeps moving that), so replicas leave it alone.
- Unfinished runs are resumed before any new work; among new work the domain that
  has been due the longest goes first. A run that still needs a vendor start is
  only planned while the shared start budget has room.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from mirror.units import format_duration

DEFAULT_FAILURE_RETRY = 300.0
DEFAULT_DEFER = 30.0
MIN_DEFER = 0.5
MAX_DEFER = 6 * 3600.0


@dataclass(frozen=True)
class ActiveRun:
    """A run of the domain that is not finished yet (in the index, any process)."""

    run_id: int
    state: str
    has_vendor_job: bool
    created_at: datetime
    bytes_done: int = 0
    lease_owner: str | None = None
    lease_expires_at: datetime | None = None


@dataclass(frozen=True)
class DomainState:
    """What the scheduler needs to know about one configured domain."""

    domain: str
    every: float
    known_since: datetime
    last_run_id: int | None = None
    last_run_started_at: datetime | None = None
    last_run_state: str | None = None
    consecutive_failures: int = 0
    latest_version_at: datetime | None = None
    not_before: datetime | None = None
    active: ActiveRun | None = None

    @property
    def needs_start(self) -> bool:
        """True when running it would start a new vendor job (and so spend the start budget)."""
        return self.active is None or not self.active.has_vendor_job


def jitter_seconds(domain: str, cycle: int, every: float, jitter: float, seed: int = 0) -> float:
    """A delay in [0, jitter × every), the same for the same seed, domain and cycle."""
    if jitter <= 0 or every <= 0:
        return 0.0
    digest = hashlib.sha256(f"{seed}:{domain}:{cycle}".encode()).digest()
    fraction = int.from_bytes(digest[:8], "big") / 2**64
    return fraction * jitter * every


def failure_backoff(failures: int, every: float, base: float = DEFAULT_FAILURE_RETRY) -> float:
    """Seconds to wait after the n-th failed run in a row (doubling, capped at `every`)."""
    if failures <= 0:
        return every
    return min(every, base * 2.0 ** min(failures - 1, 30))


def due_at(
    state: DomainState,
    *,
    jitter: float,
    seed: int = 0,
    failure_retry: float = DEFAULT_FAILURE_RETRY,
) -> datetime:
    """When the domain's next run is due, ignoring `not_before` (see `eligible_at`)."""
    if state.active is not None:
        return state.active.created_at
    if state.last_run_started_at is None:
        if state.latest_version_at is None:
            return state.known_since
        return state.latest_version_at + timedelta(seconds=state.every)
    cycle = state.last_run_id or 0
    if state.last_run_state == "failed":
        interval = failure_backoff(state.consecutive_failures, state.every, failure_retry)
    else:
        interval = state.every
    delay = interval + jitter_seconds(state.domain, cycle, interval, jitter, seed)
    return state.last_run_started_at + timedelta(seconds=delay)


def eligible_at(
    state: DomainState,
    *,
    jitter: float,
    seed: int = 0,
    failure_retry: float = DEFAULT_FAILURE_RETRY,
) -> datetime:
    """The earliest time the domain may run: its due time, or `not_before` or the expiry of
    another holder's lease if later."""
    due = due_at(state, jitter=jitter, seed=seed, failure_retry=failure_retry)
    if state.not_before is not None and state.not_before > due:
        due = state.not_before
    active = state.active
    if active is not None and active.lease_owner and active.lease_expires_at is not None:
        due = max(due, active.lease_expires_at)
    return due


def defer_seconds(retry_after: float | None, default: float = DEFAULT_DEFER) -> float:
    """How long to put a domain aside after a 409/429/budget answer (bounded, never zero)."""
    seconds = default if retry_after is None else retry_after
    return min(MAX_DEFER, max(MIN_DEFER, seconds))


@dataclass(frozen=True)
class Plan:
    """The decisions of one scheduler pass."""

    start: list[str] = field(default_factory=list)
    budget_deferred: list[str] = field(default_factory=list)
    waiting: list[str] = field(default_factory=list)
    next_wake: datetime | None = None
    next_due: tuple[str, datetime] | None = None
    budget_remaining: int = 0


def plan(
    states: Iterable[DomainState],
    *,
    now: datetime,
    running: set[str],
    free_slots: int,
    budget_remaining: int,
    budget_wait: float,
    jitter: float,
    seed: int = 0,
    failure_retry: float = DEFAULT_FAILURE_RETRY,
    spread: str | None = None,
) -> Plan:
    """Which domains to start now (in order) and when anything next becomes due.

    With `spread` (a replica's identity), domains due within the same 10 s are taken
    in an order that depends on it, so replicas sharing an index pick different ones.

    `budget_remaining` is how many new vendor starts are allowed right now and
    `budget_wait` the seconds until the next one is (both from the index);
    domains due but held back by the budget are returned in `budget_deferred`
    and should get `not_before = now + budget_wait`.
    """
    due_now, next_due = _due_now(
        states, now, running, jitter=jitter, seed=seed, failure_retry=failure_retry, spread=spread
    )
    start, deferred, waiting, remaining = _share_out(due_now, budget_remaining, free_slots)
    next_wake = next_due[1] if next_due is not None else None
    if deferred:
        budget_at = now + timedelta(seconds=max(budget_wait, MIN_DEFER))
        if next_wake is None or budget_at < next_wake:
            next_wake = budget_at
    return Plan(
        start=start,
        budget_deferred=deferred,
        waiting=waiting,
        next_wake=next_wake,
        next_due=next_due,
        budget_remaining=remaining,
    )


def _share_out(
    due_now: Iterable[DomainState], budget: int, slots: int
) -> tuple[list[str], list[str], list[str], int]:
    """(start, held back by the start budget, waiting for a slot, budget left), in order:
    a resumed run needs no start, so only new runs spend the budget."""
    start: list[str] = []
    deferred: list[str] = []
    waiting: list[str] = []
    remaining = max(0, budget)
    slots = max(0, slots)
    for state in due_now:
        if state.needs_start and remaining <= 0:
            deferred.append(state.domain)
        elif slots <= 0:
            waiting.append(state.domain)
        else:
            start.append(state.domain)
            slots -= 1
            remaining -= 1 if state.needs_start else 0
    return start, deferred, waiting, remaining


def _due_now(
    states: Iterable[DomainState],
    now: datetime,
    running: set[str],
    *,
    jitter: float,
    seed: int,
    failure_retry: float,
    spread: str | None,
) -> tuple[list[DomainState], tuple[str, datetime] | None]:
    """The domains eligible now, unfinished runs first, then by due time (and `spread`);
    and the first of the others to become eligible."""
    due_now: list[tuple[int, float, str, DomainState]] = []
    next_due: tuple[str, datetime] | None = None
    for state in states:
        if state.domain in running:
            continue
        eligible = eligible_at(state, jitter=jitter, seed=seed, failure_retry=failure_retry)
        if eligible <= now:
            tier = 0 if state.active is not None else 1
            due = due_at(state, jitter=jitter, seed=seed, failure_retry=failure_retry)
            due_key = due.timestamp() if spread is None else due.timestamp() // 10
            due_now.append((tier, due_key, _order(state.domain, spread), state))
        elif next_due is None or eligible < next_due[1]:
            next_due = (state.domain, eligible)
    due_now.sort(key=lambda item: (item[0], item[1], item[2]))
    return [item[3] for item in due_now], next_due


def _order(domain: str, spread: str | None) -> str:
    if spread is None:
        return domain
    return hashlib.sha256(f"{spread}:{domain}".encode()).hexdigest()


def status_line(
    running: int, idle: int, next_due: tuple[str, datetime] | None, now: datetime
) -> str:
    """The systemd STATUS= text, e.g. '3 running, 12 idle, next due docs.x in 5m'."""
    text = f"{running} running, {idle} idle"
    if next_due is not None:
        delay = format_duration((next_due[1] - now).total_seconds())
        text += f", next due {next_due[0]} in {delay}"
    return text
