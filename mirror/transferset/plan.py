"""Planning a transfer set: what goes in, in which order, under which sequence, in which parts.

A pure function of the versions offered, the set before it and the part limit:
no database, no disk, no clock. `outbound.pack` writes what the plan says.

Promises:
- Items are ordered by domain, then version label (oldest first); a blob shared
  by several versions is planned (and later written) once.
- The sequence is one more than the previous set's (1 for the first), and the
  chain fields name the previous set exactly.
- A candidate carried as a delta (`delta` set) names its delta blob as `sha256`/`size` and
  becomes a manifest item with that `delta` entry; a whole one names its bundle.
- Every blob is cut into ceil(size / part_limit) parts (at least one), each
  no larger than the limit, with the only valid part names of the format.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from mirror.errors import ConfigError
from mirror.transferset.format import (
    MIN_PART_SIZE,
    DeltaEntry,
    Manifest,
    ManifestItem,
    PartEntry,
    ToolEntry,
    iso_time,
    part_names,
)
from mirror.transferset.trust import ChainLink
from mirror.units import format_size
from mirror.versions import VersionRef


@dataclass(frozen=True)
class Candidate:
    """A version offered for the set, with the blob that carries it: `ref` names its bundle,
    or (with `delta`) its delta blob (sha256, size, and the delta's archive format)."""

    ref: VersionRef
    tree_sha256: str
    exported_at: datetime
    delta: DeltaEntry | None = None


@dataclass(frozen=True)
class PlannedPart:
    name: str
    size: int


@dataclass(frozen=True)
class PlannedBlob:
    sha256: str
    size: int
    parts: tuple[PlannedPart, ...]


@dataclass(frozen=True)
class SetPlan:
    sequence: int
    previous: ChainLink | None
    part_limit: int
    items: tuple[Candidate, ...]
    blobs: tuple[PlannedBlob, ...]

    @property
    def total_bytes(self) -> int:
        return sum(blob.size for blob in self.blobs)

    @property
    def part_count(self) -> int:
        return sum(len(blob.parts) for blob in self.blobs)

    def manifest(
        self,
        parts: Mapping[str, list[PartEntry]],
        *,
        created_at: datetime,
        source_id: str,
        key_id: str,
        tool: ToolEntry | None,
        site: str | None = None,
    ) -> Manifest:
        """The manifest of the planned set, once its parts are written and hashed."""
        return Manifest(
            format=1,
            sequence=self.sequence,
            previous_sequence=self.previous.sequence if self.previous else None,
            previous_manifest_sha256=self.previous.manifest_sha256 if self.previous else None,
            created_at=iso_time(created_at),
            source_id=source_id,
            key_id=key_id,
            max_part_size=self.part_limit,
            site=site,
            items=[
                ManifestItem(
                    domain=item.ref.domain,
                    version=str(item.ref.label),
                    sha256=item.ref.sha256,
                    size=item.ref.size,
                    archive_format=item.ref.format,
                    tree_sha256=item.tree_sha256,
                    exported_at=iso_time(item.exported_at),
                    parts=parts[item.ref.sha256],
                    delta=item.delta,
                )
                for item in self.items
            ],
            tool=tool,
        )


def check_part_limit(part_limit: int) -> None:
    if part_limit < MIN_PART_SIZE:
        raise ConfigError(f"--max-size must be at least {format_size(MIN_PART_SIZE)}")


def plan_parts(sha256: str, size: int, part_limit: int) -> tuple[PlannedPart, ...]:
    """The parts of one blob: full parts of `part_limit` bytes, the rest in the last."""
    count = max(1, -(-size // part_limit))
    names = part_names(sha256, count)
    sizes = [part_limit] * (count - 1) + [size - part_limit * (count - 1)]
    return tuple(PlannedPart(name, part_size) for name, part_size in zip(names, sizes, strict=True))


def plan_set(
    candidates: Sequence[Candidate], previous: ChainLink | None, part_limit: int
) -> SetPlan | None:
    """The set these versions make after `previous`; None when there is nothing to carry."""
    check_part_limit(part_limit)
    if not candidates:
        return None
    items = tuple(sorted(candidates, key=lambda c: (c.ref.domain, c.ref.label)))
    blobs: dict[str, PlannedBlob] = {}
    for item in items:
        ref = item.ref
        if ref.sha256 not in blobs:
            blobs[ref.sha256] = PlannedBlob(
                ref.sha256, ref.size, plan_parts(ref.sha256, ref.size, part_limit)
            )
    sequence = previous.sequence + 1 if previous is not None else 1
    return SetPlan(sequence, previous, part_limit, items, tuple(blobs.values()))
