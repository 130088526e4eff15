"""A tar stream's members as byte ranges, read from its bytes as they pass.

A spliced archive (`transferset/delta/_splice.py`) keeps or drops the base's members as whole
ranges of its tar stream, so it needs each member's extent and name without copying its
data: `TarUnits` reads only the headers (and the pax and GNU long-name records before them)
at the offsets the sizes give, and skips the rest. Names are resolved as Python's `tarfile`
resolves them (which `mirror.archive` read when the bundle was checked): a pax `path` or a
GNU long name first, else the ustar prefix and name; a pax `size` over the header's; a V7
directory by the header's own name field. Pax `GNU.sparse.*` records and GNU sparse members
(which make tarfile read a member under another name, size or content than its extent
holds) are IntegrityError: a bundle's members are stored whole.

`MemberData` gives the data of chosen members as the stream passes (the splice hashes what
it keeps; a delta pack takes the contents it carries).

Promises: memory is one header and its extension records; every header's checksum is
checked; a stream that is not a tar stream is IntegrityError (exit 5). No I/O.
"""

from __future__ import annotations

import tarfile
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Generic, Literal, TypeVar

from mirror.errors import IntegrityError

BLOCK = 512
_EXTENSIONS = {b"x": "pax", b"X": "pax", b"L": "longname", b"K": "longlink", b"g": "global"}
_FILE_TYPES = {tarfile.REGTYPE, tarfile.AREGTYPE, tarfile.CONTTYPE}
_MAX_EXTENSION = 1024 * 1024

Kind = Literal["file", "dir", "other"]
K = TypeVar("K")


@dataclass(frozen=True)
class Unit:
    """One member: bytes [start, end) of the tar stream, from its first extension header to
    the end of its data's padding. `path` is None for a pax global header (kept as a unit)."""

    start: int
    end: int
    path: str | None
    kind: Kind
    size: int


