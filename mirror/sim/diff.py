"""How two bundles differ, file by file: what a delta transfer would have to carry.

For tests and benchmarks: `compare_bundles(old, new)` reads both tar archives
(any compression tarfile reads) as streams, one file at a time, hashing each,
so memory stays flat whatever their size. Only regular files count; the
archive's bytes, member times and directory entries do not.
"""

from __future__ import annotations

import hashlib
import tarfile
from dataclasses import dataclass
from pathlib import Path

from mirror.integrity import CHUNK_SIZE


@dataclass(frozen=True)
class BundleDiff:
    """Files changed, added, removed and unchanged from `old` to `new`, and their bytes
    (`changed_bytes`: the new contents of changed files; `added_bytes`: of added ones)."""

    changed: tuple[str, ...]
    added: tuple[str, ...]
    removed: tuple[str, ...]
    unchanged: int
    changed_bytes: int
    added_bytes: int
    old_bytes: int
    new_bytes: int

    @property
    def delta_bytes(self) -> int:
        """File content a delta must carry: what changed plus what was added."""
        return self.changed_bytes + self.added_bytes

    @property
    def files(self) -> int:
        """Files in the new bundle."""
        return len(self.changed) + len(self.added) + self.unchanged


def file_digests(path: Path) -> dict[str, tuple[str, int]]:
    """{member name: (sha256, size)} of every regular file in the tar archive at `path`."""
    found: dict[str, tuple[str, int]] = {}
    with tarfile.open(path, mode="r|*") as archive:
        for member in archive:
            if not member.isfile():
                continue
            source = archive.extractfile(member)
            assert source is not None
            digest = hashlib.sha256()
            while chunk := source.read(CHUNK_SIZE):
                digest.update(chunk)
            found[member.name] = (digest.hexdigest(), member.size)
    return found


def compare_bundles(old: Path, new: Path) -> BundleDiff:
    """Files changed, added and removed between the bundles `old` and `new`."""
    before = file_digests(old)
    after = file_digests(new)
    changed = sorted(name for name in after if name in before and before[name] != after[name])
    added = sorted(name for name in after if name not in before)
    removed = sorted(name for name in before if name not in after)
    return BundleDiff(
        changed=tuple(changed),
        added=tuple(added),
        removed=tuple(removed),
        unchanged=len(after) - len(changed) - len(added),
        changed_bytes=sum(after[name][1] for name in changed),
        added_bytes=sum(after[name][1] for name in added),
        old_bytes=sum(size for _, size in before.values()),
        new_bytes=sum(size for _, size in after.values()),
    )
