"""mirror.sites: what a site waits for, what a delta may go against, what retention keeps."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from mirror.config import settings_from_dict
from mirror.errors import ConfigError
from mirror.sites import (
    DEFAULT_SITE,
    Held,
    PackedSet,
    SiteFacts,
    check_site_name,
    held_bases,
    needed,
    summary,
    waiting,
)
from mirror.versions import VersionLabel

T0 = datetime(2026, 11, 16, 2, 0, tzinfo=UTC)


def packed(sequence: int, *versions: int, **when: object) -> PackedSet:
    return PackedSet(sequence, T0 + timedelta(days=sequence), versions=frozenset(versions), **when)  # type: ignore[arg-type]


def test_versions_wait_until_a_live_set_carries_them_or_the_site_acknowledged_them() -> None:
    facts = SiteFacts("prod", (packed(1, 1, 2), packed(2, 3, lost_at=T0)), frozenset({1}))
    assert waiting(facts, [1, 2, 3, 4]) == [3, 4]  # 2 in flight, 3's set was lost, 4 new
    assert waiting(SiteFacts("new"), [1, 2]) == [1, 2]


def test_a_delta_goes_only_against_what_the_site_acknowledged() -> None:
    sets = (packed(1, 1), packed(2, 2), packed(3, 3, lost_at=T0), packed(4, 4, sent_only=True))
    facts = SiteFacts("prod", sets, frozenset({1}))
    assert held_bases(facts, "acknowledged") == {1}
    # today's rule for the implicit site: also what earlier sets carried, never a lost set's
    # nor one only sent one-way without a receipt
    assert held_bases(facts, "packed") == {1, 2}
    acked = SiteFacts("prod", (packed(4, 4, sent_only=True, acknowledged_at=T0),), frozenset())
    assert held_bases(acked, "packed") == {4}


def test_retention_keeps_what_is_unreceived_and_the_newest_base_per_domain() -> None:
    versions = [
        Held(1, "a.test", VersionLabel("2026-11-16")),
        Held(2, "a.test", VersionLabel("2026-11-17")),
        Held(3, "a.test", VersionLabel("2026-11-18")),
        Held(4, "b.test", VersionLabel("2026-11-16")),
    ]
    facts = SiteFacts("prod", (), frozenset({1, 2, 4}))
    assert needed(facts, "acknowledged", versions) == {2, 3, 4}
    assert needed(SiteFacts("new"), "acknowledged", versions) == {1, 2, 3, 4}


def test_summary_names_the_last_sets_what_waits_and_the_oldest_unacknowledged() -> None:
    sets = (
        packed(1, 1, acknowledged_at=T0),
        packed(2, 2, lost_at=T0),
        packed(3, 3),
        packed(4, 4),
    )
    now = T0 + timedelta(days=5)
    seen = summary(SiteFacts("prod", sets, frozenset({1})), [1, 2, 3, 4, 5], now)
    assert seen.last_packed is not None and seen.last_packed.sequence == 4
    assert seen.last_acknowledged is not None and seen.last_acknowledged.sequence == 1
    assert seen.oldest_unacknowledged is not None and seen.oldest_unacknowledged.sequence == 3
    assert seen.oldest_age == 2 * 86400 and seen.waiting == 2 and seen.lost == (2,)
    document = seen.as_dict()
    assert document["last_packed"] == {"sequence": 4, "packed_at": "2026-11-20T02:00:00Z"}
    empty = summary(SiteFacts("new"), [], now).as_dict()
    assert empty["last_packed"] is None and empty["oldest_unacknowledged_age_seconds"] is None


def test_a_lost_set_whose_receipt_arrived_later_is_no_longer_counted_lost() -> None:
    """The disk turned up after `transfer lost` and its complete receipt was acknowledged:
    `mirror sites` and `mirror_site_lost_sets` stop naming it lost (hostile trial)."""
    sets = (packed(1, 1, lost_at=T0), packed(2, 2, lost_at=T0, acknowledged_at=T0))
    seen = summary(SiteFacts("prod", sets, frozenset({2})), [1, 2], T0 + timedelta(days=3))
    assert seen.lost == (1,)
    assert seen.last_acknowledged is not None and seen.last_acknowledged.sequence == 2


@pytest.mark.parametrize("name", ["Prod", "-x", "a b", "x" * 64, ""])
def test_a_site_name_is_lowercase_letters_digits_and_dashes(name: str) -> None:
    with pytest.raises(ValueError, match="a site name is lowercase"):
        check_site_name(name)
    assert check_site_name("enclave-2") == "enclave-2"


def test_no_sites_is_one_implicit_site_and_several_need_a_name() -> None:
    one = settings_from_dict({"target": {"trusted_keys": ["/k/receipt.pub"]}})
    (implicit,) = one.site_list()
    assert implicit.name == DEFAULT_SITE and implicit.delta_bases == "packed"
    assert [str(key) for key in implicit.trusted_keys] == ["/k/receipt.pub"]
    assert one.site(None) is not None
    several = settings_from_dict(
        {"sites": [{"name": "staging", "domains": ["Docs.Example.com"]}, {"name": "prod"}]}
    )
    assert several.site("staging").domains == ["docs.example.com"]
    assert several.site("staging").delta_bases == "acknowledged"
    with pytest.raises(ConfigError, match=r"2 sites are configured \(staging, prod\)") as caught:
        several.site(None)
    assert caught.value.hint == "pass --site NAME (one of staging, prod)"
    with pytest.raises(ConfigError, match="no site named 'lab' is configured"):
        several.site("lab")
    with pytest.raises(ConfigError, match="site 'prod' is listed twice"):
        settings_from_dict({"sites": [{"name": "prod"}, {"name": "prod"}]})
