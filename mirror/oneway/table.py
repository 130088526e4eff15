"""The file table of a one-way session: which files, their sizes and sha256, and the blocks.

The sender reads it from the set directory; it travels in TABLE datagrams, repeated, so a
receiver that starts late or lost one learns it from the next. The session id is the first
8 bytes of the manifest's sha256: sending the same set again (a resend, another pass from
another run) lands in the same session, so a receiver keeps what it already has.

Promises: `names` are relative POSIX paths inside the set with no `..`, no absolute part
and no empty component (`safe_name`), checked on both ends before a byte is written.
A file of size 0 has no blocks and is complete as soon as the table is known.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from mirror.errors import ConfigError, IntegrityError, NotFound
from mirror.integrity import hash_bytes, hash_file
from mirror.oneway import fec
from mirror.transferset.format import MANIFEST, RECEIPT, RECEIPT_SIGNATURE, RECEIPT_TEMP

DEFAULT_BLOCK_SYMBOLS = 1000
DEFAULT_REDUNDANCY = 0.09
MIN_REPAIR = 2


@dataclass(frozen=True)
class FileEntry:
    name: str
    size: int
    sha256: str


@dataclass(frozen=True)
class Table:
    """A session's file table and block geometry; `as_dict()`/`from_dict` for the wire."""

    session: int
    name: str
    symbol_size: int
    block_symbols: int
    redundancy: float
    files: tuple[FileEntry, ...]

    @property
    def block_bytes(self) -> int:
        return self.symbol_size * self.block_symbols

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)

    def block_count(self, file: int) -> int:
        return math.ceil(self.files[file].size / self.block_bytes)

    def block_length(self, file: int, block: int) -> int:
        size = self.files[file].size
        return min(self.block_bytes, size - block * self.block_bytes)

    def repair_count(self, length: int) -> int:
        symbols = math.ceil(length / self.symbol_size)
        return max(MIN_REPAIR, math.ceil(symbols * self.redundancy))

    def blocks(self) -> Iterable[tuple[int, int]]:
        for index in range(len(self.files)):
            for block in range(self.block_count(index)):
                yield index, block

    def as_dict(self) -> dict[str, object]:
        return {
            "session": f"{self.session:016x}",
            "name": self.name,
            "symbol_size": self.symbol_size,
            "block_symbols": self.block_symbols,
            "redundancy": self.redundancy,
            "files": [[f.name, f.size, f.sha256] for f in self.files],
        }

    def encode(self) -> bytes:
        return json.dumps(self.as_dict(), separators=(",", ":")).encode()

    @classmethod
    def decode(cls, data: bytes) -> Table:
        """A table from the wire; IntegrityError for anything malformed or unsafe."""
        try:
            raw = json.loads(data)
            files = tuple(FileEntry(str(n), int(s), str(h)) for n, s, h in raw["files"])
            table = cls(
                int(raw["session"], 16),
                str(raw["name"]),
                int(raw["symbol_size"]),
                int(raw["block_symbols"]),
                float(raw["redundancy"]),
                files,
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise IntegrityError(f"malformed file table: {exc}") from None
        safe_name(table.name)
        for entry in files:
            safe_name(entry.name)
        if table.symbol_size <= 0 or table.block_symbols <= 0:
            raise IntegrityError("malformed file table: empty blocks")
        return table


def safe_name(name: str) -> str:
    """`name` when it is a safe relative path; IntegrityError otherwise."""
    path = PurePosixPath(name)
    if (
        not name
        or path.is_absolute()
        or any(part in ("", ".", "..") for part in name.split("/"))
        or "\\" in name
        or "\x00" in name
    ):
        raise IntegrityError(f"unsafe file name {name!r} in a file table")
    return name


def session_of(set_dir: Path) -> int:
    """The session id of a set: the first 8 bytes of its manifest's sha256."""
    try:
        data = (set_dir / MANIFEST).read_bytes()
    except FileNotFoundError:
        raise NotFound(f"{set_dir} is not a transfer set (no {MANIFEST})") from None
    return int(hash_bytes(data)[:16], 16)


def set_files(set_dir: Path) -> list[str]:
    """Every file of the set, relative, sorted, manifest first: receipts are not carried."""
    if not set_dir.is_dir():
        raise NotFound(f"transfer set {set_dir} does not exist or is not a directory")
    skipped = {RECEIPT, RECEIPT_SIGNATURE}
    names = []
    for root, dirs, files in os.walk(set_dir):
        dirs.sort()
        for file in files:
            relative = (Path(root) / file).relative_to(set_dir).as_posix()
            if relative in skipped or RECEIPT_TEMP.match(relative):
                continue
            names.append(relative)
    names.sort(key=lambda n: (n != MANIFEST, n))
    return names


def read_table(
    set_dir: Path,
    *,
    symbol_size: int,
    block_symbols: int = DEFAULT_BLOCK_SYMBOLS,
    redundancy: float = DEFAULT_REDUNDANCY,
    only: Iterable[str] = (),
) -> Table:
    """The table of the set in `set_dir` (every file hashed once); `only` restricts the
    table's files to those names (a resend), keeping each file's index. The sender's first
    step: on a host without the erasure code it stops here, before hashing (fec.require)."""
    fec.require()
    names = set_files(set_dir)
    wanted = set(only)
    unknown = wanted - set(names)
    if unknown:
        raise ConfigError(f"not a file of the set: {', '.join(sorted(unknown))}")
    entries = []
    for name in names:
        digest = hash_file(set_dir / name)
        entries.append(FileEntry(safe_name(name), digest.size, digest.sha256))
    return Table(
        session_of(set_dir),
        safe_name(set_dir.resolve().name),
        symbol_size,
        block_symbols,
        redundancy,
        tuple(entries),
    )
