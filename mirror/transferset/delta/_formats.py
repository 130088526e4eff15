"""Delta transfer sets: a version carried as the file contents its base does not hold.

This module alone owns the formats a delta needs; both sides of the gap use it.

The file list (`files.json`): canonical JSON ``{"format": 1, "files": [{"path", "mode",
"size", "sha256"}, ...]}`` naming every regular file of the new tree, in the order a
spliced archive appends those its base lacks. Paths are normalised exactly as
`mirror.archive` normalises member names, so `archive.tree_hash` over (path, sha256) is
the version's `tree_sha256`. The mode is the one `archive.extract_archive` gives every
file (0644): a site's files carry no other.

The delta blob: a tar.gz holding `content/<sha256>` for each distinct content the base tree
does not hold (once, however many paths use it: a moved page costs nothing), then, for a
spliced delta the pack made itself, its recipe (`recipe/segments` and `recipe/literals`,
whose format `transferset/delta/_recipe.py` owns), then `files.json` as its last member. Its
bytes are whatever the packer's zlib made of it; the signed manifest names its sha256 and
its parts like any blob.

The members a spliced archive writes anew (`_splice`; made alike on both sides, so the
pack's recipe and the import's splice give the same bytes): ustar headers (a pax header
carries only a `path` or `size` that ustar cannot), the parent directories not yet written
(0755) before a file; files 0644; owner and group 0 with no names; every mtime the
version's export time (`archive_mtime`); two zero blocks and zero padding to a 10240-byte
record at the end (`archive_ending`).
"""

from __future__ import annotations

import codecs
import contextlib
import gzip
import io
import math
import re
import tarfile
import tempfile
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import IO, Any, BinaryIO

from mirror.archive import ArchiveLimits, TreePaths, tree_hash
from mirror.archive.spill import SpillMap
from mirror.errors import IntegrityError
from mirror.integrity import CHUNK_SIZE, mismatch
from mirror.timestamps import parse_zoned
from mirror.transferset.delta._inflate import gzip_file
from mirror.transferset.format import canonical_json, parse_strict_json, strict_decoder

FILE_LIST_FORMAT = 1
FILE_LIST_NAME = "files.json"
RECIPE_SEGMENTS = "recipe/segments"
RECIPE_LITERALS = "recipe/literals"
RECIPE_MEMBERS = (RECIPE_SEGMENTS, RECIPE_LITERALS)  # in this order
CONTENT_DIR = "content"
FILE_MODE = 0o644
DIRECTORY_MODE = 0o755
MAX_FILE_LIST_BYTES = 256 * 1024 * 1024
RECORD_SIZE = 10240

_CANONICAL_HEAD = '{"files":['
_LIST_CHUNK = 64 * 1024
_CONTENT_NAME = re.compile(r"^content/([0-9a-f]{64})$")
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_USTAR_MAX_SIZE = 8**11 - 1
_UNREADABLE = (tarfile.TarError, OSError, EOFError, zlib.error)


@dataclass(frozen=True)
class TreeFile:
    path: str
    size: int
    sha256: str
    mode: int = FILE_MODE

    def as_dict(self) -> dict[str, Any]:
        return {"path": self.path, "mode": self.mode, "size": self.size, "sha256": self.sha256}


def file_list_bytes(files: Iterable[TreeFile]) -> bytes:
    out = io.BytesIO()
    write_file_list(files, out.write)
    return out.getvalue()


def write_file_list(files: Iterable[TreeFile], write: Callable[[bytes], object]) -> None:
    """The file list's canonical JSON, entry by entry (memory flat in the file count): the
    same bytes as `canonical_json` of the whole document (sorted keys: files, format)."""
    write(b'{"files":[')
    for n, entry in enumerate(files):
        write((b"," if n else b"") + canonical_json(entry.as_dict()))
    write(b'],"format":%d}' % FILE_LIST_FORMAT)


