"""One session being assembled on disk: the files, which blocks are done, and what is missing.

Layout under the receiver's spool directory DIR:

    DIR/.oneway/SESSION/set/...      the files, written in place block by block (sparse)
    DIR/.oneway/SESSION/state.json   the table and the blocks done (written atomically)
    DIR/.oneway/landed/SESSION       a set that was landed (its name): later passes ignored

Promises:
- Memory is bounded: at most `max_decoders` blocks are being decoded at once, across every
  session of a receiver (one `DecoderPool`; the oldest is dropped when another starts, and
  its block comes again on the next pass), and the packets they hold add up to at most
  MAX_DECODING_BYTES (the oldest dropped first: one forged table of 16 MiB blocks cannot
  make 32 of them held); a decoded block goes to disk at once and only its number stays
  in memory.
- Files are made when their first block is written, not when the table arrives (a forged
  table of 30,000 files makes none): a folder, file or the session's own folders and
  state are each an inode the spool budget charges INODE_BYTES for (`cost`); a file of
  size 0 is made when the set is complete (`materialise`). A session that wrote nothing
  has nothing on disk.
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
from pathlib import Path, PurePosixPath

from mirror.fsutil import atomic_write_bytes, is_disk_full
from mirror.oneway.fec import BlockDecoder
from mirror.oneway.table import Table

WORK = ".oneway"
LANDED = "landed"
STATE = "state.json"
MAX_DECODERS = 32
MAX_DECODING_BYTES = 96 * 1024 * 1024
"""Packets held by the blocks being decoded: 16 blocks of the sender's largest (4 MiB,
table.SEND_BLOCK_BYTES) with their repair symbols, its default depth."""
INODE_BYTES = 4096
"""What a file or folder takes on disk at least (one file system block): charged to the
spool budget for each one a session makes, so forged tables of many small files are
bounded by the budget like forged bytes."""
SESSION_INODES = 3
"""The session's folder, its set/ folder and its state file."""
NOTHING = (0, 0)


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
    """The blocks being decoded, at most `limit` of them whatever the number of sessions,
    holding at most `max_bytes` of packets: the oldest is dropped when another starts or
    the bytes are over. Keys are (session, file, block)."""

    def __init__(self, limit: int = MAX_DECODERS, max_bytes: int = MAX_DECODING_BYTES) -> None:
        self.limit = limit
        self.max_bytes = max_bytes
        self.held: OrderedDict[tuple[int, int, int], BlockDecoder] = OrderedDict()
        self.fed: dict[tuple[int, int, int], int] = {}
        """Bytes of packets given to each decoder held (what it keeps until it decodes)."""
        self.total = 0

    def get(
        self, key: tuple[int, int, int], length: int, symbol_size: int, packet: int = 0
    ) -> BlockDecoder:
        """The decoder of block `key` (made when new), `packet` more bytes charged to it;
        the oldest others dropped until the count and the bytes are within the bounds."""
        decoder = self.held.get(key)
        if decoder is None:
            while len(self.held) >= self.limit:
                self.done(next(iter(self.held)))
            decoder = self.held[key] = BlockDecoder(length, symbol_size)
        self.fed[key] = self.fed.get(key, 0) + packet
        self.total += packet
        while self.total > self.max_bytes and len(self.held) > 1:
            self.done(next(k for k in self.held if k != key))
        return decoder

    def done(self, key: tuple[int, int, int]) -> None:
        """Block `key` decoded or given up: its decoder and the bytes it held let go."""
        del self.held[key]
        self.total -= self.fed.pop(key, 0)

    def forget(self, session: int) -> None:
        for key in [key for key in self.held if key[0] == session]:
            self.done(key)


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
        self._made: set[str] = set()
        """Files and folders under set/ made so far (relative names)."""
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
                self._made = _made_under(self.set_dir)
                return
        shutil.rmtree(self.dir, ignore_errors=True)  # another table: start afresh, lazily

    @property
    def started(self) -> bool:
        """Something of the session is on disk (its folders and state)."""
        return bool(self._made) or self.set_dir.is_dir()

    def cost(self, file: int) -> tuple[int, int]:
        """(bytes, inodes) that writing a block of `file` would take besides the block: the
        file and its folders not made yet, INODE_BYTES each, and the first time the
        session's own and its state, which holds the table (module docstring)."""
        name = self.table.files[file].name
        if name in self._made:
            return NOTHING
        new = [name, *(str(p) for p in PurePosixPath(name).parents if str(p) != ".")]
        inodes = sum(part not in self._made for part in new)
        state = 0
        if not self.started:
            inodes += SESSION_INODES
            state = len(json.dumps(self.table.as_dict()))
        return inodes * INODE_BYTES + state, inodes

    def materialise(self) -> None:
        """Make the files no block made (those of size 0) before the set is checked."""
        for index, entry in enumerate(self.table.files):
            if entry.name not in self._made:
                os.close(self._open(index))

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
        decoder = self.decoders.get(held, length, self.table.symbol_size, len(packet))
        data = decoder.add(packet)
        if data is None:
            return False
        self.decoders.done(held)
        if decoder.repair_seen:
            self.repaired += 1
        os.pwrite(self._fd(file), data, block * self.table.block_bytes)
        self.done.add(key)
        self.dirty = True
        return True

    def _fd(self, file: int) -> int:
        fd = self._fds.get(file)
        if fd is None:
            fd = self._fds[file] = self._open(file)
        return fd

    def _open(self, file: int) -> int:
        """File `file` opened for writing, made (and its folders) when it is not yet."""
        name = self.table.files[file].name
        path = self.set_dir / name
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
        self._made.update([name, *(str(p) for p in PurePosixPath(name).parents if str(p) != ".")])
        return fd

    def save(self) -> None:
        """Sync the files, then record the blocks done (the order is the promise); nothing
        when nothing was written (no state for a table alone)."""
        if not self.started:
            self.dirty = False
            return
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


def _made_under(root: Path) -> set[str]:
    """The files and folders under `root`, relative (a session resumed from its state)."""
    made = set()
    for folder, dirs, files in os.walk(root):
        for name in (*dirs, *files):
            made.add(Path(folder, name).relative_to(root).as_posix())
    return made


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
