"""Air-gapped sites as the connected side sees them: pure decisions, no I/O (issue 22).

One connected host feeds several air-gapped sites (`[[sites]]` in the config; none
configured: one implicit site named `default`). Each site has its own chain of transfer
sets, its own acknowledged versions and its own delta bases. The index's rows are read
into `SiteFacts` by `mirror.store.sitestate`; everything here decides from those facts.

Promises:
- `waiting`: a version the site takes is waiting until the site acknowledged it or a set
  for the site that is not lost carries it; a lost set's unacknowledged versions wait again.
- `held_bases`: with `acknowledged` (every named site), a delta goes only against a version
  the site acknowledged; with `packed` (the implicit default site, today's rule), also
  against one carried by an earlier set for the site that is neither lost nor only sent
  over a one-way link without a receipt. Never anything of a lost set that was not acked.
- `needed`: what retention must keep for the site: every version it takes and has not
  acknowledged, and per domain the newest version it may use as a delta base.
- `summary`: the last set packed and acknowledged, the versions waiting, the oldest
  unacknowledged (not lost) set with its age in whole seconds, and the sets lost (one marked
  lost whose complete receipt was acknowledged later arrived after all: not lost).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from mirror.timestamps import rfc3339
from mirror.versions import VersionLabel

DEFAULT_SITE = "default"
SITE_NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")
BaseRule = Literal["acknowledged", "packed"]


def check_site_name(value: str) -> str:
    """A site's name: lowercase letters, digits and dashes, at most 63 (ValueError)."""
    if not SITE_NAME.match(value):
        raise ValueError(
            f"a site name is lowercase letters, digits and '-' (at most 63), got {value!r}"
        )
    return value


@dataclass(frozen=True)
class PackedSet:
    """One set packed for a site: its sequence, when it was packed, acknowledged (a
    complete receipt), marked lost, whether it was only sent one-way, what it carried."""

    sequence: int
    created_at: datetime
    acknowledged_at: datetime | None = None
    lost_at: datetime | None = None
    sent_only: bool = False
    versions: frozenset[int] = frozenset()

    @property
    def open(self) -> bool:
        """Packed, not acknowledged, not lost: the site may still be waiting for it."""
        return self.acknowledged_at is None and self.lost_at is None


@dataclass(frozen=True)
class Held:
    """A version as the site logic sees it: index id, domain and label."""

    version_id: int
    domain: str
    label: VersionLabel


@dataclass(frozen=True)
class SiteFacts:
    """What the index knows of one site: its sets, in sequence order, and the versions it
    acknowledged (index ids)."""

    name: str
    sets: tuple[PackedSet, ...] = ()
    delivered: frozenset[int] = frozenset()

    def carried_live(self) -> frozenset[int]:
        """Versions carried by a set for the site that is not lost."""
        return frozenset(v for s in self.sets if s.lost_at is None for v in s.versions)

    def lost_versions(self) -> frozenset[int]:
        """Versions a lost set carried that the site never acknowledged."""
        lost = {v for s in self.sets if s.lost_at is not None for v in s.versions}
        return frozenset(lost - self.delivered)


def waiting(facts: SiteFacts, wanted: Iterable[int]) -> list[int]:
    """The versions of `wanted` (those the site takes) the next pack for it carries."""
    live = facts.carried_live()
    return [v for v in wanted if v not in facts.delivered and v not in live]


def held_bases(facts: SiteFacts, rule: BaseRule) -> frozenset[int]:
    """The versions a delta for the site may go against (module docstring)."""
    if rule == "acknowledged":
        return facts.delivered
    packed = {
        v
        for s in facts.sets
        if s.lost_at is None and (not s.sent_only or s.acknowledged_at is not None)
        for v in s.versions
    }
    return facts.delivered | frozenset(packed)


def needed(facts: SiteFacts, rule: BaseRule, versions: Iterable[Held]) -> set[int]:
    """Of `versions` (those of the domains the site takes), what retention keeps for it."""
    bases = held_bases(facts, rule)
    keep: set[int] = set()
    newest: dict[str, Held] = {}
    for version in versions:
        if version.version_id not in facts.delivered:
            keep.add(version.version_id)
        if version.version_id in bases:
            best = newest.get(version.domain)
            if best is None or best.label < version.label:
                newest[version.domain] = version
    keep.update(held.version_id for held in newest.values())
    return keep


@dataclass(frozen=True)
class SiteSummary:
    """What a site still needs, at a glance (`mirror sites`, `status`, metrics)."""

    name: str
    last_packed: PackedSet | None
    last_acknowledged: PackedSet | None
    waiting: int
    oldest_unacknowledged: PackedSet | None
    oldest_age: int | None
    lost: tuple[int, ...] = field(default_factory=tuple)
    domains: tuple[str, ...] | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "domains": list(self.domains) if self.domains is not None else None,
            "last_packed": _set_dict(self.last_packed),
            "last_acknowledged": _set_dict(self.last_acknowledged),
            "waiting": self.waiting,
            "oldest_unacknowledged": _set_dict(self.oldest_unacknowledged),
            "oldest_unacknowledged_age_seconds": self.oldest_age,
            "lost": list(self.lost),
        }


def _set_dict(packed: PackedSet | None) -> dict[str, Any] | None:
    if packed is None:
        return None
    return {"sequence": packed.sequence, "packed_at": rfc3339(packed.created_at)}


def summary(
    facts: SiteFacts,
    wanted: Iterable[int],
    now: datetime,
    domains: tuple[str, ...] | None = None,
) -> SiteSummary:
    """The site's summary at `now` (module docstring)."""
    sets = sorted(facts.sets, key=lambda s: s.sequence)
    acked = [s for s in sets if s.acknowledged_at is not None]
    pending = [s for s in sets if s.open]
    oldest = pending[0] if pending else None
    return SiteSummary(
        name=facts.name,
        last_packed=sets[-1] if sets else None,
        last_acknowledged=acked[-1] if acked else None,
        waiting=len(waiting(facts, wanted)),
        oldest_unacknowledged=oldest,
        oldest_age=int((now - oldest.created_at).total_seconds()) if oldest else None,
        lost=tuple(s.sequence for s in sets if s.lost_at is not None and not s.acknowledged_at),
        domains=domains,
    )


def takes(domains: Iterable[str] | None, domain: str) -> bool:
    """Whether a site with these `domains` (None: every one) takes `domain`."""
    return domains is None or domain in domains


def wanted_by(domains: Iterable[str] | None, versions: Mapping[int, str]) -> list[int]:
    """The version ids (of id -> domain) a site with these `domains` takes, in id order."""
    chosen = None if domains is None else set(domains)
    return sorted(v for v, d in versions.items() if chosen is None or d in chosen)