def parse_file_list(
    data: bytes, *, label: str, limits: ArchiveLimits | None = None
) -> list[TreeFile]:
    """The files of a delta's file list; IntegrityError (exit 5) names the first bad entry."""
    return list(read_file_list(io.BytesIO(data), label=label, limits=limits))


def read_file_list(
    stream: IO[bytes],
    *,
    label: str,
    limits: ArchiveLimits | None = None,
    paths: TreePaths | None = None,
) -> Iterator[TreeFile]:
    """`parse_file_list` as the list is read from `stream`: a canonical list (what every
    packer writes) entry by entry, any other JSON whole (up to `MAX_FILE_LIST_BYTES`). The
    paths are checked as they pass, by `paths` when given (which then holds them for the
    caller, who closes it); a refusal can come after entries were given."""
    where = f"{label}: {FILE_LIST_NAME}"
    checker = TreePaths(limits or ArchiveLimits()) if paths is None else paths
    try:
        for entry in _FileListReader(stream, where).entries():
            try:
                checker.check(entry.path)
            except IntegrityError as exc:
                raise IntegrityError(f"{where}: {exc.message}") from None
            yield entry
    finally:
        if paths is None:
            checker.close()


class _FileListReader:
    """Reads a file list's entries from a stream (`read_file_list`)."""

    def __init__(self, stream: IO[bytes], where: str) -> None:
        self._stream = stream
        self._where = where
        self._decoder = strict_decoder()
        self._text = ""
        self._pos = 0
        self._ended = False
        self._read = 0
        self._utf8 = codecs.getincrementaldecoder("utf-8")()

    def entries(self) -> Iterator[TreeFile]:
        head = self._fill(len(_CANONICAL_HEAD))
        if not head.startswith(_CANONICAL_HEAD):
            yield from self._whole()
            return
        self._pos = len(_CANONICAL_HEAD)
        n = 0
        while True:
            if self._peek() == "]" and n == 0:
                break
            entry = self._value()
            yield _tree_file(entry, f"{self._where}: files.{n}")
            n += 1
            following = self._peek()
            self._pos += 1
            if following == "]":
                break
            if following != ",":
                raise IntegrityError(f"{self._where}: not valid strict JSON (after files.{n - 1})")
        if n == 0:
            self._pos += 1
        self._tail()

    def _tail(self) -> None:
        while not self._ended:
            self._more()
        rest = self._text[self._pos :]
        if not rest.startswith(","):
            raise IntegrityError(f"{self._where}: not a file list (expected format and files)")
        document = parse_strict_json(("{" + rest[1:]).encode(), self._where)
        if not isinstance(document, dict) or set(document) != {"format"}:
            raise IntegrityError(f"{self._where}: not a file list (expected format and files)")
        if document["format"] != FILE_LIST_FORMAT:
            raise IntegrityError(f"{self._where}: format {document['format']!r} is not supported")

    def _whole(self) -> Iterator[TreeFile]:
        while not self._ended:
            self._more()
        document = parse_strict_json(self._text.encode(), self._where)
        self._text = ""
        if not isinstance(document, dict) or set(document) != {"format", "files"}:
            raise IntegrityError(f"{self._where}: not a file list (expected format and files)")
        if document["format"] != FILE_LIST_FORMAT:
            raise IntegrityError(f"{self._where}: format {document['format']!r} is not supported")
        if not isinstance(document["files"], list):
            raise IntegrityError(f"{self._where}: files is not a list")
        for n, entry in enumerate(document["files"]):
            yield _tree_file(entry, f"{self._where}: files.{n}")

    def _value(self) -> Any:
        while True:
            try:
                value, end = self._decoder.raw_decode(self._text, self._pos)
            except ValueError as exc:
                if self._ended:
                    raise IntegrityError(f"{self._where}: not valid strict JSON ({exc})") from None
                self._more()
                continue
            if end == len(self._text) and not self._ended:
                self._more()  # a number might go on in the next piece
                continue
            self._pos = end
            return value

    def _peek(self) -> str:
        while self._pos >= len(self._text) and not self._ended:
            self._more()
        return self._text[self._pos : self._pos + 1]

    def _fill(self, size: int) -> str:
        while len(self._text) < size and not self._ended:
            self._more()
        return self._text[:size]

    def _more(self) -> None:
        try:
            chunk = self._stream.read(_LIST_CHUNK)
        except _UNREADABLE as exc:
            raise IntegrityError(f"{self._where}: not readable ({exc})") from None
        self._read += len(chunk)
        if self._read > MAX_FILE_LIST_BYTES:
            raise IntegrityError(f"{self._where}: the delta's file list is too large")
        self._text = self._text[self._pos :]
        self._pos = 0
        self._ended = not chunk
        try:
            self._text += self._utf8.decode(chunk, final=self._ended)
        except UnicodeDecodeError:
            raise IntegrityError(f"{self._where}: not UTF-8") from None


