"""Bundle archives: what format they are, whether they are safe to unpack, what they contain.

A vendor bundle is checked before anything is stored or published. Promises:

- the format is decided by the file's first bytes, never by its name;
- an archive is accepted only if unpacking it can create nothing but regular
  files and directories strictly inside the target, each path exactly once,
  within the size and count limits; anything else raises `IntegrityError`
  (exit 5) with a one-line message naming the member and the rule it breaks;
- reading is streamed in 1 MiB chunks: memory does not grow with member or
  archive size (only with the number of members, which `max_files` bounds);
- sizes are counted on the bytes actually read, so lying headers gain nothing;
- damaged input (truncation, bad checksums, trailing data after the tar
  end-of-archive marker) is refused as `corrupt archive`.

Tree hash (`tree_sha256`), the content identity of the site, independent of the
archive format, member order, timestamps, owners, modes and compression:

- take every regular file; directories are ignored;
- its path is the member name split on "/", without empty and "." components
  (so no leading "./", no trailing "/"), ".." resolved, joined with "/";
- sort the files by the UTF-8 bytes of that path;
- ``tree_sha256 = sha256( for each file: path_utf8 + b"\\0" + sha256_hex + b"\\n" )``
  where ``sha256_hex`` is the file content's lowercase hex digest in ASCII.

An archive holding no files hashes to sha256 of the empty string.
"""

from __future__ import annotations

import bz2
import contextlib
import dataclasses
import enum
import functools
import gzip
import hashlib
import io
import lzma
import os
import queue
import re
import shutil
import stat
import struct
import tarfile
import tempfile
import threading
import unicodedata
import zipfile
import zlib
from collections.abc import Callable, Generator, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Literal, Protocol, Self, cast

from mirror.errors import IntegrityError, MirrorError, NotFound, OperationFailed
from mirror.integrity import CHUNK_SIZE, Readable
from mirror.spill import FileList, SpillMap

Format = Literal["tar.gz", "tar", "zip", "tar.xz", "tar.bz2"]

RATIO_FLOOR = 64 * 1024**2
MAX_NAME_COMPONENT_BYTES = 255
MAX_TAR_EXTENDED_HEADER = 1024 * 1024
_RECENT_DIRECTORIES = 4096
_CONTROL = re.compile("[\x00-\x1f\x7f]")

_EXTENSIONS: dict[Format, str] = {
    "tar.gz": "tar.gz",
    "tar": "tar",
    "zip": "zip",
    "tar.xz": "tar.xz",
    "tar.bz2": "tar.bz2",
}

# What the stdlib readers raise on damaged input: gzip.BadGzipFile and bz2's "Invalid
# data stream" are OSErrors, zipfile raises RuntimeError for encrypted members and
# NotImplementedError for unknown compression methods.
_READ_ERRORS: tuple[type[Exception], ...] = (
    tarfile.TarError,
    zipfile.BadZipFile,
    zipfile.LargeZipFile,
    zlib.error,
    lzma.LZMAError,
    EOFError,
    OSError,
    ValueError,
    struct.error,
    NotImplementedError,
    RuntimeError,
)


@dataclass(frozen=True)
class ArchiveLimits:
    """Refusal thresholds. The ratio guard applies only once the total passes 64 MiB."""

    max_files: int = 200_000
    max_total_bytes: int = 32 * 1024**3
    max_member_bytes: int = 8 * 1024**3
    max_ratio: float = 200.0
    max_path_length: int = 1024
    allow_case_twins: bool = False


@dataclass(frozen=True)
class ArchiveReport:
    """What a checked archive holds; `total_bytes` is the uncompressed size of its files."""

    format: Format
    file_count: int
    total_bytes: int
    tree_sha256: str
    has_index_html: bool
    observed: FileSink | None = field(default=None, compare=False, repr=False)
    digests: FileList | None = field(default=None, compare=False, repr=False)
    """Every file's (path, size, sha256) in the tree hash's order, in a nameless temp file
    (`spill.FileList`): what `store.digests` keeps beside the bundle."""


def file_extension(fmt: Format) -> str:
    """The extension of object names (`bundle.<ext>`) for an archive in `fmt`."""
    return _EXTENSIONS[fmt]


def detect_format(path: Path) -> Format:
    """The archive format of `path`, from its first bytes (the file name is ignored)."""
    return _format_of(_read_head(path, 512), path.name)


def _format_of(head: bytes, name: str) -> Format:
    if head.startswith(b"\x1f\x8b"):
        return "tar.gz"
    if head.startswith((b"PK\x03\x04", b"PK\x05\x06")):
        return "zip"
    if head.startswith(b"\xfd7zXZ\x00"):
        return "tar.xz"
    if head.startswith(b"BZh"):
        return "tar.bz2"
    if head.startswith(b"\x28\xb5\x2f\xfd"):
        raise IntegrityError(
            f"{name} is a zstd-compressed archive, which mirror cannot read "
            "(ask the vendor for tar.gz or zip)"
        )
    if _looks_like_tar_header(head):
        return "tar"
    shown = head[:8].hex(" ") if head else "nothing: the file is empty"
    raise IntegrityError(f"{name} is not a tar.gz, tar or zip archive (starts with {shown})")


