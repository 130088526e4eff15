"""One session being assembled on disk: the files, which blocks are done, and what is missing.

Layout under the receiver's spool directory DIR:

    DIR/.oneway/SESSION/set/...      the files, written in place block by block (sparse)
    DIR/.oneway/SESSION/state.json   the table and the blocks done (written atomically)
    DIR/.oneway/landed/SESSION       a set that was landed (its name): later passes ignored

Promises:
- Memory is bounded: at most `max_decoders` blocks are being decoded at once, across every
  session of a receiver (one `DecoderPool`; the oldest is dropped when another starts, and
  its block comes again on the next pass), each at most MAX_BLOCK_BYTES (the table's
  bound); a decoded block goes to disk at once and only its number stays in memory.
- A block counts as done in state.json only after its bytes were written and synced
  (`save` syncs the files before it writes the state), so a receiver killed at any moment
  and started again keeps every block the state names and fetches the rest on a later pass.
- `missing()` names every file that is not complete, with its missing blocks and bytes.
"""

from __future__ import annotations

import json
import os
import shutil
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

from mirror.fsutil import atomic_write_bytes, is_disk_full
from mirror.oneway.fec import BlockDecoder
from mirror.oneway.table import Table

WORK = ".oneway"
LANDED = "landed"
STATE = "state.json"
MAX_DECODERS = 32


@dataclass(frozen=True)
class Missing:
    name: str
    blocks: tuple[int, ...]
    bytes: int
    block_count: int

    def as_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "missing_blocks": list(self.blocks),
            "missing_bytes": self.bytes,
            "blocks": self.block_count,
        }


def work_root(spool: Path) -> Path:
    return spool / WORK


def landed_marker(spool: Path, session: int) -> Path:
    return work_root(spool) / LANDED / f"{session:016x}"


class DecoderPool:
    """The blocks being decoded, at most `limit` of them whatever the number of sessions:
    the oldest is dropped when another starts. Keys are (session, file, block)."""

    def __init__(self, limit: int = MAX_DECODERS) -> None:
        self.limit = limit
        self.held: OrderedDict[tuple[int, int, int], BlockDecoder] = OrderedDict()

    def get(self, key: tuple[int, int, int], length: int, symbol_size: int) -> BlockDecoder:
        decoder = self.held.get(key)
        if decoder is None:
            while len(self.held) >= self.limit:
                self.held.popitem(last=False)
            decoder = self.held[key] = BlockDecoder(length, symbol_size)
        return decoder

    def forget(self, session: int) -> None:
        for key in [key for key in self.held if key[0] == session]:
            del self.held[key]


class Assembly:
    """A session's files on disk and the blocks done (module docstring)."""

    def __init__(
        self,
        spool: Path,
        table: Table,
        *,
        max_decoders: int = MAX_DECODERS,
        pool: DecoderPool | None = None,
    ) -> None:
        self.table = table
        self.dir = work_root(spool) / f"{table.session:016x}"
        self.set_dir = self.dir / "set"
        self.done: set[tuple[int, int]] = set()
        self.decoders = pool or DecoderPool(max_decoders)
        self.repaired = 0
        self.dirty = False
        self._fds: dict[int, int] = {}
        try:
            self._load()
        except OSError:  # a table this spool cannot hold (a name too long here): nothing kept
            shutil.rmtree(self.dir, ignore_errors=True)
            raise

    def _load(self) -> None:
        state = self.dir / STATE
        if state.exists():
            raw = json.loads(state.read_bytes())
            if raw.get("table") == self.table.as_dict():
                self.done = {(int(f), int(b)) for f, b in raw["done"]}
                return
        shutil.rmtree(self.dir, ignore_errors=True)  # another geometry: start afresh
        self.set_dir.mkdir(parents=True)
        for entry in self.table.files:
            path = self.set_dir / entry.name
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path, "wb") as handle:
                handle.truncate(entry.size)
        self.save()

    @property
    def total_blocks(self) -> int:
        return sum(self.table.block_count(i) for i in range(len(self.table.files)))

    @property
    def complete(self) -> bool:
        return len(self.done) >= self.total_blocks

    def add(self, file: int, block: int, packet: bytes) -> bool:
        """Feed one DATA packet; True when it completed its block."""
        key = (file, block)
        if key in self.done or file >= len(self.table.files):
            return False
        if block >= self.table.block_count(file):
            return False
        held = (self.table.session, file, block)
        length = self.table.block_length(file, block)
        decoder = self.decoders.get(held, length, self.table.symbol_size)
        data = decoder.add(packet)
        if data is None:
            return False
        del self.decoders.held[held]
        if decoder.repair_seen:
            self.repaired += 1
        os.pwrite(self._fd(file), data, block * self.table.block_bytes)
        self.done.add(key)
        self.dirty = True
        return True

    def _fd(self, file: int) -> int:
        fd = self._fds.get(file)
        if fd is None:
            fd = os.open(self.set_dir / self.table.files[file].name, os.O_WRONLY)
            self._fds[file] = fd
        return fd

    def save(self) -> None:
        """Sync the files, then record the blocks done (the order is the promise)."""
        for fd in self._fds.values():
            os.fsync(fd)
        state = {"table": self.table.as_dict(), "done": sorted(self.done)}
        atomic_write_bytes(self.dir / STATE, json.dumps(state).encode())
        self.dirty = False

    def close(self, *, or_discard: bool = False) -> None:
        """Save and close; `or_discard`: a disk too full to save keeps the last state saved."""
        if self.dirty:
            try:
                self.save()
            except OSError as exc:
                if not (or_discard and is_disk_full(exc)):
                    raise
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()
        self.decoders.forget(self.table.session)

    def discard(self) -> None:
        """Close without saving: the session's files are about to be removed."""
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()
        self.dirty = False
        self.decoders.forget(self.table.session)

    def forget_file(self, file: int) -> None:
        """A file whose whole hash was wrong: every block of it again."""
        self.done = {(f, b) for f, b in self.done if f != file}
        self.dirty = True

    def missing(self) -> list[Missing]:
        found = []
        for index, entry in enumerate(self.table.files):
            count = self.table.block_count(index)
            blocks = tuple(b for b in range(count) if (index, b) not in self.done)
            if blocks:
                size = sum(self.table.block_length(index, b) for b in blocks)
                found.append(Missing(entry.name, blocks, size, count))
        return found


def ranges(blocks: tuple[int, ...]) -> str:
    """`0-3,7,9-10` for blocks 0,1,2,3,7,9,10."""
    parts: list[str] = []
    start = prev = blocks[0]
    for block in (*blocks[1:], -2):
        if block != prev + 1:
            parts.append(str(start) if start == prev else f"{start}-{prev}")
            start = block
        prev = block
    return ",".join(parts)
