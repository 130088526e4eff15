"""Tables that move to disk as they grow: memory flat in a site's file count.

A site can hold 200,000 files (the archive limit). The checks that need every path at once
(duplicates, name twins, the base's contents, a delta's file list) would hold hundreds of
bytes a file in dicts; these hold at most `SPILL_AT` entries in memory and the rest in a
private temporary SQLite database (`sqlite3.connect("")`: a file under TMPDIR that SQLite
deletes when it is closed, or when the process dies, as it never had a name there).

Promises:
- `SpillMap` is a str -> str mapping: the same answers in memory and on disk; up to
  `spill_at` entries it is a dict (a small site pays nothing), then every entry moves to
  the database, whose page cache is `CACHE_KIB`. On disk, a Bloom filter of the keys
  (`BLOOM_BITS`, fixed) answers most lookups of absent keys without a statement, and new
  keys wait in a buffer of at most `_PENDING` to be written in one statement: a key met for
  the first time (the common case of the path checks) costs no statement of its own.
- `get_many`, `update` and `insert` (new keys only) answer and store many entries in a few
  statements on disk.
- `sorted_items` gives the entries by the UTF-8 bytes of their keys (the tree hash's order;
  a lone surrogate, which no checked path holds, by its `surrogatepass` bytes);
  `has_prefix` says whether a key starts with a string (one range lookup on disk).
- `FileList` is an append-only list of (path, size, sha256) kept in a nameless temp file:
  iterated in the order appended, as often as asked; `with_sha1` gives each file's SHA-1
  too, where it was appended with one (None where not).
- `close` (or leaving the `with`) frees the disk; nothing is left behind on any path out.
"""

from __future__ import annotations

import sqlite3
import tempfile
from collections.abc import Iterable, Iterator
from typing import IO, Self

SPILL_AT = 20_000
CACHE_KIB = 512
_BATCH = 4096
_PENDING = 1024  # new keys a map on disk holds before one batched statement
_IN_LIST = 500  # keys a lookup of `get_many` (SQLite allows 32,766 parameters)
BLOOM_BITS = 1 << 21  # 256 KiB a map on disk: 1.5% false answers at 200,000 keys
_MASK = BLOOM_BITS - 1
_SHIFT = 21


