"""The file table of a one-way session: which files, their sizes and sha256, and the blocks.

The sender reads it from the set directory; it travels in TABLE datagrams, repeated, so a
receiver that starts late or lost one learns it from the next. The session id is the first
8 bytes of the manifest's sha256: sending the same set again (a resend, another pass from
another run) lands in the same session, so a receiver keeps what it already has.

Promises: `names` are relative POSIX paths inside the set with no `..`, no absolute part
and no empty component (`safe_name`), checked on both ends before a byte is written.
A file of size 0 has no blocks and is complete as soon as the table is known.

A table comes in datagrams nobody signed, so `Table.decode` holds every field to the bounds
below before anything is made from it (`check`, which the sender runs too, so it never
sends a table the receiver would drop): the session is the manifest's (its first file, whose
sha256 starts with the session id); the set's name is one component not starting with a dot
(it becomes DIR/NAME); names are unique, printable UTF-8, at most MAX_NAME bytes, and no
name is a folder of another (`a` and `a/b`); sizes are 0 to MAX_FILE_SIZE; the symbol size
is what one IPv4 datagram can carry (MIN_SYMBOL_SIZE to MAX_SYMBOL_SIZE); a block is at most
MAX_BLOCK_SYMBOLS symbols and MAX_BLOCK_BYTES bytes (the receiver's memory per block being
decoded); the redundancy 0 to 4.
"""

from __future__ import annotations

import functools
import json
import math
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, cast

from mirror.errors import ConfigError, IntegrityError, NotFound
from mirror.integrity import hash_bytes, hash_file
from mirror.oneway import fec
from mirror.oneway.wire import MIN_MTU, payload_room
from mirror.transferset.format import MANIFEST, RECEIPT, RECEIPT_SIGNATURE, RECEIPT_TEMP