def inspect_archive(
    path: Path,
    limits: ArchiveLimits = ArchiveLimits(),
    observe: Callable[[], FileSink] | None = None,
) -> ArchiveReport:
    """Check every rule on `path` and report what it holds, writing nothing. With `observe`,
    the sink it makes sees every checked member in the same pass (as `read_archive`) and is
    the report's `observed`."""
    if observe is None:
        return _scan(path, limits, sink=None)
    observer = observe()
    return dataclasses.replace(_scan(path, limits, sink=observer), observed=observer)


def extract_archive(
    path: Path,
    dest: Path,
    limits: ArchiveLimits = ArchiveLimits(),
) -> ArchiveReport:
    """Unpack `path` into `dest` (absent or an empty directory), all or nothing.

    Files are created 0o644 and directories 0o755 whatever the archive says.
    The archive is unpacked into a temporary directory beside `dest` and renamed
    into place at the end, so after a refusal `dest` is exactly as before.
    """
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise OperationFailed(
            f"cannot unpack {path.name} into {dest}: it exists and is not an empty directory"
        )
    dest.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".unpack"))
    try:
        report = _scan(path, limits, sink=_DirectorySink(staging))
        os.chmod(staging, 0o755)  # noqa: S103 (a site is meant to be readable)
        os.replace(staging, dest)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return report


def read_archive(
    path: Path, sink: FileSink, limits: ArchiveLimits = ArchiveLimits()
) -> ArchiveReport:
    """Check every rule on `path` while handing each checked member to `sink` in archive
    order: `sink.directory(path)`, or `sink.open_file(path)` and the file's bytes written to
    what it returns (closed after the last byte). A refusal can come after some members
    were handed over: the sink must keep nothing it was given until this returns."""
    return _scan(path, limits, sink)


def read_archive_stream(
    stream: IO[bytes],
    fmt: Format,
    size: int,
    sink: FileSink | None,
    limits: ArchiveLimits = ArchiveLimits(),
    *,
    name: str,
) -> ArchiveReport:
    """`read_archive` over a tar archive's bytes as they are read from `stream` (one pass:
    nothing is written to disk; with no `sink`, `inspect_archive`); `size` is the archive's
    announced size, for the ratio guard; `name` stands for the archive in messages. A zip
    needs its file (its directory is at its end): ValueError."""
    if fmt == "zip":
        raise ValueError("a zip archive cannot be read as a stream")
    return _inspect(Path(name), fmt, size, lambda: cast(IO[bytes], _Borrowed(stream)), limits, sink)


class _Borrowed:
    """A caller's stream, read through; leaving it as a context leaves the stream open."""

    def __init__(self, stream: IO[bytes]) -> None:
        self.read = stream.read

    def __enter__(self) -> _Borrowed:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


def check_tree_paths(paths: Iterable[str], limits: ArchiveLimits = ArchiveLimits()) -> None:
    """Refuse a list of file paths that an archive checked by this module could not hold:
    not already normalised, unsafe, duplicated, a file below a file, or name twins.
    IntegrityError (exit 5) names the first bad path."""
    with contextlib.closing(TreePaths(limits)) as checker:
        for path in paths:
            checker.check(path)


class TreePaths:
    """`check_tree_paths` one path at a time, as a list streams past (memory flat: the
    tables move to disk as they grow); `close` frees them."""

    def __init__(self, limits: ArchiveLimits = ArchiveLimits()) -> None:
        self._limits = limits
        self._seen = _Paths(allow_case_twins=limits.allow_case_twins)
        self._count = 0

    def check(self, path: str) -> None:
        self._count += 1
        if self._count > self._limits.max_files:
            raise _unsafe(path, f"is past the limit of {self._limits.max_files} files")
        if _normalise(path, self._limits) != path:
            raise _unsafe(path, "is not a normalised path below the root")
        self._seen.claim(path, path, is_dir=False)
        self._seen.files[path] = ""

    def directory(self, path: str | None) -> None:
        """A directory member beside the files (an archive being written holds both),
        counted with them against `max_files` as `mirror.archive` counts members (None: one
        naming the root itself, './', a member of no path); one known already (the parent
        of a file checked) costs one lookup."""
        self._count += 1
        if self._count > self._limits.max_files:
            raise _unsafe(path or ".", f"is past the limit of {self._limits.max_files} members")
        if path is None or path in self._seen.directories:
            return
        if _normalise(path, self._limits) != path:
            raise _unsafe(path, "is not a normalised path below the root")
        self._seen.claim(path, path, is_dir=True)

    def close(self) -> None:
        self._seen.close()


