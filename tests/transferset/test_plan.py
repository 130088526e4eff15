"""Planning a transfer set is a pure function: versions, the set before, a part limit."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from mirror.errors import ConfigError
from mirror.transferset.format import MIN_PART_SIZE, PartEntry, part_names
from mirror.transferset.plan import Candidate, plan_parts, plan_set
from mirror.transferset.trust import ChainLink
from mirror.versions import VersionLabel, VersionRef

MiB = 1024 * 1024
T0 = datetime(2026, 11, 22, 2, 0, tzinfo=UTC)


def candidate(domain: str, label: str, sha: str, size: int) -> Candidate:
    return Candidate(
        VersionRef(domain, VersionLabel(label), sha * 64, size, "tar.gz"),
        tree_sha256="0" * 64,
        exported_at=T0,
    )


def test_nothing_to_carry_is_no_plan() -> None:
    assert plan_set([], None, MiB) is None


def test_the_first_set_is_sequence_one_without_a_chain() -> None:
    plan = plan_set([candidate("d.example", "1", "a", 10)], None, MiB)
    assert plan is not None
    assert plan.sequence == 1 and plan.previous is None


def test_a_later_set_follows_the_previous_one_exactly() -> None:
    previous = ChainLink(41, "f" * 64)
    plan = plan_set([candidate("d.example", "1", "a", 10)], previous, MiB)
    assert plan is not None and plan.sequence == 42 and plan.previous == previous
    manifest = plan.manifest(
        {"a" * 64: [PartEntry(name=f"blobs/{'a' * 64}", size=10, sha256="a" * 64)]},
        created_at=T0,
        source_id="s",
        key_id="k",
        tool=None,
    )
    assert (manifest.previous_sequence, manifest.previous_manifest_sha256) == (41, "f" * 64)
    assert manifest.created_at == "2026-11-22T02:00:00Z"


def test_items_are_ordered_by_domain_then_version_and_shared_blobs_planned_once() -> None:
    plan = plan_set(
        [
            candidate("z.example", "2026-11-20", "c", 1),
            candidate("a.example", "2026-11-21.10", "b", 2),
            candidate("a.example", "2026-11-21.9", "b", 2),
            candidate("a.example", "2026-11-20", "a", 3),
        ],
        None,
        MiB,
    )
    assert plan is not None
    assert [(i.ref.domain, i.ref.label) for i in plan.items] == [
        ("a.example", "2026-11-20"),
        ("a.example", "2026-11-21.9"),
        ("a.example", "2026-11-21.10"),
        ("z.example", "2026-11-20"),
    ]
    assert [blob.sha256[0] for blob in plan.blobs] == ["a", "b", "c"]
    assert plan.total_bytes == 6 and plan.part_count == 3


@pytest.mark.parametrize(
    ("size", "sizes"),
    [
        (0, [0]),
        (1, [1]),
        (MiB, [MiB]),
        (MiB + 1, [MiB, 1]),
        (3 * MiB, [MiB, MiB, MiB]),
        (3 * MiB - 5, [MiB, MiB, MiB - 5]),
    ],
)
def test_parts_are_full_but_the_last_and_carry_the_only_valid_names(
    size: int, sizes: list[int]
) -> None:
    parts = plan_parts("e" * 64, size, MiB)
    assert [part.size for part in parts] == sizes
    assert [part.name for part in parts] == part_names("e" * 64, len(sizes))
    assert sum(part.size for part in parts) == size


def test_a_part_limit_below_the_minimum_is_refused() -> None:
    with pytest.raises(ConfigError, match="--max-size must be at least"):
        plan_set([candidate("d.example", "1", "a", 1)], None, MIN_PART_SIZE - 1)
