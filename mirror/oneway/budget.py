"""The disk a receiver's unverified sessions may hold in its spool (`transfer.spool_budget`).

Datagrams are not authenticated, so what a session writes before its set verifies may be
a forger's: without a bound, forged DATA for a forged large file fills the spool and the
next real set cannot land. Promises:
- The bytes of decoded blocks of every session not yet landed (in DIR/.oneway/SESSION/)
  stay at most `limit`: a table that claims more than `limit` is never taken (per session:
  a session holds at most what its table claims), and before a block is written the
  sessions written to least recently are removed until it fits (`victims`).
- Inodes are bounded too: each file or folder a session makes is charged INODE_BYTES (a
  file system block) and counted, and the files and folders of every session not yet
  landed stay at most MAX_ENTRIES (the sessions written to least recently removed first,
  as for bytes): forged tables of many empty files cannot take the file system's inodes.
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
from mirror.oneway.assembly import INODE_BYTES, STATE, work_root

__all__ = ["MAX_ENTRIES", "SPOOL_BUDGET", "SpoolBudget"]
MAX_ENTRIES = 250_000
"""Files and folders held for sessions not landed: a set's 100,000 files (the table's
bound) and their folders fit, with room for the sessions before it."""
_SESSION_DIR = re.compile(r"[0-9a-f]{16}")


class SpoolBudget:
    """Bytes held on disk per unverified session, least recently written first."""

    def __init__(self, spool: Path, limit: int, max_entries: int = MAX_ENTRIES) -> None:
        self.limit = limit
        self.max_entries = max_entries
        self.used: OrderedDict[int, int] = OrderedDict()
        self.entries: dict[int, int] = {}
        """Files and folders each session made."""
        for _, session in sorted(_on_disk(work_root(spool))):
            held = _allocated(work_root(spool) / f"{session:016x}")
            self.used[session], self.entries[session] = held

    @property
    def total(self) -> int:
        return sum(self.used.values())

    def victims(self, session: int, need: int, extra: int = 0, entries: int = 0) -> list[int]:
        """The sessions (never `session`) to remove, oldest first, so that `need` + `extra`
        more bytes and `entries` more files and folders of `session` fit within the limits
        (`extra`: what the files and folders and the state take, assembly's `cost`)."""
        over = self.total + need + extra - self.limit
        over_entries = sum(self.entries.values()) + entries - self.max_entries
        found = []
        for other, held in self.used.items():
            if over <= 0 and over_entries <= 0:
                break
            if other != session:
                found.append(other)
                over -= held
                over_entries -= self.entries.get(other, 0)
        return found

    def oldest_other(self, session: int) -> int | None:
        """The session written to least recently but `session` (the disk is full)."""
        return next((other for other in self.used if other != session), None)

    def wrote(self, session: int, size: int, extra: int = 0, entries: int = 0) -> None:
        self.used[session] = self.used.get(session, 0) + size + extra
        self.used.move_to_end(session)
        if entries:
            self.entries[session] = self.entries.get(session, 0) + entries

    def forget(self, session: int) -> None:
        self.used.pop(session, None)
        self.entries.pop(session, None)


def _on_disk(root: Path) -> list[tuple[int, int]]:
    """(when its state was written, session) of each session directory under `root`; one
    killed before its first state (files are made as blocks come) by its folder's time."""
    found = []
    if root.is_dir():
        for entry in os.scandir(root):
            if _SESSION_DIR.fullmatch(entry.name) and entry.is_dir():
                state = Path(entry.path) / STATE
                when = (state if state.exists() else Path(entry.path)).stat().st_mtime_ns
                found.append((when, int(entry.name, 16)))
    return found


def _allocated(directory: Path) -> tuple[int, int]:
    """(bytes, files and folders) under `directory`: what its files take on disk (sparse
    files: what was written), each file and folder at least INODE_BYTES."""
    total, entries = INODE_BYTES, 1  # the session's folder
    for folder, dirs, names in os.walk(directory):
        entries += len(dirs) + len(names)
        total += len(dirs) * INODE_BYTES
        for name in names:
            total += max(os.lstat(os.path.join(folder, name)).st_blocks * 512, INODE_BYTES)
    return total, entries