def tree_hash(files: Iterable[tuple[str, str]]) -> str:
    """The tree hash (module docstring) of `(normalised_path, file_sha256_hex)` pairs, sorted
    on disk past `spill.SPILL_AT` of them (a pair given twice counts once)."""
    digest = hashlib.sha256()
    with SpillMap() as ordered:
        for path, hex_digest in files:
            ordered[f"{path}\0{hex_digest}"] = ""
        for key, _ in ordered.sorted_items():
            digest.update(key.encode("utf-8") + b"\n")
    return digest.hexdigest()


# ---------------------------------------------------------------------------
# Inspecting an archive while its bytes arrive.


class ArchiveFeed:
    """The inspection of `inspect_archive`, run on a second thread over bytes as they arrive.

    A download hands each block to `feed` as it appends it to `path`; a thread runs the
    very same checks and tree hash over them (gunzip, tar parsing and hashing release
    the GIL, so they use the second core), and `result` waits for the last block and
    gives the report or raises the same `IntegrityError` as `inspect_archive(path)`.
    Promises:

    - memory is bounded: at most `FEED_DEPTH` blocks wait between the two threads;
      `feed` blocks while they are full (the download never runs further ahead);
    - `restart()` forgets every byte fed (a download that starts over from zero) and
      `close()` abandons the inspection; neither leaves a thread behind;
    - `archive_size` (the announced size) is what the compression-ratio guard divides
      by, as `inspect_archive` divides by the finished file's size; when the finished
      size differs, `result` inspects the finished file instead;
    - with `observe`, a sink it makes (afresh at every start) sees every checked member in
      the same pass, and is the report's `observed`;
    - a zip cannot be inspected as it streams (its central directory is at the end,
      and only the directory says which entries exist): the thread then only takes the
      blocks, and `result` runs `inspect_archive(path)` on the finished file (a second
      read, as for every format before); so does a `result` after `close`.
    """

    def __init__(
        self,
        path: Path,
        archive_size: int,
        limits: ArchiveLimits = ArchiveLimits(),
        observe: Callable[[], FileSink] | None = None,
    ):
        self.path = path
        self.archive_size = archive_size
        self.limits = limits
        self.observe = observe
        self.fed = 0
        self._start()

    def _start(self) -> None:
        self.fed = 0
        self._blocks: queue.Queue[bytes | _Signal] = queue.Queue(maxsize=FEED_DEPTH)
        self._outcome: ArchiveReport | BaseException | None = None
        self._observer = self.observe() if self.observe is not None else None
        self._thread = threading.Thread(
            target=self._consume, name="mirror-archive-feed", daemon=True
        )
        self._thread.start()

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        """Hand over the next bytes of the archive (copied: the caller may reuse its buffer)."""
        if data:
            self.fed += len(data)
            self._blocks.put(bytes(data))

    def restart(self) -> None:
        """Forget every byte fed so far: the next byte fed is the archive's first."""
        self.close()
        self._start()

    def close(self) -> None:
        """Abandon the inspection and end its thread."""
        if self._thread.is_alive():
            self._blocks.put(_Signal.ABANDON)
            self._thread.join()

    def result(self, size: int) -> ArchiveReport:
        """The report of the whole archive (`size` bytes fed); raises what the check found."""
        if self._thread.is_alive():
            self._blocks.put(_Signal.END)
            self._thread.join()
        outcome = self._outcome
        if size != self.fed or size != self.archive_size or outcome is None:
            return inspect_archive(self.path, self.limits, self.observe)
        if isinstance(outcome, BaseException):
            raise outcome
        return dataclasses.replace(outcome, observed=self._observer)

    def _consume(self) -> None:
        stream = _BlockStream(self._blocks)
        try:
            head = stream.peek(512)
            fmt = _format_of(head, self.path.name)
            if fmt == "zip":
                return
            self._outcome = _inspect(
                self.path,
                fmt,
                self.archive_size,
                lambda: cast(IO[bytes], stream),
                self.limits,
                self._observer,
            )
        except _Abandoned:
            return
        except BaseException as exc:
            self._outcome = exc
        with contextlib.suppress(_Abandoned):
            stream.drain()


FEED_DEPTH = 4


class _Signal(enum.Enum):
    END = "the last byte was fed"
    ABANDON = "the inspection is abandoned"


class _Abandoned(BaseException):
    """Unwinds the inspection thread through the readers (never caught by their handlers)."""