def _tree_file(entry: Any, where: str) -> TreeFile:
    if not isinstance(entry, dict) or set(entry) != {"path", "mode", "size", "sha256"}:
        raise IntegrityError(f"{where}: expected exactly path, mode, size and sha256")
    path, mode, size, sha256 = entry["path"], entry["mode"], entry["size"], entry["sha256"]
    if not isinstance(path, str):
        raise IntegrityError(f"{where}: path is not a string")
    if mode != FILE_MODE or isinstance(mode, bool):
        raise IntegrityError(f"{where}: mode {mode!r} is not {FILE_MODE:#o}")
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise IntegrityError(f"{where}: size {size!r} is not a byte count")
    if not isinstance(sha256, str) or not _HEX64.match(sha256):
        raise IntegrityError(f"{where}: sha256 is not 64 lowercase hex digits")
    return TreeFile(path=path, size=size, sha256=sha256, mode=mode)


def check_tree(files: Iterable[TreeFile], tree_sha256: str, *, label: str) -> None:
    """Refuse a file list whose tree hash is not the signed one."""
    got = tree_hash((entry.path, entry.sha256) for entry in files)
    if got != tree_sha256:
        raise mismatch(f"{label}: the tree of the delta's file list", got, tree_sha256)


# ---- the members a splice writes anew ----------------------------------------------------


def archive_mtime(exported_at: str) -> int:
    """The mtime of every member a version's splice writes: the version's `exported_at`
    as the signed manifest spells it (RFC 3339), in whole seconds since the Unix epoch
    (fractions dropped). Both sides derive it from that string alone, never from a local
    clock or zone, so they write the same headers. IntegrityError for a time without a zone
    or before 1970 (a ustar header cannot hold it)."""
    try:
        moment = parse_zoned(exported_at)
    except ValueError as exc:
        raise IntegrityError(f"exported_at: {exc}") from None
    seconds = math.floor(moment.timestamp())
    if seconds < 0:
        raise IntegrityError(f"exported_at {exported_at!r} is before 1970")
    return seconds


def archive_ending(tar_bytes: int) -> bytes:
    """What ends a spliced archive of `tar_bytes` so far: two zero blocks, then zero padding to
    a `RECORD_SIZE` record."""
    return b"\0" * (1024 + (-(tar_bytes + 1024) % RECORD_SIZE))


def member_header(name: str, size: int, mtime: int, *, directory: bool) -> bytes:
    encoded = name.encode("utf-8")
    records = b""
    split = _ustar_split(encoded)
    if split is None:
        records += _pax_record("path", name)
        split = (b"", encoded[:100])
    if size > _USTAR_MAX_SIZE:
        records += _pax_record("size", str(size))
    header = _ustar(
        split,
        size=0 if size > _USTAR_MAX_SIZE else size,
        mtime=mtime,
        mode=DIRECTORY_MODE if directory else FILE_MODE,
        typeflag=tarfile.DIRTYPE if directory else tarfile.REGTYPE,
    )
    if not records:
        return header
    pax = _ustar(
        (b"", b"././@PaxHeader"),
        size=len(records),
        mtime=mtime,
        mode=FILE_MODE,
        typeflag=tarfile.XHDTYPE,
    )
    return pax + records + b"\0" * (-len(records) % 512) + header


