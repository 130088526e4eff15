"""mirror.serve.ranges: conditional and range requests as RFC 9110 says (pure)."""

from __future__ import annotations

import pytest

from mirror.serve.ranges import Plan, plan

TAG = '"' + "ab" * 32 + '"'
SIZE = 1000


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({}, Plan(200, 0, SIZE)),
        ({"range": "bytes=0-99"}, Plan(206, 0, 100, "bytes 0-99/1000")),
        ({"range": "bytes=900-"}, Plan(206, 900, 100, "bytes 900-999/1000")),
        ({"range": "bytes=900-5000"}, Plan(206, 900, 100, "bytes 900-999/1000")),
        ({"range": "bytes=-10"}, Plan(206, 990, 10, "bytes 990-999/1000")),
        ({"range": "bytes=-5000"}, Plan(206, 0, 1000, "bytes 0-999/1000")),
        ({"range": "BYTES = 5-5"}, Plan(206, 5, 1, "bytes 5-5/1000")),
        ({"range": "bytes=1000-"}, Plan(416, content_range="bytes */1000")),
        ({"range": "bytes=-0"}, Plan(416, content_range="bytes */1000")),
        ({"range": "bytes=0-1,5-6"}, Plan(200, 0, SIZE)),  # several: answered whole
        ({"range": "bytes=9-3"}, Plan(200, 0, SIZE)),  # invalid: ignored
        ({"range": "bytes=abc"}, Plan(200, 0, SIZE)),
        ({"range": "items=0-1"}, Plan(200, 0, SIZE)),
        ({"range": "bytes=-"}, Plan(200, 0, SIZE)),
        ({"if-none-match": TAG}, Plan(304)),
        ({"if-none-match": f'"other", W/{TAG}'}, Plan(304)),  # weak comparison
        ({"if-none-match": "*"}, Plan(304)),
        ({"if-none-match": '"other"'}, Plan(200, 0, SIZE)),
        ({"if-none-match": TAG, "range": "bytes=0-1"}, Plan(304)),
        ({"if-range": TAG, "range": "bytes=0-1"}, Plan(206, 0, 2, "bytes 0-1/1000")),
        ({"if-range": '"other"', "range": "bytes=0-1"}, Plan(200, 0, SIZE)),
        ({"if-range": f"W/{TAG}", "range": "bytes=0-1"}, Plan(200, 0, SIZE)),  # strong only
        ({"if-range": "Sat, 21 Nov 2026 02:00:00 GMT", "range": "bytes=0-1"}, Plan(200, 0, SIZE)),
        ({"if-range": TAG}, Plan(200, 0, SIZE)),
    ],
)
def test_get(headers: dict[str, str], expected: Plan) -> None:
    assert plan("GET", headers, TAG, SIZE) == expected


def test_head_ignores_range_but_not_if_none_match() -> None:
    assert plan("HEAD", {"range": "bytes=0-1"}, TAG, SIZE) == Plan(200, 0, SIZE)
    assert plan("HEAD", {"if-none-match": TAG}, TAG, SIZE) == Plan(304)


def test_an_empty_bundle_has_no_satisfiable_range() -> None:
    assert plan("GET", {"range": "bytes=0-"}, TAG, 0) == Plan(416, content_range="bytes */0")
    assert plan("GET", {}, TAG, 0) == Plan(200, 0, 0)


HUGE = "9" * 5000  # beyond Python's 4 300-digit conversion limit


@pytest.mark.parametrize(
    ("wanted", "expected"),
    [
        (f"bytes=0-{HUGE}", Plan(206, 0, SIZE, "bytes 0-999/1000")),  # to the end
        (f"bytes={HUGE}-", Plan(416, content_range="bytes */1000")),  # past the end
        (f"bytes={HUGE}-{HUGE}", Plan(416, content_range="bytes */1000")),
        (f"bytes={HUGE}-5", Plan(200, 0, SIZE)),  # last before first: ignored
        (f"bytes=-{HUGE}", Plan(206, 0, SIZE, "bytes 0-999/1000")),  # the whole
        (f"bytes={'0' * 5000}7-{'0' * 5000}9", Plan(206, 7, 3, "bytes 7-9/1000")),
        ("bytes=\u0661-\u0662", Plan(200, 0, SIZE)),  # digits, but not ASCII: malformed
    ],
)
def test_a_number_of_any_length_is_answered_without_converting_it(
    wanted: str, expected: Plan
) -> None:
    assert plan("GET", {"range": wanted}, TAG, SIZE) == expected