class _BlockStream(io.RawIOBase):
    """The inspection thread's end of an ArchiveFeed: the blocks fed, read as one stream."""

    def __init__(self, blocks: queue.Queue[bytes | _Signal]) -> None:
        super().__init__()
        self.blocks = blocks
        self.current = memoryview(b"")
        self.ended = False

    def readable(self) -> bool:
        return True

    def _next_block(self) -> bool:
        while not self.current:
            if self.ended:
                return False
            block = self.blocks.get()
            if block is _Signal.ABANDON:
                raise _Abandoned
            if block is _Signal.END:
                self.ended = True
                return False
            self.current = memoryview(block)
        return True

    def peek(self, size: int) -> bytes:
        """The first `size` bytes (fewer at the end), left to be read again."""
        head = b""
        while len(head) < size and self._next_block():
            head += bytes(self.current)
            self.current = memoryview(b"")
        self.current = memoryview(head)
        return head[:size]

    def read(self, size: int | None = -1, /) -> bytes:
        if not self._next_block():
            return b""
        if size is None or size < 0:
            size = len(self.current)
        piece = self.current[:size]
        self.current = self.current[len(piece) :]
        return bytes(piece)

    def readinto(self, buffer: Any) -> int:
        piece = self.read(len(buffer))
        buffer[: len(piece)] = piece
        return len(piece)

    def drain(self) -> None:
        """Take the remaining blocks unread, so that the feeding thread never waits."""
        self.current = memoryview(b"")
        while self._next_block():
            self.current = memoryview(b"")


# ---------------------------------------------------------------------------
# The core, the same for every format.


@dataclass
class _Member:
    """One archive entry as a format reader sees it, before any checking.

    `kind` is "file", "dir", or a phrase naming what else it is ("a symbolic link").
    """

    name: str
    kind: str
    declared_size: int
    open: Callable[[], IO[bytes]] | None = None


class FileSink(Protocol):
    """Where checked members go (see `read_archive`). When what `open_file` returns has a
    `digested(sha256_hex, size)` method, it is called after the file's last byte, before it
    is closed, with the digest the check computed (so no sink hashes the bytes again)."""

    def directory(self, path: str) -> None: ...
    def open_file(self, path: str) -> IO[bytes]: ...


@dataclass
class _Tally:
    """Counts members and bytes against the limits while they stream past."""

    archive_size: int
    limits: ArchiveLimits
    members: int = 0
    total: int = 0
    padding: int = 0

    def member(self, name: str) -> None:
        self.members += 1
        if self.members > self.limits.max_files:
            raise _unsafe(name, f"is past the limit of {self.limits.max_files} members")

    def declared(self, name: str, size: int) -> None:
        if size > self.limits.max_member_bytes:
            raise _unsafe(
                name, f"declares {size} bytes, over the {self.limits.max_member_bytes}-byte limit"
            )

    def add(self, name: str, member_bytes: int, chunk: int) -> None:
        self.total += chunk
        limits = self.limits
        if member_bytes > limits.max_member_bytes:
            raise _unsafe(name, f"is larger than the {limits.max_member_bytes}-byte member limit")
        if self.total > limits.max_total_bytes:
            raise _unsafe(
                name, f"takes the unpacked total past the {limits.max_total_bytes}-byte limit"
            )
        self._check_ratio(name)

    def add_padding(self, chunk: int) -> None:
        self.padding += chunk
        self._check_ratio("(end-of-archive padding)")

    def _check_ratio(self, name: str) -> None:
        unpacked = self.total + self.padding
        ceiling = self.limits.max_ratio * max(self.archive_size, 1)
        if unpacked > RATIO_FLOOR and unpacked > ceiling:
            raise _unsafe(
                name,
                f"takes the unpacked size past {self.limits.max_ratio:g} times the archive "
                f"size of {self.archive_size} bytes (compression bomb)",
            )