def _ustar_split(encoded: bytes) -> tuple[bytes, bytes] | None:
    """(prefix, name) fields for a ustar header, or None when the path needs pax."""
    if len(encoded) <= 100:
        return b"", encoded
    for cut in range(min(len(encoded) - 1, 155), 0, -1):
        if encoded[cut : cut + 1] == b"/" and len(encoded) - cut - 1 <= 100:
            return encoded[:cut], encoded[cut + 1 :]
    return None


def _pax_record(key: str, value: str) -> bytes:
    body = f" {key}={value}\n".encode()
    length = len(body) + 1
    while len(str(length)) + len(body) != length:
        length += 1
    return str(length).encode("ascii") + body


def _ustar(
    name: tuple[bytes, bytes], *, size: int, mtime: int, mode: int, typeflag: bytes
) -> bytes:
    prefix, short = name
    fields = [
        short.ljust(100, b"\0"),
        _octal(mode, 8),
        _octal(0, 8),
        _octal(0, 8),
        _octal(size, 12),
        _octal(mtime, 12),
        b" " * 8,
        typeflag,
        b"\0" * 100,
        b"ustar\x0000",
        b"\0" * 32,
        b"\0" * 32,
        _octal(0, 8),
        _octal(0, 8),
        prefix.ljust(155, b"\0"),
        b"\0" * 12,
    ]
    header = bytearray(b"".join(fields))
    header[148:156] = b"%06o\0 " % sum(header)
    return bytes(header)


def _octal(value: int, width: int) -> bytes:
    return b"%0*o\0" % (width - 1, value)


# ---- the delta blob ----------------------------------------------------------------------


class DeltaBlobWriter:
    """Writes a delta blob to `out`: contents first (each once), the file list last. The
    list is spooled to a nameless temp file in `spool_dir` (its member header needs its
    size), so memory does not grow with the file count. Compressed by zlib-ng: twice
    zlib's speed, where a recipe's literals (compressed already) do not shrink."""

    def __init__(
        self, out: BinaryIO, *, compresslevel: int = 6, spool_dir: str | None = None
    ) -> None:
        self._gzip = gzip_file(out, "wb", compresslevel=compresslevel)
        self._spool_dir = spool_dir
        self.carried = SpillMap()

    def add_content(self, sha256: str, size: int, chunks: Iterable[bytes]) -> None:
        if not self.carried.add(sha256):
            return
        self._member(f"{CONTENT_DIR}/{sha256}", size, chunks)

    def add_recipe(self, segments: IO[bytes], literals: IO[bytes]) -> None:
        """A splice recipe's two members (`transferset/delta/_recipe.py`), read from the start of
        the two files: after the contents, before the file list."""
        for name, source in zip(RECIPE_MEMBERS, (segments, literals), strict=True):
            size = source.seek(0, io.SEEK_END)
            source.seek(0)
            self._member(name, size, read_chunks(source))

    def finish(self, files: Iterable[TreeFile]) -> None:
        with tempfile.TemporaryFile(dir=self._spool_dir) as listing:
            write_file_list(files, listing.write)
            size = listing.tell()
            listing.seek(0)
            self._member(FILE_LIST_NAME, size, read_chunks(listing))
        self._gzip.write(b"\0" * 1024)
        self._gzip.close()
        self.carried.close()

    def _member(self, name: str, size: int, chunks: Iterable[bytes]) -> None:
        self._gzip.write(member_header(name, size, 0, directory=False))
        written = 0
        for chunk in chunks:
            written += len(chunk)
            self._gzip.write(chunk)
        if written != size:
            raise IntegrityError(f"{name}: {written} bytes written where {size} were promised")
        self._gzip.write(b"\0" * (-size % 512))


@dataclass(frozen=True)
class DeltaContent:
    """One carried content: read `stream` to its end before asking for the next member."""

    sha256: str
    size: int
    stream: IO[bytes]