class SpillMap:
    """A str -> str mapping in memory up to `spill_at` entries, then on disk (module doc)."""

    def __init__(self, spill_at: int | None = None) -> None:
        self._spill_at = SPILL_AT if spill_at is None else spill_at
        self._memory: dict[str, str] | None = {}
        self._db: sqlite3.Connection | None = None
        self._count = 0
        self._bloom = bytearray()
        self._pending: dict[str, str] = {}  # on disk: new keys not written yet

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None
        self._memory = {}
        self._count = 0
        self._bloom = bytearray()
        self._pending = {}

    def __len__(self) -> int:
        return self._count

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self.get(key) is not None

    def get(self, key: str) -> str | None:
        if self._memory is not None:
            return self._memory.get(key)
        found = self._pending.get(key)
        if found is not None or not self._may_hold(key):
            return found
        assert self._db is not None
        row = self._db.execute("SELECT v FROM m WHERE k = ?", (_bytes(key),)).fetchone()
        return None if row is None else str(row[0])

    def __setitem__(self, key: str, value: str) -> None:
        if self._memory is not None:
            if key not in self._memory:
                self._count += 1
            self._memory[key] = value
            if self._count > self._spill_at:
                self._spill()
            return
        if key in self._pending:
            self._pending[key] = value
            return
        assert self._db is not None
        if not self._may_hold(key) or (
            self._db.execute("UPDATE m SET v = ? WHERE k = ?", (value, _bytes(key))).rowcount == 0
        ):
            self._add_new(key, value)

    def setdefault(self, key: str, value: str) -> str:
        """The value of `key`, storing `value` first when there is none."""
        if self._memory is not None:
            if key in self._memory:
                return self._memory[key]
            self[key] = value
            return value
        found = self.get(key)
        if found is not None:
            return found
        self._add_new(key, value)
        return value

    def add(self, key: str) -> bool:
        """Store `key` (value ""); whether it was new."""
        before = self._count
        self.setdefault(key, "")
        return self._count != before

    def get_many(self, keys: Iterable[str]) -> dict[str, str]:
        """The entries of those `keys` that are present: on disk, one statement a few
        hundred keys, not one a key."""
        if self._memory is not None:
            memory = self._memory
            return {key: memory[key] for key in keys if key in memory}
        db = self._written()
        found: dict[str, str] = {}
        keys = list(keys)
        for at in range(0, len(keys), _IN_LIST):
            chunk = [_bytes(key) for key in keys[at : at + _IN_LIST]]
            query = f"SELECT k, v FROM m WHERE k IN ({','.join('?' * len(chunk))})"  # noqa: S608
            for key, value in db.execute(query, chunk):
                found[_text(key)] = str(value)
        return found

    def update(self, entries: Iterable[tuple[str, str]]) -> None:
        """Store every (key, value) of `entries` (the last of a key wins): on disk, two
        batched statements, not one or two an entry."""
        rest = self._in_memory(entries)
        if rest is None:
            return
        db = self._written()
        latest = dict(rest)
        rows = [(value, _bytes(key)) for key, value in latest.items()]
        db.executemany("UPDATE m SET v = ? WHERE k = ?", rows)
        inserted = db.executemany("INSERT OR IGNORE INTO m (v, k) VALUES (?, ?)", rows)
        self._count += inserted.rowcount
        for key in latest:
            self._mark(key)

    def insert(self, entries: Iterable[tuple[str, str]]) -> None:
        """Store every (key, value) of `entries`, whose keys are distinct and not stored yet
        (else sqlite3.IntegrityError on disk): one batched statement on disk, half of what
        `update` costs."""
        rest = self._in_memory(entries)
        if rest is None:
            return
        db = self._written()
        rows = [(_bytes(key), value) for key, value in rest]
        db.executemany("INSERT INTO m (k, v) VALUES (?, ?)", rows)
        self._count += len(rows)
        for key, _ in rows:
            self._mark(_text(key))

    def _in_memory(self, entries: Iterable[tuple[str, str]]) -> Iterator[tuple[str, str]] | None:
        """Store `entries` one by one while the map is in memory: those left once it moved
        to disk (for a batch), or None."""
        rest = iter(entries)
        if self._memory is None:
            return rest
        for key, value in rest:
            self[key] = value
            if self._memory is None:
                return rest
        return None

    def has_prefix(self, prefix: str) -> bool:
        """Whether some key starts with `prefix` (not empty)."""
        if self._memory is not None:
            return any(key.startswith(prefix) for key in self._memory)
        low = _bytes(prefix)
        high = low[:-1] + bytes([low[-1] + 1])  # UTF-8 has no 0xff byte: no overflow
        row = self._written().execute("SELECT 1 FROM m WHERE k >= ? AND k < ? LIMIT 1", (low, high))
        return row.fetchone() is not None

    def sorted_items(self) -> Iterator[tuple[str, str]]:
        """Every entry, by the UTF-8 bytes of its key."""
        if self._memory is not None:
            memory = self._memory
            for encoded in sorted(_bytes(key) for key in memory):
                key = _text(encoded)
                yield key, memory[key]
            return
        cursor = self._written().execute("SELECT k, v FROM m ORDER BY k")
        while rows := cursor.fetchmany(_BATCH):
            for key, value in rows:
                yield bytes(key).decode("utf-8", "surrogatepass"), str(value)  # _text, inlined

    def _spill(self) -> None:
        assert self._memory is not None
        db = sqlite3.connect("", check_same_thread=False, isolation_level=None)
        db.execute("PRAGMA journal_mode = OFF")
        db.execute("PRAGMA synchronous = OFF")
        db.execute(f"PRAGMA cache_size = -{CACHE_KIB}")
        db.execute("BEGIN")  # one transaction, never committed: no write-out per statement
        db.execute("CREATE TABLE m (k BLOB PRIMARY KEY, v TEXT NOT NULL) WITHOUT ROWID")
        self._bloom = bytearray(BLOOM_BITS // 8)
        for key in self._memory:
            self._mark(key)
        db.executemany(
            "INSERT INTO m (k, v) VALUES (?, ?)",
            sorted(
                (key.encode("utf-8", "surrogatepass"), value) for key, value in self._memory.items()
            ),
        )
        self._db, self._memory = db, None

    def _add_new(self, key: str, value: str) -> None:
        """On disk: `key`, known absent, into the buffer of new keys."""
        self._pending[key] = value
        self._mark(key)
        self._count += 1
        if len(self._pending) >= _PENDING:
            self._written()

    def _written(self) -> sqlite3.Connection:
        """The database, the buffer of new keys written to it first (one sorted batch)."""
        assert self._db is not None
        if self._pending:
            self._db.executemany(
                "INSERT INTO m (k, v) VALUES (?, ?)",
                sorted(
                    (key.encode("utf-8", "surrogatepass"), value)
                    for key, value in self._pending.items()
                ),
            )
            self._pending = {}
        return self._db

    def _may_hold(self, key: str) -> bool:
        """False when `key` is surely not on disk (the Bloom filter has not seen it)."""
        hashed = hash(key)  # str hashes are cached by Python; three probes of 22 bits
        bloom = self._bloom
        one, two, three = hashed & _MASK, (hashed >> _SHIFT) & _MASK, (hashed >> 2 * _SHIFT) & _MASK
        return bool(
            bloom[one >> 3] >> (one & 7) & 1
            and bloom[two >> 3] >> (two & 7) & 1
            and bloom[three >> 3] >> (three & 7) & 1
        )

    def _mark(self, key: str) -> None:
        hashed = hash(key)
        bloom = self._bloom
        for probe in (hashed & _MASK, (hashed >> _SHIFT) & _MASK, (hashed >> 2 * _SHIFT) & _MASK):
            bloom[probe >> 3] |= 1 << (probe & 7)


def _bytes(key: str) -> bytes:
    """A key as stored and ordered: its UTF-8 bytes; a lone surrogate (a str need not be
    valid UTF-8) passes as its three bytes, so any str is a key, as in a dict."""
    return key.encode("utf-8", "surrogatepass")


def _text(stored: bytes) -> str:
    return bytes(stored).decode("utf-8", "surrogatepass")


class FileList:
    """(path, size, sha256[, sha1]) in the order appended, in a nameless temp file (module
    doc)."""

    def __init__(self, directory: str | None = None) -> None:
        self._file: IO[bytes] = tempfile.TemporaryFile(dir=directory)  # noqa: SIM115
        self._count = 0
        self._bytes = 0
        self._read = False  # the file was read since the last append: seek to its end

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._file.close()

    def __len__(self) -> int:
        return self._count

    def append(self, path: str, size: int, sha256: str, sha1: str | None = None) -> None:
        """Add one file (not while iterating); a path with a line break is a ValueError
        (no checked path has one: control characters are refused)."""
        if "\n" in path:
            raise ValueError(f"a path with a line break: {path!r}")
        line = f"{sha256} {size} {sha1 or '-'} {path}\n".encode()
        if self._read:  # a seek flushes the write buffer: only after a read
            self._file.seek(self._bytes)
            self._read = False
        self._file.write(line)
        self._bytes += len(line)
        self._count += 1

    def extend(self, entries: Iterable[tuple[str, int, str]]) -> None:
        for path, size, sha256 in entries:
            self.append(path, size, sha256)

    def __iter__(self) -> Iterator[tuple[str, int, str]]:
        for path, size, sha256, _ in self.with_sha1():
            yield path, size, sha256

    def with_sha1(self) -> Iterator[tuple[str, int, str, str | None]]:
        """(path, size, sha256, sha1 or None) in the order appended."""
        self._file.flush()
        self._file.seek(0)
        self._read = True
        done = 0
        for raw in self._file:
            done += len(raw)
            if done > self._bytes:
                break
            sha256, size, sha1, path = raw.decode().rstrip("\n").split(" ", 3)
            yield path, int(size), sha256, (None if sha1 == "-" else sha1)