@dataclass
class _Paths:
    """The paths seen so far, to refuse duplicates, file/directory clashes and name twins.

    Twins are two different paths that one volume may store as one: equal after Unicode
    NFC normalisation (always refused: macOS and some NAS volumes normalise) or after case
    folding (refused unless `allow_case_twins`: Windows, macOS and most USB disks fold case).
    On such a volume one would silently overwrite the other. One table finds both: keyed by
    the folded form (NFC twins fold alike), or by the NFC form when case twins are allowed.
    The tables move to disk past `spill.SPILL_AT` entries (memory flat in the file count);
    `files` maps each file to "sha256 size"."""

    allow_case_twins: bool = False
    files: SpillMap = field(default_factory=SpillMap)
    directories: SpillMap = field(default_factory=SpillMap)
    twins: SpillMap = field(default_factory=SpillMap)
    recent: dict[str, None] = field(default_factory=dict)

    def close(self) -> None:
        for table in (self.files, self.directories, self.twins):
            table.close()

    def check_twins(self, name: str, clean: str) -> None:
        """Refuse `clean` (from member `name`) if an earlier, different path is its twin."""
        nfc = unicodedata.normalize("NFC", clean)
        key = nfc if self.allow_case_twins else unicodedata.normalize("NFC", nfc.casefold())
        other_clean, _, other_name = self.twins.setdefault(key, f"{clean}\0{name}").partition("\0")
        if other_clean == clean:
            return
        same_nfc = unicodedata.normalize("NFC", other_clean) == nfc
        how = "after Unicode NFC normalisation" if same_nfc else "when letter case is ignored"
        raise IntegrityError(
            f"unsafe archive: members {_quote(other_name)} and {_quote(name)} name the same "
            f"path {how} ({_quote(other_clean)} and {_quote(clean)}); on such a volume one "
            "would overwrite the other"
            + ("" if same_nfc else " (store.allow_case_twins allows it)")
        )

    def claim(self, name: str, clean: str, *, is_dir: bool) -> None:
        prefix = ""
        for part in clean.split("/"):
            prefix = f"{prefix}/{part}" if prefix else part
            if prefix not in self.recent:  # a directory met lately was checked already
                self.check_twins(name, prefix)
        if clean in self.files:
            raise _unsafe(name, f"duplicates the path '{clean}' (ambiguous content)")
        if not is_dir and clean in self.directories:
            raise _unsafe(name, f"is a file but '{clean}' is also a directory")
        parent = clean.rpartition("/")[0]
        while parent and parent not in self.recent and parent not in self.directories:
            if parent in self.files:
                raise _unsafe(name, f"lies below '{parent}', which is a file")
            self.directories.add(parent)
            parent = parent.rpartition("/")[0]
        self._remember(clean if is_dir else clean.rpartition("/")[0])
        if is_dir:
            self.directories.add(clean)

    def _remember(self, directory: str) -> None:
        """Keep the directory and its parents (all claimed and checked) among the recent
        ones: files come grouped by folder, so most lookups stop here, not on disk."""
        while directory and directory not in self.recent:
            self.recent[directory] = None
            if len(self.recent) > _RECENT_DIRECTORIES:
                del self.recent[next(iter(self.recent))]
            directory = directory.rpartition("/")[0]


def _scan(path: Path, limits: ArchiveLimits, sink: FileSink | None) -> ArchiveReport:
    fmt = detect_format(path)

    def opener() -> IO[bytes]:
        return open(path, "rb")

    return _inspect(path, fmt, path.stat().st_size, opener, limits, sink)


def _inspect(
    path: Path,
    fmt: Format,
    archive_size: int,
    opener: Callable[[], IO[bytes]],
    limits: ArchiveLimits,
    sink: FileSink | None,
) -> ArchiveReport:
    """The one inspection of every format and source: `opener` gives the archive's bytes
    from the start (a zip is always read from `path`, its directory being at the end)."""
    tally = _Tally(archive_size=archive_size, limits=limits)
    seen = _Paths(allow_case_twins=limits.allow_case_twins)
    members = _zip_members(path, limits) if fmt == "zip" else _tar_members(path, fmt, opener, tally)
    with contextlib.closing(members), contextlib.closing(seen):
        return _check_members(path, fmt, members, tally, seen, sink)


def _check_members(
    path: Path,
    fmt: Format,
    members: Iterator[_Member],
    tally: _Tally,
    seen: _Paths,
    sink: FileSink | None,
) -> ArchiveReport:
    limits = tally.limits
    for member in _guarded(path, members):
        tally.member(member.name)
        if member.kind not in ("file", "dir"):
            raise _unsafe(
                member.name, f"is {member.kind}; only regular files and directories are allowed"
            )
        clean = _normalise(member.name, limits)
        if member.kind == "dir":
            if clean is not None:
                seen.claim(member.name, clean, is_dir=True)
                if sink is not None:
                    sink.directory(clean)
            continue
        if clean is None:
            raise file_at_the_root(member.name)
        seen.claim(member.name, clean, is_dir=False)
        tally.declared(member.name, member.declared_size)
        digest, size = _copy_member(path, member, clean, tally, sink)
        seen.files[clean] = f"{digest.hex()} {size}"
    tree_sha256, digests = _tree_of(seen.files)
    return ArchiveReport(
        format=fmt,
        file_count=len(seen.files),
        total_bytes=tally.total,
        tree_sha256=tree_sha256,
        has_index_html=_has_index_html(seen.files),
        digests=digests,
    )


def _tree_of(files: SpillMap) -> tuple[str, FileList]:
    """The tree hash of {path: "sha256 size"} and its files in that order, in one pass."""
    digests = FileList()
    hashed = hashlib.sha256()
    for path, value in files.sorted_items():
        sha256, _, length = value.partition(" ")
        hashed.update(path.encode("utf-8") + b"\0" + sha256.encode("ascii") + b"\n")
        digests.append(path, int(length), sha256)
    return hashed.hexdigest(), digests


