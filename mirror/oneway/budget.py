"""The disk a receiver's unverified sessions may hold in its spool (`transfer.spool_budget`).

Datagrams are not authenticated, so what a session writes before its set verifies may be
a forger's: without a bound, forged DATA for a forged large file fills the spool and the
next real set cannot land. Promises:
- The bytes of decoded blocks of every session not yet landed (in DIR/.oneway/SESSION/)
  stay at most `limit`: a table that claims more than `limit` is never taken (per session:
  a session holds at most what its table claims), and before a block is written the
  sessions written to least recently are removed until it fits (`victims`).
- Sessions left on disk by an earlier run are counted from what they hold on disk when
  the receiver starts, oldest (by their state file) first.
- Landed sets (DIR/NAME) and sets kept aside are not counted: they verified.
"""

from __future__ import annotations

import os
import re
from collections import OrderedDict
from pathlib import Path

from mirror.config import SPOOL_BUDGET
from mirror.oneway.assembly import STATE, work_root

__all__ = ["SPOOL_BUDGET", "SpoolBudget"]
_SESSION_DIR = re.compile(r"[0-9a-f]{16}")


class SpoolBudget:
    """Bytes held on disk per unverified session, least recently written first."""

    def __init__(self, spool: Path, limit: int) -> None:
        self.limit = limit
        self.used: OrderedDict[int, int] = OrderedDict()
        for _, session in sorted(_on_disk(work_root(spool))):
            self.used[session] = _allocated(work_root(spool) / f"{session:016x}")

    @property
    def total(self) -> int:
        return sum(self.used.values())

    def victims(self, session: int, need: int) -> list[int]:
        """The sessions (never `session`) to remove, oldest first, so that `need` more bytes
        of `session` fit within the limit."""
        over = self.total + need - self.limit
        found = []
        for other, held in self.used.items():
            if over <= 0:
                break
            if other != session:
                found.append(other)
                over -= held
        return found

    def oldest_other(self, session: int) -> int | None:
        """The session written to least recently but `session` (the disk is full)."""
        return next((other for other in self.used if other != session), None)

    def wrote(self, session: int, size: int) -> None:
        self.used[session] = self.used.get(session, 0) + size
        self.used.move_to_end(session)

    def forget(self, session: int) -> None:
        self.used.pop(session, None)


def _on_disk(root: Path) -> list[tuple[int, int]]:
    """(when its state was written, session) of each session directory under `root`."""
    found = []
    if root.is_dir():
        for entry in os.scandir(root):
            state = Path(entry.path) / STATE
            if _SESSION_DIR.fullmatch(entry.name) and state.exists():
                found.append((state.stat().st_mtime_ns, int(entry.name, 16)))
    return found


def _allocated(directory: Path) -> int:
    """Bytes the files under `directory` take on disk (sparse files: what was written)."""
    total = 0
    for folder, _, names in os.walk(directory):
        for name in names:
            total += os.lstat(os.path.join(folder, name)).st_blocks * 512
    return total
