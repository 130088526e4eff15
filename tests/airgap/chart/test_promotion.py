"""mirror.airgap.chart.promotion: current.json's history, promote and roll back on the bucket."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from mirror.airgap import chart, layout
from mirror.airgap.s3.objectstore import ObjectStore
from mirror.config import TargetSettings
from mirror.errors import (
    OperationFailed,
    TemporaryFailure,
)
from tests.airgap.chart.seeding import (
    DOMAIN,
    T0,
    Seeded,
    seed_version,
)
from tests.fixtures.memory import MemoryBucket

# --- current.json history --------------------------------------------------------------------


def history_doc(*steps: tuple[str, str]) -> layout.Current:
    document: layout.Current | None = None
    for index, (action, version) in enumerate(steps):
        at = T0 + timedelta(minutes=index)
        assert action in ("promote", "rollback")
        document = chart.with_promotion(document, "d.example", version, at, action=action)  # type: ignore[arg-type]
    assert document is not None
    return document


def test_promotion_appends_history_and_sets_current() -> None:
    document = history_doc(("promote", "2026-11-20"), ("promote", "2026-11-21"))
    document_json = document.as_dict()
    assert document_json["format"] == 1
    assert document_json["domain"] == "d.example"
    assert document_json["current"] == "2026-11-21"
    assert document_json["history"] == [
        {"version": "2026-11-20", "action": "promote", "at": "2026-11-22T02:00:00Z"},
        {"version": "2026-11-21", "action": "promote", "at": "2026-11-22T02:01:00Z"},
    ]


def test_rollback_goes_back_one_promotion_each_time() -> None:
    document = history_doc(("promote", "A"), ("promote", "B"), ("promote", "C"))
    assert chart.rollback_target(document, "d.example") == "B"
    document = history_doc(("promote", "A"), ("promote", "B"), ("promote", "C"), ("rollback", "B"))
    assert chart.rollback_target(document, "d.example") == "A"


def test_rollback_skips_repeated_promotions_of_the_current_version() -> None:
    document = history_doc(("promote", "A"), ("promote", "B"), ("promote", "B"))
    assert chart.rollback_target(document, "d.example") == "A"


def test_rollback_after_a_new_promotion_returns_to_the_one_before_it() -> None:
    document = history_doc(("promote", "A"), ("promote", "B"), ("rollback", "A"), ("promote", "C"))
    assert chart.rollback_target(document, "d.example") == "A"


def test_rollback_with_nothing_before_fails_clearly() -> None:
    with pytest.raises(OperationFailed, match=r"no version of d\.example has been promoted"):
        chart.rollback_target(None, "d.example")
    only = history_doc(("promote", "A"))
    with pytest.raises(OperationFailed, match=r"A is the only version of d\.example ever promoted"):
        chart.rollback_target(only, "d.example")
    back_at_start = history_doc(("promote", "A"), ("promote", "B"), ("rollback", "A"))
    with pytest.raises(OperationFailed, match="nothing to roll back to"):
        chart.rollback_target(back_at_start, "d.example")


def test_rollback_after_promote_rollback_twice_names_the_rolled_back_versions() -> None:
    document = history_doc(
        ("promote", "A"), ("promote", "B"), ("rollback", "A"), ("promote", "B"), ("rollback", "A")
    )
    with pytest.raises(OperationFailed) as failed:
        chart.rollback_target(document, "d.example")
    assert "only version" not in str(failed.value)
    assert "A is the oldest promotion of d.example left; the later ones (B) were rolled back" in (
        str(failed.value)
    )


def test_history_is_bounded() -> None:
    document: layout.Current | None = None
    for index in range(chart.HISTORY_LIMIT + 5):
        document = chart.with_promotion(document, "d", f"v{index}", T0)
    assert document is not None
    history = document.history
    assert len(history) == chart.HISTORY_LIMIT
    assert history[-1].version == f"v{chart.HISTORY_LIMIT + 4}"


def test_history_view_is_newest_first_and_marks_current() -> None:
    document = history_doc(("promote", "A"), ("promote", "B"), ("rollback", "A"))
    view = chart.history_view(document)
    assert [(e.version, e.action, e.current) for e in view] == [
        ("A", "rollback", True),
        ("B", "promote", False),
        ("A", "promote", False),
    ]
    assert chart.history_view(None) == []


def test_promote_rollback_history(tmp_path: Path) -> None:
    object_store = MemoryBucket()
    seed_version(object_store, tmp_path, "2026-11-20")
    seed_version(object_store, tmp_path, "2026-11-21")
    third = seed_version(object_store, tmp_path, "2026-11-21.2")
    clock = iter(T0 + timedelta(minutes=m) for m in range(10))

    def now() -> datetime:
        return next(clock)

    for version in ("2026-11-20", "2026-11-21", third.version):
        chart.promote(object_store, DOMAIN, version, now=now)
    again = chart.promote(object_store, DOMAIN, third.version, now=now)
    assert len(again.history) == 3  # promoting the current version changes nothing

    assert chart.rollback(object_store, DOMAIN, now=now).current == "2026-11-21"
    assert chart.rollback(object_store, DOMAIN, now=now).current == "2026-11-20"
    with pytest.raises(OperationFailed, match="nothing to roll back to") as nothing:
        chart.rollback(object_store, DOMAIN, now=now)
    assert nothing.value.exit_code == 1

    document, _ = object_store.read_json(object_store.key(DOMAIN, "current.json"))
    assert document is not None
    assert document["format"] == 1 and document["domain"] == DOMAIN
    assert document["current"] == "2026-11-20"
    view = chart.history_view(layout.Current.model_validate(document))
    assert [(e.version, e.action, e.current) for e in view] == [
        ("2026-11-20", "rollback", True),
        ("2026-11-21", "rollback", False),
        ("2026-11-21.2", "promote", False),
        ("2026-11-21", "promote", False),
        ("2026-11-20", "promote", False),
    ]
    assert view[-1].at == "2026-11-22T02:00:00Z"


def test_concurrent_change_makes_the_slower_writer_fail_temporarily(
    object_store: ObjectStore,
    s3_client: Any,
    target_settings: TargetSettings,
    two_versions: tuple[Seeded, Seeded],
    tmp_path: Path,
) -> None:
    older, newest = two_versions
    third = seed_version(object_store, tmp_path, "2026-11-22")
    chart.promote(object_store, DOMAIN, older.version)
    chart.promote(object_store, DOMAIN, newest.version)
    other = ObjectStore(s3_client, target_settings.bucket, target_settings.prefix)

    def meanwhile_someone_else_promotes() -> datetime:
        # Runs after this rollback read current.json and before it writes it back.
        chart.promote(other, DOMAIN, third.version)
        return T0

    with pytest.raises(TemporaryFailure, match="changed by someone else") as lost:
        chart.rollback(object_store, DOMAIN, now=meanwhile_someone_else_promotes)
    assert lost.value.exit_code == 75
    document, _ = object_store.read_json(object_store.key(DOMAIN, "current.json"))
    assert document is not None and document["current"] == third.version
    assert [entry["version"] for entry in document["history"]] == [
        older.version,
        newest.version,
        third.version,
    ]


def test_concurrent_first_promotions_do_not_overwrite_each_other(
    object_store: ObjectStore,
    s3_client: Any,
    target_settings: TargetSettings,
    two_versions: tuple[Seeded, Seeded],
) -> None:
    older, newest = two_versions
    other = ObjectStore(s3_client, target_settings.bucket, target_settings.prefix)

    def meanwhile() -> datetime:
        chart.promote(other, DOMAIN, older.version)
        return T0

    with pytest.raises(TemporaryFailure):
        chart.promote(object_store, DOMAIN, newest.version, now=meanwhile)
    assert chart.current_version(object_store, DOMAIN) == older.version
    chart.promote(object_store, DOMAIN, newest.version)  # run again: now it wins
    assert chart.current_version(object_store, DOMAIN) == newest.version


def test_a_concurrent_promotion_of_the_same_version_is_not_a_conflict(
    object_store: ObjectStore,
    s3_client: Any,
    target_settings: TargetSettings,
    two_versions: tuple[Seeded, Seeded],
) -> None:
    """Two imports of one set with --promote: the slower finds its version already current
    and succeeds without writing (it used to exit 75, and running it again exit 5)."""
    older, newest = two_versions
    chart.promote(object_store, DOMAIN, older.version)
    other = ObjectStore(s3_client, target_settings.bucket, target_settings.prefix)

    def meanwhile_the_other_import_promotes() -> datetime:
        chart.promote(other, DOMAIN, newest.version)
        return T0

    updated = chart.promote(
        object_store, DOMAIN, newest.version, now=meanwhile_the_other_import_promotes
    )
    assert updated.current == newest.version
    document, _ = object_store.read_json(object_store.key(DOMAIN, "current.json"))
    assert document is not None
    assert [entry["version"] for entry in document["history"]] == [older.version, newest.version]