class TarUnits:
    """Feed the tar stream in order (`feed`); each call returns the members whose headers
    it completed. `end` is the offset of the end-of-archive block once it was read."""

    def __init__(self) -> None:
        self._position = 0  # stream offset of the next byte fed
        self._at = 0  # offset of what is being read (a header or extension records)
        self._want = BLOCK
        self._buffer = bytearray()
        self._reading: str | None = None  # the extension whose records are being read
        self._unit_start: int | None = None
        self._pax: dict[str, str] = {}
        self._longname: str | None = None
        self.end: int | None = None

    def feed(self, data: bytes | memoryview) -> list[Unit]:
        units: list[Unit] = []
        first, last = self._position, self._position + len(data)
        while self.end is None:
            begin = self._at + len(self._buffer)
            if begin >= last:
                break
            assert begin >= first, "fed out of order"
            take = min(self._want - len(self._buffer), last - begin)
            self._buffer += data[begin - first : begin - first + take]
            if len(self._buffer) < self._want:
                break
            unit = self._parse(bytes(self._buffer))
            self._buffer.clear()
            if unit is not None:
                units.append(unit)
        self._position = last
        return units

    def _parse(self, data: bytes) -> Unit | None:
        if self._reading is not None:
            reading, self._reading = self._reading, None
            start = self._at - BLOCK
            self._at += -(-len(data) // BLOCK) * BLOCK
            self._want = BLOCK
            if reading == "global":
                _check_global(_pax_records(data, start), start)
                return Unit(start=start, end=self._at, path=None, kind="other", size=len(data))
            self._extension(reading, data)
            return None
        if not data.strip(b"\0"):
            self.end = self._at
            return None
        _check_sum(data, self._at)
        kind = data[156:157]
        size = _number(data[124:136], self._at)
        start = self._at if self._unit_start is None else self._unit_start
        extension = _EXTENSIONS.get(kind)
        if extension == "global" and size > 0:
            if self._unit_start is not None or not size <= _MAX_EXTENSION:
                raise IntegrityError(f"tar stream: a pax global header at {self._at} out of place")
            self._at += BLOCK
            self._reading, self._want = extension, size
            return None
        if extension is not None and extension != "global":
            if not 0 <= size <= _MAX_EXTENSION:
                raise IntegrityError(f"tar stream: extension records of {size} bytes at {start}")
            self._unit_start = start
            self._at += BLOCK
            if size:
                self._reading, self._want = extension, size
            return None
        return self._member(data, kind, size, start, extension)

    def _member(
        self, data: bytes, kind: bytes, size: int, start: int, extension: str | None
    ) -> Unit:
        data_start = self._at + BLOCK
        if "size" in self._pax:
            try:
                size = int(self._pax["size"])
            except ValueError:
                raise IntegrityError(f"tar stream: bad pax records at {self._at}") from None
        if kind == tarfile.GNUTYPE_SPARSE:  # tarfile reads other extents than its header's
            raise IntegrityError(f"tar stream: a GNU sparse member at {self._at}")
        if size < 0:  # a size that goes back would read the same header again, forever
            raise IntegrityError(f"tar stream: the header at {self._at} gives a negative size")
        path = None if extension == "global" else self._name(data, kind)
        # a V7 directory: decided on the header's own name field, before any record renames
        # it, as tarfile decides (else a renamed member's data would be read as headers)
        old_directory = kind == tarfile.AREGTYPE and _text(data[0:100]).endswith("/")
        is_file = kind in _FILE_TYPES and not old_directory
        skips_data = is_file or kind not in tarfile.SUPPORTED_TYPES or extension == "global"
        end = data_start + (-(-size // BLOCK) * BLOCK if skips_data else 0)
        is_dir = kind == tarfile.DIRTYPE or old_directory
        member: Kind = "file" if is_file else "dir" if is_dir else "other"
        self._pax, self._longname, self._unit_start = {}, None, None
        self._at = end
        self._want = BLOCK
        return Unit(start=start, end=end, path=path, kind=member, size=size)

    def _name(self, data: bytes, kind: bytes) -> str:
        if "path" in self._pax:
            return self._pax["path"]
        if self._longname is not None:
            return self._longname
        name = _text(data[0:100])
        prefix = _text(data[345:500])
        if prefix and kind not in tarfile.GNU_TYPES:
            name = prefix + "/" + name
        return name

    def _extension(self, extension: str, data: bytes) -> None:
        """Of several extension headers before a member, the first one's name and size win:
        tarfile applies each header after the ones that follow it."""
        named = self._longname is not None or "path" in self._pax
        if extension == "longname" and not named:
            self._longname = _text(data)
        elif extension == "pax":
            records = _pax_records(data, self._at)
            if named:
                records.pop("path", None)
            self._pax = records | self._pax


def _check_global(records: dict[str, str], at: int) -> None:
    """A global header that renames or resizes the members after it (tarfile applies its
    `path` and `size`) is refused: the members' extents would not be what they say."""
    for key in ("path", "size"):
        if key in records:
            raise IntegrityError(f"tar stream: the pax global header at {at} sets {key}")


def _text(field: bytes) -> str:
    end = field.find(b"\0")
    return (field if end < 0 else field[:end]).decode("utf-8", "surrogateescape")


def _number(field: bytes, at: int) -> int:
    if field[:1] in (b"\x80", b"\xff"):
        value = int.from_bytes(field[1:], "big")
        return value - (256 ** (len(field) - 1)) if field[:1] == b"\xff" else value
    digits = field.split(b"\0", 1)[0].strip()
    try:
        return int(digits or b"0", 8)
    except ValueError:
        raise IntegrityError(
            f"tar stream: a header at {at} has no number where one belongs"
        ) from None


def _check_sum(header: bytes, at: int) -> None:
    """The header's checksum, as unsigned or (old tars) signed bytes, as `tarfile` accepts."""
    recorded = _number(header[148:156], at)
    unsigned = sum(header[:148]) + 8 * 32 + sum(header[156:])
    if recorded == unsigned:
        return
    high = sum(1 for b in header[:148] + header[156:] if b > 127)
    if recorded != unsigned - 256 * high:
        raise IntegrityError(f"tar stream: the header at {at} has a wrong checksum")


def _pax_records(data: bytes, at: int) -> dict[str, str]:
    records: dict[str, str] = {}
    pos = 0
    while pos < len(data) and data[pos : pos + 1] != b"\0":
        space = data.find(b" ", pos)
        try:
            length = int(data[pos:space])
        except ValueError:
            raise IntegrityError(f"tar stream: bad pax records at {at}") from None
        record = data[space + 1 : pos + length - 1]
        key, _, value = record.partition(b"=")
        records[key.decode("utf-8", "surrogateescape")] = value.decode("utf-8", "surrogateescape")
        pos += length
        if length <= 0:
            raise IntegrityError(f"tar stream: bad pax records at {at}")
    if any(key.startswith("GNU.sparse.") for key in records):
        raise IntegrityError(f"tar stream: GNU.sparse pax records at {at}")
    return records


@dataclass
class _Wanted(Generic[K]):
    key: K
    start: int
    end: int


class MemberData(Generic[K]):
    """The data of the file members asked for, piece by piece as the stream passes.

    `want(unit, key)` asks for a member `TarUnits.feed` gave (before the stream passes its
    data); `pieces(data, start)` yields, for the stream's bytes `data` at offset `start`,
    each wanted member's piece in them as `(key, piece, last)`, in stream order: every
    member's pieces in order, the one that ends it with `last` true (an empty member's
    only piece is empty). A piece is a view of `data`: use it before the next call.
    Memory is the members wanted and not yet passed."""

    def __init__(self) -> None:
        self._wanted: deque[_Wanted[K]] = deque()

    def want(self, unit: Unit, key: K) -> None:
        end = unit.end - (-unit.size % BLOCK)
        self._wanted.append(_Wanted(key, end - unit.size, end))

    def pieces(self, data: bytes | memoryview, start: int) -> Iterator[tuple[K, memoryview, bool]]:
        end = start + len(data)
        view = memoryview(data)
        while self._wanted and self._wanted[0].start <= end:
            wanted = self._wanted[0]
            low, high = max(wanted.start, start), min(wanted.end, end)
            last = wanted.end <= end
            yield wanted.key, view[low - start : high - start] if high > low else view[:0], last
            if not last:
                return
            self._wanted.popleft()

    @property
    def pending(self) -> int:
        """How many wanted members the stream has not passed the end of."""
        return len(self._wanted)
