from __future__ import annotations

from datetime import UTC, datetime

from mirror.versions import label_key, next_label, sort_labels

NOV21 = datetime(2026, 11, 21, 9, 0, tzinfo=UTC)


def test_first_label_is_the_export_date() -> None:
    assert next_label([], NOV21) == "2026-11-21"


def test_same_day_counts_up() -> None:
    assert next_label(["2026-11-21"], NOV21) == "2026-11-21.2"
    assert next_label(["2026-11-21", "2026-11-21.2"], NOV21) == "2026-11-21.3"


def test_new_day_starts_fresh() -> None:
    assert next_label(["2026-11-20.4"], NOV21) == "2026-11-21"


def test_clock_going_back_stays_monotonic() -> None:
    label = next_label(["2026-11-25"], NOV21)
    assert label == "2026-11-25.2"
    assert label_key(label) > label_key("2026-11-25")


def test_sort_orders_counters_numerically() -> None:
    labels = ["2026-11-21.10", "2026-11-21.2", "2026-11-20", "2026-11-21"]
    assert sort_labels(labels) == ["2026-11-20", "2026-11-21", "2026-11-21.2", "2026-11-21.10"]
