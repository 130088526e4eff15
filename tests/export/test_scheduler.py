"""The pure scheduling core: due times, jitter, budget ordering, deferrals, failure back-off."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from mirror.export.scheduler import (
    MAX_DEFER,
    MIN_DEFER,
    ActiveRun,
    DomainState,
    defer_seconds,
    due_at,
    eligible_at,
    failure_backoff,
    jitter_seconds,
    plan,
    status_line,
)

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
HOUR = 3600.0


def state(domain: str, **fields: object) -> DomainState:
    base: dict[str, object] = {"domain": domain, "every": 6 * HOUR, "known_since": T0}
    base.update(fields)
    return DomainState(**base)  # type: ignore[arg-type]


def test_jitter_is_deterministic_bounded_and_varies() -> None:
    values = {jitter_seconds(f"d{i}.example.com", 7, 1000.0, 0.1, seed=1) for i in range(200)}
    assert all(0 <= v < 100.0 for v in values)
    assert len(values) == 200
    assert jitter_seconds("a.example.com", 7, 1000.0, 0.1, 1) == jitter_seconds(
        "a.example.com", 7, 1000.0, 0.1, 1
    )
    assert jitter_seconds("a.example.com", 7, 1000.0, 0.1, 1) != jitter_seconds(
        "a.example.com", 8, 1000.0, 0.1, 1
    )
    assert jitter_seconds("a.example.com", 7, 1000.0, 0.1, 1) != jitter_seconds(
        "a.example.com", 7, 1000.0, 0.1, 2
    )
    assert jitter_seconds("a.example.com", 7, 1000.0, 0.0, 1) == 0.0


def test_never_run_domain_is_due_at_once_without_jitter() -> None:
    fresh = state("new.example.com")
    assert due_at(fresh, jitter=0.5) == T0


def test_next_run_is_every_after_the_last_start_plus_jitter() -> None:
    done = state("a.example.com", last_run_id=5, last_run_started_at=T0, last_run_state="stored")
    due = due_at(done, jitter=0.1, seed=3)
    extra = jitter_seconds("a.example.com", 5, 6 * HOUR, 0.1, 3)
    assert due == T0 + timedelta(seconds=6 * HOUR + extra)
    assert T0 + timedelta(hours=6) <= due < T0 + timedelta(hours=6.6)
    assert due_at(done, jitter=0.0) == T0 + timedelta(hours=6)


def test_version_without_runs_counts_from_the_version() -> None:
    imported = state("a.example.com", latest_version_at=T0)
    assert due_at(imported, jitter=0.3) == T0 + timedelta(hours=6)


def test_failed_runs_back_off_up_to_every() -> None:
    assert failure_backoff(1, 6 * HOUR, 300) == 300
    assert failure_backoff(2, 6 * HOUR, 300) == 600
    assert failure_backoff(3, 6 * HOUR, 300) == 1200
    assert failure_backoff(50, 6 * HOUR, 300) == 6 * HOUR
    failed = state(
        "a.example.com",
        last_run_id=9,
        last_run_started_at=T0,
        last_run_state="failed",
        consecutive_failures=2,
    )
    assert due_at(failed, jitter=0.0, failure_retry=300) == T0 + timedelta(seconds=600)


def test_not_before_wins_over_due_time() -> None:
    later = T0 + timedelta(minutes=10)
    deferred = state("a.example.com", not_before=later)
    assert eligible_at(deferred, jitter=0.0) == later
    old_defer = state("a.example.com", not_before=T0 - timedelta(hours=1))
    assert eligible_at(old_defer, jitter=0.0) == T0


def test_defer_seconds_is_bounded() -> None:
    assert defer_seconds(None, default=12) == 12
    assert defer_seconds(0) == MIN_DEFER
    assert defer_seconds(10**9) == MAX_DEFER
    assert defer_seconds(42.0) == 42.0


def test_plan_starts_oldest_due_first_within_slots() -> None:
    states = [
        state("c.example.com", known_since=T0 - timedelta(minutes=1)),
        state("a.example.com", known_since=T0 - timedelta(minutes=3)),
        state("b.example.com", known_since=T0 - timedelta(minutes=2)),
        state("later.example.com", known_since=T0 + timedelta(minutes=5)),
    ]
    result = plan(
        states,
        now=T0,
        running=set(),
        free_slots=2,
        budget_remaining=10,
        budget_wait=0,
        jitter=0.0,
    )
    assert result.start == ["a.example.com", "b.example.com"]
    assert result.waiting == ["c.example.com"]
    assert result.budget_deferred == []
    assert result.next_due == ("later.example.com", T0 + timedelta(minutes=5))
    assert result.next_wake == T0 + timedelta(minutes=5)
    assert result.budget_remaining == 8


def test_plan_never_exceeds_the_start_budget_and_defers_the_rest() -> None:
    states = [state(f"d{i}.example.com", known_since=T0 - timedelta(seconds=i)) for i in range(6)]
    result = plan(
        states,
        now=T0,
        running=set(),
        free_slots=10,
        budget_remaining=3,
        budget_wait=1200,
        jitter=0.0,
    )
    assert result.start == ["d5.example.com", "d4.example.com", "d3.example.com"]
    assert result.budget_deferred == ["d2.example.com", "d1.example.com", "d0.example.com"]
    assert result.next_wake == T0 + timedelta(seconds=1200)
    assert result.budget_remaining == 0


def test_plan_resumes_unfinished_runs_first_and_they_need_no_budget_once_started() -> None:
    resumable = state(
        "resume.example.com",
        known_since=T0,
        active=ActiveRun(run_id=3, state="downloading", has_vendor_job=True, created_at=T0),
    )
    pending = state(
        "pending.example.com",
        active=ActiveRun(run_id=4, state="pending", has_vendor_job=False, created_at=T0),
    )
    new = state("new.example.com", known_since=T0 - timedelta(days=1))
    result = plan(
        [new, pending, resumable],
        now=T0 + timedelta(seconds=1),
        running=set(),
        free_slots=5,
        budget_remaining=0,
        budget_wait=60,
        jitter=0.0,
    )
    assert result.start == ["resume.example.com"]
    assert result.budget_deferred == ["pending.example.com", "new.example.com"]


def test_plan_skips_running_domains() -> None:
    result = plan(
        [state("a.example.com"), state("b.example.com")],
        now=T0,
        running={"a.example.com"},
        free_slots=4,
        budget_remaining=4,
        budget_wait=0,
        jitter=0.0,
    )
    assert result.start == ["b.example.com"]


def test_plan_with_nothing_due_reports_the_next_wake() -> None:
    done = state("a.example.com", last_run_id=1, last_run_started_at=T0, last_run_state="unchanged")
    result = plan(
        [done],
        now=T0 + timedelta(hours=1),
        running=set(),
        free_slots=4,
        budget_remaining=10,
        budget_wait=0,
        jitter=0.0,
    )
    assert result.start == []
    assert result.next_wake == T0 + timedelta(hours=6)


def test_status_line() -> None:
    line = status_line(3, 12, ("docs.x", T0 + timedelta(minutes=5)), T0)
    assert line == "3 running, 12 idle, next due docs.x in 5m"
    assert status_line(0, 0, None, T0) == "0 running, 0 idle"


def test_a_run_leased_by_another_replica_waits_for_its_lease() -> None:
    held = ActiveRun(
        run_id=1,
        state="downloading",
        has_vendor_job=True,
        created_at=T0 - timedelta(minutes=5),
        lease_owner="node-b:7:abcd",
        lease_expires_at=T0 + timedelta(seconds=20),
    )
    released = ActiveRun(1, "downloading", True, T0 - timedelta(minutes=5))
    assert eligible_at(state("a.example.com", active=held), jitter=0.0) == T0 + timedelta(
        seconds=20
    )
    assert eligible_at(state("a.example.com", active=released), jitter=0.0) == released.created_at
    decision = plan(
        [state("a.example.com", active=held)],
        now=T0,
        running=set(),
        free_slots=4,
        budget_remaining=10,
        budget_wait=0,
        jitter=0.0,
    )
    assert decision.start == [] and decision.next_wake == T0 + timedelta(seconds=20)
    later = plan(
        [state("a.example.com", active=held)],
        now=T0 + timedelta(seconds=21),
        running=set(),
        free_slots=4,
        budget_remaining=10,
        budget_wait=0,
        jitter=0.0,
    )
    assert later.start == ["a.example.com"]


def test_replicas_take_equally_due_domains_in_different_orders() -> None:
    states = [state(f"d{i:03d}.example.com") for i in range(200)]

    def first_four(spread: str | None) -> list[str]:
        return plan(
            states,
            now=T0,
            running=set(),
            free_slots=4,
            budget_remaining=1000,
            budget_wait=0,
            jitter=0.0,
            spread=spread,
        ).start

    assert first_four(None) == [f"d{i:03d}.example.com" for i in range(4)]
    picks = [set(first_four(f"host:{pid}:nonce")) for pid in (1, 2, 3)]
    assert picks[0].isdisjoint(picks[1]) and picks[1].isdisjoint(picks[2])
    assert first_four("host:1:nonce") == first_four("host:1:nonce")