def _copy_member(
    path: Path, member: _Member, clean: str, tally: _Tally, sink: FileSink | None
) -> tuple[bytes, int]:
    assert member.open is not None
    digest = hashlib.sha256()
    size = 0
    with contextlib.ExitStack() as stack:
        with _reading(path):
            stream = stack.enter_context(member.open())
        out = stack.enter_context(sink.open_file(clean)) if sink is not None else None
        while True:
            with _reading(path):
                chunk = stream.read(CHUNK_SIZE)
            if not chunk:
                break
            size += len(chunk)
            tally.add(member.name, size, len(chunk))
            digest.update(chunk)
            if out is not None:
                out.write(chunk)
        if size != member.declared_size:
            raise IntegrityError(
                f"corrupt archive: {path.name}: member {_quote(member.name)} holds {size} "
                f"bytes but its header says {member.declared_size}"
            )
        digested = getattr(out, "digested", None)
        if digested is not None:
            digested(digest.hexdigest(), size)
    return digest.digest(), size


def member_path(name: str, limits: ArchiveLimits) -> str | None:
    """A member's name as a path below the root, as every check and listing spells it (None
    for the root itself); IntegrityError for an unsafe name."""
    return _normalise(name, limits)


def _normalise(name: str, limits: ArchiveLimits) -> str | None:
    """The member's path below the root (None for the root itself); refuses unsafe names."""
    try:
        length = len(name.encode("utf-8"))
    except UnicodeEncodeError:
        raise _unsafe(name, "has a name that is not valid UTF-8") from None
    if length > limits.max_path_length:
        raise _unsafe(name, f"has a path longer than {limits.max_path_length} bytes")
    if "\0" in name:
        raise _unsafe(name, "contains a NUL byte")
    if _CONTROL.search(name):
        raise _unsafe(name, "contains a control character")
    if name.startswith(("/", "\\")) or (name[1:2] == ":" and name[:1].isalpha()):
        raise _unsafe(name, "has an absolute path")
    if "\\" in name:
        raise _unsafe(name, "contains a backslash (a path separator on Windows)")
    parts: list[str] = []
    for part in name.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if not parts:
                raise _unsafe(name, "escapes the root")
            parts.pop()
        elif len(part.encode("utf-8")) > MAX_NAME_COMPONENT_BYTES:
            raise _unsafe(name, f"has a name longer than {MAX_NAME_COMPONENT_BYTES} bytes")
        else:
            parts.append(part)
    return "/".join(parts) or None


def _has_index_html(files: SpillMap) -> bool:
    if "index.html" in files:
        return True
    tops: set[str] = set()
    for path, _ in files.sorted_items():
        tops.add(path.partition("/")[0])
        if len(tops) > 1:
            return False
    return len(tops) == 1 and f"{tops.pop()}/index.html" in files


def file_at_the_root(name: str) -> IntegrityError:
    """The refusal of a file member whose name is the root itself ('.', 'd/..'): no tree
    holds a file there."""
    return _unsafe(name, "has an empty path")


def _unsafe(name: str, rule: str) -> IntegrityError:
    return IntegrityError(f"unsafe archive: member {_quote(name)} {rule}")


def _quote(name: str) -> str:
    shown = name if len(name) <= 160 else name[:160] + "..."
    if shown.isprintable() and "'" not in shown:
        return f"'{shown}'"
    return ascii(shown)


def _guarded(path: Path, members: Iterator[_Member]) -> Iterator[_Member]:
    while True:
        with _reading(path):
            member = next(members, None)
        if member is None:
            return
        yield member


@contextlib.contextmanager
def _reading(path: Path) -> Iterator[None]:
    """Turn a reader's damaged-input error into one `corrupt archive` IntegrityError."""
    try:
        yield
    except MirrorError:
        raise
    except FileNotFoundError:
        raise NotFound(f"archive {path} does not exist") from None
    except _READ_ERRORS as exc:
        detail = (str(exc).splitlines() or [type(exc).__name__])[0]
        raise IntegrityError(f"corrupt archive: {path.name}: {detail}") from exc


def _read_head(path: Path, size: int) -> bytes:
    try:
        with open(path, "rb") as handle:
            return handle.read(size)
    except FileNotFoundError:
        raise NotFound(f"archive {path} does not exist") from None
    except OSError as exc:
        raise OperationFailed(f"cannot read archive {path}: {exc.strerror or exc}") from None


def _looks_like_tar_header(block: bytes) -> bool:
    if len(block) < 512:
        return False
    if block[257:262] == b"ustar":
        return True
    try:
        stored = int(block[148:156].replace(b"\0", b" ").strip() or b"-1", 8)
    except ValueError:
        return False
    return any(block[:100]) and stored == 256 + sum(block[:148]) + sum(block[156:512])