DEFAULT_BLOCK_SYMBOLS = 1000
DEFAULT_REDUNDANCY = 0.09
MIN_REPAIR = 2
MIN_SYMBOL_SIZE = payload_room(MIN_MTU) - fec.PAYLOAD_ID
MAX_SYMBOL_SIZE = payload_room(65535) - fec.PAYLOAD_ID
"""What the largest IPv4 datagram carries."""
MAX_BLOCK_SYMBOLS = 10_000
MAX_BLOCK_BYTES = 16 * 1024 * 1024
SEND_BLOCK_BYTES = 4 * 1024 * 1024
"""The largest block a sender of this release makes (a large MTU: fewer symbols a block):
its default 16 blocks at a time then fit the receiver's assembly.MAX_DECODING_BYTES.
A receiver still takes blocks to MAX_BLOCK_BYTES from an earlier sender."""
MAX_FILES = 100_000
MAX_BLOCKS = 1 << 20
"""Blocks in a set: 1.4 TiB at the default MTU, 16 TiB at the largest blocks."""
MAX_FILE_SIZE = 1 << 44
"""16 TiB: ext4's largest file; a larger size is a forgery the spool could not hold."""
MAX_NAME = 1024
MAX_COMPONENT = 255
MAX_REDUNDANCY = 4.0


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

    @functools.cached_property
    def block_bytes(self) -> int:
        """Computed once (the receiver asks for every datagram), as are `block_counts`."""
        return self.symbol_size * self.block_symbols

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)

    @functools.cached_property
    def block_counts(self) -> tuple[int, ...]:
        return tuple(math.ceil(f.size / self.block_bytes) for f in self.files)

    def block_count(self, file: int) -> int:
        return self.block_counts[file]

    def block_length(self, file: int, block: int) -> int:
        size = self.files[file].size
        return min(self.block_bytes, size - block * self.block_bytes)

    def repair_count(self, length: int) -> int:
        symbols = math.ceil(length / self.symbol_size)
        return max(MIN_REPAIR, math.ceil(symbols * self.redundancy))

    def data_error(self, file: int, block: int, packet: bytes) -> str | None:
        """Why a DATA datagram cannot be of this table (None: it can): a file or block it
        does not have, or a packet of another length or source block than its encoder's."""
        if file >= len(self.files):
            return f"file {file} of a table of {len(self.files)}"
        if block >= self.block_count(file):
            return f"block {block} of a file of {self.block_count(file)}"
        if len(packet) != fec.packet_size(self.symbol_size):
            return f"a packet of {len(packet)} bytes, not {fec.packet_size(self.symbol_size)}"
        if packet[0] != 0:
            return f"a packet of source block {packet[0]}, not 0"
        return None

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
        """A table from the wire; IntegrityError for anything malformed, unsafe or out of
        bounds (module docstring): nothing is taken on trust."""
        try:
            raw = json.loads(data)
            files = tuple(
                FileEntry(_text(n), _number(s, 0, MAX_FILE_SIZE), _text(h))
                for n, s, h in cast(list[Any], _field(raw, "files", list))
            )
            session = _text(_field(raw, "session", str))
            table = cls(
                int(session, 16) if _HEX16.fullmatch(session) else -1,
                _text(_field(raw, "name", str)),
                _number(_field(raw, "symbol_size", int), MIN_SYMBOL_SIZE, MAX_SYMBOL_SIZE),
                _number(_field(raw, "block_symbols", int), 1, MAX_BLOCK_SYMBOLS),
                _share(_field(raw, "redundancy", (int, float))),
                files,
            )
        except (ValueError, KeyError, TypeError, OverflowError, RecursionError) as exc:
            raise IntegrityError(f"malformed file table: {exc}") from None
        return table.check()

    def check(self) -> Table:
        """This table when it keeps every bound (module docstring); IntegrityError naming
        the first it breaks."""
        if not 0 <= self.session < 1 << 64:
            raise IntegrityError("malformed file table: the session is not 16 hex digits")
        name = safe_name(self.name)
        if "/" in name or name.startswith("."):
            raise IntegrityError(f"the set name {name!r} is not one folder name")
        if self.block_bytes > MAX_BLOCK_BYTES:
            raise IntegrityError(f"a block of {self.block_bytes} bytes is over {MAX_BLOCK_BYTES}")
        if not 0 < len(self.files) <= MAX_FILES:
            raise IntegrityError(f"a file table of {len(self.files)} files (1 to {MAX_FILES})")
        blocks = sum(-(-f.size // self.block_bytes) for f in self.files)
        if blocks > MAX_BLOCKS:
            raise IntegrityError(f"a set of {blocks} blocks is over {MAX_BLOCKS}")
        first = self.files[0]
        if first.name != MANIFEST or not first.sha256.startswith(f"{self.session:016x}"):
            raise IntegrityError(f"the file table's first file is not the session's {MANIFEST}")
        seen: set[str] = set()
        for entry in self.files:
            if not _SHA256.fullmatch(entry.sha256) or not 0 <= entry.size <= MAX_FILE_SIZE:
                raise IntegrityError(f"malformed file table: {entry.name!r}'s size or sha256")
            if safe_name(entry.name) in seen:
                raise IntegrityError(f"{entry.name!r} twice in a file table")
            seen.add(entry.name)
        folders = {str(p) for n in seen for p in PurePosixPath(n).parents}
        clash = sorted(seen & folders)
        if clash:
            raise IntegrityError(f"{clash[0]!r} is both a file and a folder in a file table")
        return self


def _field(raw: object, key: str, kind: type | tuple[type, ...]) -> object:
    if not isinstance(raw, dict):
        raise TypeError("not an object")
    value = raw[key]
    if not isinstance(value, kind) or isinstance(value, bool):
        raise TypeError(f"{key} is {type(value).__name__}")
    return value


def _text(value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{value!r:.40} is not a string")
    return value


def _number(value: object, low: int, high: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise ValueError(f"{value!r:.40} is not a whole number from {low} to {high}")
    return value


def _share(value: object) -> float:
    """A redundancy: bounded before it becomes a float (a JSON integer of 400 digits is
    past every float, and float() of it raises OverflowError)."""
    if isinstance(value, int) and not 0 <= value <= MAX_REDUNDANCY:
        raise ValueError(f"a redundancy of {value!r:.40} (0 to {MAX_REDUNDANCY})")
    share = float(value)  # type: ignore[arg-type]  # an int or a float (_field)
    if not 0 <= share <= MAX_REDUNDANCY:  # NaN fails this too
        raise ValueError(f"a redundancy of {share} (0 to {MAX_REDUNDANCY})")
    return share


_HEX16 = re.compile(r"[0-9a-f]{16}")
_SHA256 = re.compile(r"[0-9a-f]{64}")


def safe_name(name: str) -> str:
    """`name` when it is a safe relative path; IntegrityError otherwise."""
    path = PurePosixPath(name)
    if (
        not name
        or path.is_absolute()
        or any(part in ("", ".", "..") for part in name.split("/"))
        or "\\" in name
        or not name.isprintable()
        or not _encodable(name)
        or len(name.encode("utf-8", "replace")) > MAX_NAME
        or any(len(part.encode("utf-8", "replace")) > MAX_COMPONENT for part in name.split("/"))
    ):
        raise IntegrityError(f"unsafe file name {name!r} in a file table")
    return name


def _encodable(name: str) -> bool:
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: JSON allows it, no file system does
        return False
    return True


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
        set_dir.resolve().name,
        symbol_size,
        min(block_symbols, SEND_BLOCK_BYTES // symbol_size),  # a large MTU: fewer per block
        redundancy,
        tuple(entries),
    ).check()
