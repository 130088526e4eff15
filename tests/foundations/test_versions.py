from __future__ import annotations

from datetime import UTC, datetime

from mirror.versions import VersionLabel, VersionRef, label_key, newest, next_label, sort_labels

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


def test_version_label_orders_by_date_then_counter_not_as_text() -> None:
    ten, nine = VersionLabel("2026-11-21.10"), VersionLabel("2026-11-21.9")
    assert nine < ten and ten > nine and "2026-11-21.10" < "2026-11-21.9"  # as text: wrong
    assert VersionLabel("2026-11-21") < VersionLabel("2026-11-21.2") <= VersionLabel("2026-11-21.2")
    assert sorted(map(VersionLabel, ["2026-11-21.10", "2026-11-21", "2026-11-20.3"])) == [
        "2026-11-20.3",
        "2026-11-21",
        "2026-11-21.10",
    ]
    assert ten == "2026-11-21.10" and {ten: 1}["2026-11-21.10"] == 1  # still the label itself


def test_newest_is_the_max_in_label_order() -> None:
    assert newest(["2026-11-21.9", "2026-11-21.10", "2026-11-20.12"]) == "2026-11-21.10"
    assert isinstance(newest(["2026-11-21"]), VersionLabel)
    assert newest([]) is None


def test_version_ref_orders_labels_and_serialises_as_the_json_contract_names_it() -> None:
    ref = VersionRef("docs.example.com", "2026-11-21.2", "ab" * 32, 123, "tar.gz")  # type: ignore[arg-type]
    assert isinstance(ref.label, VersionLabel)
    assert ref.as_dict() == {
        "domain": "docs.example.com",
        "version": "2026-11-21.2",
        "sha256": "ab" * 32,
        "size": 123,
        "format": "tar.gz",
    }
    assert type(ref.as_dict()["version"]) is str  # a plain label in documents