class _DirectorySink:
    """Creates checked members below `root`: only directories and regular files, fixed modes."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def directory(self, path: str) -> None:
        self._make_dirs(self.root.joinpath(path))

    def open_file(self, path: str) -> IO[bytes]:
        target = self.root.joinpath(path)
        self._make_dirs(target.parent)
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        os.fchmod(fd, 0o644)
        return os.fdopen(fd, "wb")

    def _make_dirs(self, directory: Path) -> None:
        missing: list[Path] = []
        while directory != self.root and not directory.is_dir():
            missing.append(directory)
            directory = directory.parent
        for new in reversed(missing):
            new.mkdir(mode=0o755)
            os.chmod(new, 0o755)  # noqa: S103


# ---------------------------------------------------------------------------
# Format readers: yield members in archive order; a member is read before the next.


def _decompressed(fmt: Format, raw: IO[bytes]) -> io.BufferedIOBase | IO[bytes]:
    if fmt == "tar.gz":
        return gzip.GzipFile(fileobj=raw, mode="rb")
    if fmt == "tar.bz2":
        return bz2.BZ2File(raw, mode="rb")
    if fmt == "tar.xz":
        return lzma.LZMAFile(raw, mode="rb")
    return raw


_TAR_KINDS: dict[bytes, str] = {
    tarfile.SYMTYPE: "a symbolic link",
    tarfile.LNKTYPE: "a hard link",
    tarfile.CHRTYPE: "a character device",
    tarfile.BLKTYPE: "a block device",
    tarfile.FIFOTYPE: "a FIFO",
}

_TAR_EXTENDED_HEADERS = (
    tarfile.XHDTYPE,
    tarfile.XGLTYPE,
    tarfile.SOLARIS_XHDTYPE,
    tarfile.GNUTYPE_LONGNAME,
    tarfile.GNUTYPE_LONGLINK,
)


def _tar_members(
    path: Path, fmt: Format, opener: Callable[[], IO[bytes]], tally: _Tally
) -> Generator[_Member, None, None]:
    # The decompressor sits below tarfile so that memory stays bounded whatever the
    # compression ratio (tarfile's own stream decompression is not bounded).
    last_header: list[str] = []

    class _CheckedTarInfo(tarfile.TarInfo):
        """Notes how the header stream ended; refuses extended headers too big to buffer."""

        @classmethod
        def frombuf(cls, buf: bytes | bytearray, encoding: str, errors: str) -> Self:
            try:
                info = super().frombuf(buf, encoding, errors)
            except tarfile.HeaderError as exc:
                last_header[:] = ["end" if len(buf) == 512 and not any(buf) else str(exc)]
                raise
            last_header[:] = ["member"]
            if info.type in _TAR_EXTENDED_HEADERS and info.size > MAX_TAR_EXTENDED_HEADER:
                raise IntegrityError(
                    f"corrupt archive: {path.name}: a {info.size}-byte extended header "
                    f"for {_quote(info.name)}"
                )
            return info

    with (
        opener() as raw,
        _decompressed(fmt, raw) as plain,
        tarfile.open(
            fileobj=cast(IO[bytes], forward := _Forward(plain)), mode="r:", tarinfo=_CheckedTarInfo
        ) as tar,
    ):
        while (info := tar.next()) is not None:
            tar.members.clear()  # type: ignore[attr-defined]  # a stream: keep none
            yield _tar_member(forward, info)
        if last_header != ["end"]:
            raise IntegrityError(
                f"corrupt archive: {path.name}: the tar stream stops without its "
                f"end-of-archive marker ({', '.join(last_header) or 'no header'})"
            )
        _drain_padding(path, tar, tally)


def _tar_member(forward: _Forward, info: tarfile.TarInfo) -> _Member:
    if info.issparse() or any(key.startswith("GNU.sparse.") for key in info.pax_headers):
        # unpacked under another name or with other bytes than it stores: never a file here
        return _Member(info.name, "a GNU sparse file", info.size)
    if info.isreg():
        return _Member(info.name, "file", info.size, functools.partial(forward.member, info.size))
    if info.isdir():
        return _Member(info.name, "dir", 0)
    kind = _TAR_KINDS.get(info.type, f"of unsupported tar type {info.type!r}")
    return _Member(info.name, kind, info.size)


class _Forward:
    """The unpacked tar stream, read once from front to back, for tarfile and the members.

    tarfile's own stream mode ("r|") joins and slices every read (three copies of each
    byte); here tarfile ("r:") reads only headers, exactly, and a member's bytes go from
    the decompressor to the member's hash as they come (`member`). `seek` only skips
    forward (tarfile skips a member's padding), as a stream allows.
    """

    def __init__(self, source: Readable) -> None:
        self.source = source
        self.position = 0

    def tell(self) -> int:
        return self.position

    def read_some(self, size: int) -> bytes:
        """At most `size` bytes (fewer only as the source gives them; b"" at its end)."""
        data = self.source.read(size)
        self.position += len(data)
        return data

    def read(self, size: int = -1) -> bytes:
        """Exactly `size` bytes unless the stream ends first (tarfile's headers need that)."""
        if size < 0:
            raise io.UnsupportedOperation("the unpacked tar stream is read in pieces")
        data = self.read_some(size)
        if len(data) == size or not data:
            return data
        pieces = [data]
        wanted = size - len(data)
        while wanted and (more := self.read_some(wanted)):
            pieces.append(more)
            wanted -= len(more)
        return b"".join(pieces)

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        if whence != io.SEEK_SET or offset < self.position:
            raise io.UnsupportedOperation("the unpacked tar stream only skips forward")
        while self.position < offset and self.read_some(min(CHUNK_SIZE, offset - self.position)):
            pass
        return self.position

    def member(self, size: int) -> IO[bytes]:
        """The next `size` bytes as a file to read (a member's data; short if the stream is)."""
        return cast(IO[bytes], _MemberData(self, size))


class _MemberData:
    """One tar member's bytes, straight from the unpacked stream (no copy in between)."""

    def __init__(self, forward: _Forward, size: int) -> None:
        self.forward = forward
        self.left = size

    def read(self, size: int = -1) -> bytes:
        want = self.left if size < 0 else min(size, self.left)
        data = self.forward.read_some(want) if want > 0 else b""
        self.left -= len(data)
        return data

    def __enter__(self) -> _MemberData:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


def _drain_padding(path: Path, tar: tarfile.TarFile, tally: _Tally) -> None:
    """Read to the end, so the compressor's checksum is verified, and allow only zeros:
    data hidden after the end-of-archive marker would be read by some tools, not others."""
    while chunk := tar.fileobj.read(CHUNK_SIZE):
        if chunk.count(0) != len(chunk):
            raise IntegrityError(
                f"corrupt archive: {path.name}: data after the tar end-of-archive marker"
            )
        tally.add_padding(len(chunk))


def _zip_members(path: Path, limits: ArchiveLimits) -> Generator[_Member, None, None]:
    _check_zip_directory(path, limits)
    with zipfile.ZipFile(path) as archive:
        for info in archive.infolist():
            name = _zip_name(info)
            if info.flag_bits & 0x1:
                yield _Member(name, "an encrypted file", info.file_size)
            else:
                opener = functools.partial(archive.open, info)
                yield _Member(name, _zip_kind(info), info.file_size, opener)


def _zip_name(info: zipfile.ZipInfo) -> str:
    """Names stored as UTF-8 without the UTF-8 flag are read as UTF-8, as most unzips do."""
    name = info.filename
    if info.flag_bits & 0x800 or name.isascii():
        return name
    try:
        return name.encode("cp437").decode("utf-8")
    except UnicodeError:
        return name


_UNIX_KINDS = {
    stat.S_IFLNK: "a symbolic link",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFIFO: "a FIFO",
    stat.S_IFSOCK: "a socket",
}


def _zip_kind(info: zipfile.ZipInfo) -> str:
    file_type = stat.S_IFMT(info.external_attr >> 16)
    if info.filename.endswith("/") or file_type == stat.S_IFDIR or info.external_attr & 0x10:
        return "a directory entry with content" if info.file_size else "dir"
    if file_type in (0, stat.S_IFREG):
        return "file"
    return _UNIX_KINDS.get(file_type, f"of unsupported unix type {oct(file_type)}")


def _check_zip_directory(path: Path, limits: ArchiveLimits) -> None:
    """Refuse a central directory past the member limit before zipfile loads it whole."""
    with open(path, "rb") as handle:
        size = handle.seek(0, os.SEEK_END)
        tail_start = max(0, size - (22 + 65535 + 20))
        handle.seek(tail_start)
        tail = handle.read()
        at = tail.rfind(b"PK\x05\x06")
        if at < 0 or len(tail) - at < 22:
            return
        entries, directory_size = struct.unpack("<HI", tail[at + 10 : at + 16])
        locator = tail[at - 20 : at] if at >= 20 else b""
        if locator[:4] == b"PK\x06\x07":
            (record_at,) = struct.unpack("<Q", locator[8:16])
            handle.seek(min(record_at, size))
            record = handle.read(56)
            if len(record) == 56 and record[:4] == b"PK\x06\x06":
                entries, directory_size = struct.unpack("<QQ", record[32:48])
    if entries > limits.max_files:
        raise IntegrityError(
            f"unsafe archive: {path.name} lists {entries} members, "
            f"over the limit of {limits.max_files}"
        )
    if directory_size > limits.max_files * (46 + limits.max_path_length + 64):
        raise IntegrityError(
            f"unsafe archive: {path.name} has a {directory_size}-byte central directory, "
            f"too large for {limits.max_files} members"
        )
