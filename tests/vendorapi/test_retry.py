"""The one Retry-After parser and the one backoff shared by the vendor client and the download."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import httpx

from mirror.vendorapi import client, download, transport
from mirror.vendorapi.retry import Backoff, backoff_delay, parse_retry_after

NOW = datetime(2026, 11, 21, 10, 0, 0, tzinfo=UTC)


def no_jitter(low: float, high: float) -> float:
    return low


def full_jitter(low: float, high: float) -> float:
    return high


def test_parse_retry_after_takes_seconds_or_http_dates() -> None:
    assert parse_retry_after("1", NOW) == 1.0
    assert parse_retry_after(" 120 ", NOW) == 120.0
    assert parse_retry_after("2.5", NOW) == 2.5
    assert parse_retry_after(format_datetime(NOW + timedelta(seconds=90), usegmt=True), NOW) == 90
    assert parse_retry_after("Sat, 21 Nov 2026 09:00:00 GMT", NOW) == 0.0
    assert parse_retry_after("-5", NOW) == 0.0


def test_parse_retry_after_gives_none_for_what_it_cannot_read() -> None:
    for value in (None, "", "  ", "soon", "42%", "1e999", "Sat, 99 Foo"):
        assert parse_retry_after(value, NOW) is None, value


def test_backoff_is_capped_exponential_plus_jitter() -> None:
    waits = [
        backoff_delay(n, initial=1.0, maximum=10.0, jitter=1.0, rng=no_jitter) for n in range(1, 7)
    ]
    assert waits == [1.0, 2.0, 4.0, 8.0, 10.0, 10.0]
    assert backoff_delay(2, initial=1.0, maximum=10.0, jitter=0.5, rng=full_jitter) == 2.5
    assert backoff_delay(5000, initial=1.0, maximum=10.0, jitter=0.0) == 10.0


def test_retry_after_is_a_floor_under_the_backoff_and_capped() -> None:
    policy = Backoff(initial=1.0, maximum=10.0, jitter=0.0, retry_after_cap=60.0)
    assert policy.delay(1) == 1.0
    assert policy.delay(4, retry_after=0.0) == 8.0
    assert policy.delay(1, retry_after=7.0) == 7.0
    assert policy.delay(1, retry_after=3600.0) == 60.0
    assert Backoff(initial=1.0, maximum=10.0, jitter=0.0).delay(1, 3600.0) == 3600.0


def test_both_retry_loops_use_the_one_policy() -> None:
    with httpx.Client() as http:
        api = client.VendorClient(http, base_url="http://x", key="k", wait_initial=2.0)
    assert api.transport.backoff == Backoff(initial=2.0, maximum=30.0, jitter=1.0)
    assert download.BACKOFF.retry_after_cap == 300.0 and math.isfinite(download.BACKOFF.maximum)
    assert transport.parse_retry_after is parse_retry_after is download.parse_retry_after