@dataclass(frozen=True)
class DeltaFileList:
    """The delta's file list (its last member): read `stream` (`read_file_list`) before
    asking for the next member."""

    size: int
    stream: IO[bytes]


@dataclass(frozen=True)
class DeltaRecipePart:
    """One member of a splice recipe (`name`: its segments, then its literals): read
    `stream` before asking for the next member."""

    name: str
    size: int
    stream: IO[bytes]


@contextlib.contextmanager
def _streamed_tar(stream: IO[bytes], label: str) -> Iterator[tarfile.TarFile]:
    """The delta blob's tar.gz read as a stream; IntegrityError (exit 5) when it is none
    (an IntegrityError of the reader's own passes unchanged)."""
    try:
        with (
            gzip.GzipFile(fileobj=stream, mode="rb") as plain,
            tarfile.open(fileobj=plain, mode="r|", bufsize=64 * 1024) as tar,
        ):
            yield tar
    except IntegrityError:
        raise
    except _UNREADABLE as exc:
        raise IntegrityError(f"{label}: the delta blob is not a readable tar.gz ({exc})") from None


def read_delta_blob(
    stream: IO[bytes], *, label: str
) -> Iterator[DeltaContent | DeltaRecipePart | DeltaFileList]:
    """The carried contents in blob order, then a splice recipe's segments and literals
    when it has one, then the file list (last). IntegrityError (exit 5) for anything else:
    another member, a content twice, a missing or early list, a recipe's members out of
    order. The contents' hashes are not checked here: the caller hashes what it reads."""
    seen = SpillMap()
    files = False
    recipe: list[str] = []
    try:
        with _streamed_tar(stream, label) as tar:
            while (info := tar.next()) is not None:
                tar.members.clear()  # type: ignore[attr-defined]  # stream: keep none
                if files:
                    raise IntegrityError(f"{label}: the delta blob goes on after its file list")
                reader = _member_reader(tar, info, label)
                if info.name == FILE_LIST_NAME:
                    if info.size > MAX_FILE_LIST_BYTES:
                        raise IntegrityError(f"{label}: the delta's file list is too large")
                    _in_order(recipe, info.name, label)
                    files = True
                    yield DeltaFileList(info.size, reader)
                    continue
                if info.name in RECIPE_MEMBERS:
                    _in_order(recipe, info.name, label)
                    yield DeltaRecipePart(info.name, info.size, reader)
                    continue
                match = _CONTENT_NAME.match(info.name)
                if match is None or recipe:
                    raise IntegrityError(f"{label}: the delta blob holds {info.name!r}")
                if not seen.add(match.group(1)):
                    raise IntegrityError(f"{label}: the delta carries {match.group(1)} twice")
                yield DeltaContent(match.group(1), info.size, reader)
    finally:
        seen.close()
    if not files:
        raise IntegrityError(f"{label}: the delta blob has no {FILE_LIST_NAME}")


def _member_reader(tar: tarfile.TarFile, info: tarfile.TarInfo, label: str) -> IO[bytes]:
    """A member's bytes as they stream; IntegrityError for a member that is no file."""
    if not info.isreg():
        raise IntegrityError(f"{label}: the delta blob holds {info.name!r}")
    reader = tar.extractfile(info)
    assert reader is not None
    return reader


def _in_order(recipe: list[str], name: str, label: str) -> None:
    """A recipe's members (`recipe`: those read so far) come both, in their order, before
    the file list."""
    if name == FILE_LIST_NAME:
        if len(recipe) == 1:
            raise IntegrityError(f"{label}: the delta's recipe has no literals")
        return
    recipe.append(name)
    if recipe != list(RECIPE_MEMBERS[: len(recipe)]):
        raise IntegrityError(f"{label}: the delta's recipe is out of order")


def read_chunks(stream: IO[bytes]) -> Iterator[bytes]:
    while chunk := stream.read(CHUNK_SIZE):
        yield chunk
