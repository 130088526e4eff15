"""The one inspection of every format and source: each member checked, hashed and handed
to a sink in one pass; damaged input becomes one `corrupt archive` refusal."""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, cast

from mirror.archive.formats import READ_ERRORS, Format, detect_format
from mirror.archive.members import FileSink, Member, Tally
from mirror.archive.paths import (
    ArchiveLimits,
    SeenPaths,
    file_at_the_root,
    normalise,
    quote,
    unsafe,
)
from mirror.archive.spill import FileList
from mirror.archive.tarreader import tar_members
from mirror.archive.treehash import has_index_html, tree_of
from mirror.archive.zipreader import zip_members
from mirror.errors import IntegrityError, MirrorError, NotFound
from mirror.integrity import CHUNK_SIZE


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
    """Every file's (path, size, sha256) in the tree hash's order, with its SHA-1, in a nameless
    temp file (`spill.FileList`): what `store.digests` keeps beside the bundle."""


def inspect_archive(
    path: Path,
    limits: ArchiveLimits = ArchiveLimits(),
    observe: Callable[[], FileSink] | None = None,
) -> ArchiveReport:
    """Check every rule on `path` and report what it holds, writing nothing. With `observe`,
    the sink it makes sees every checked member in the same pass (as `read_archive`) and is
    the report's `observed`."""
    if observe is None:
        return scan(path, limits, sink=None)
    observer = observe()
    return dataclasses.replace(scan(path, limits, sink=observer), observed=observer)


def read_archive(
    path: Path, sink: FileSink, limits: ArchiveLimits = ArchiveLimits()
) -> ArchiveReport:
    """Check every rule on `path` while handing each checked member to `sink` in archive
    order: `sink.directory(path)`, or `sink.open_file(path)` and the file's bytes written to
    what it returns (closed after the last byte). A refusal can come after some members
    were handed over: the sink must keep nothing it was given until this returns."""
    return scan(path, limits, sink)


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
    return inspect_stream(
        Path(name), fmt, size, lambda: cast(IO[bytes], _Borrowed(stream)), limits, sink
    )


class _Borrowed:
    """A caller's stream, read through; leaving it as a context leaves the stream open."""

    def __init__(self, stream: IO[bytes]) -> None:
        self.read = stream.read

    def __enter__(self) -> _Borrowed:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


def scan(path: Path, limits: ArchiveLimits, sink: FileSink | None) -> ArchiveReport:
    fmt = detect_format(path)

    def opener() -> IO[bytes]:
        return open(path, "rb")

    return inspect_stream(path, fmt, path.stat().st_size, opener, limits, sink)


def inspect_stream(
    path: Path,
    fmt: Format,
    archive_size: int,
    opener: Callable[[], IO[bytes]],
    limits: ArchiveLimits,
    sink: FileSink | None,
) -> ArchiveReport:
    """The one inspection of every format and source: `opener` gives the archive's bytes
    from the start (a zip is always read from `path`, its directory being at the end)."""
    tally = Tally(archive_size=archive_size, limits=limits)
    seen = SeenPaths(allow_case_twins=limits.allow_case_twins)
    members = zip_members(path, limits) if fmt == "zip" else tar_members(path, fmt, opener, tally)
    with contextlib.closing(members), contextlib.closing(seen):
        return _check_members(path, fmt, members, tally, seen, sink)


def _check_members(
    path: Path,
    fmt: Format,
    members: Iterator[Member],
    tally: Tally,
    seen: SeenPaths,
    sink: FileSink | None,
) -> ArchiveReport:
    limits = tally.limits
    for member in _guarded(path, members):
        tally.member(member.name)
        if member.kind not in ("file", "dir"):
            raise unsafe(
                member.name, f"is {member.kind}; only regular files and directories are allowed"
            )
        clean = normalise(member.name, limits)
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
        digest, size, sha1 = _copy_member(path, member, clean, tally, sink)
        seen.files[clean] = f"{digest.hex()} {size} {sha1}"
    tree_sha256, digests = tree_of(seen.files)
    return ArchiveReport(
        format=fmt,
        file_count=len(seen.files),
        total_bytes=tally.total,
        tree_sha256=tree_sha256,
        has_index_html=has_index_html(seen.files),
        digests=digests,
    )


def _copy_member(
    path: Path, member: Member, clean: str, tally: Tally, sink: FileSink | None
) -> tuple[bytes, int, str]:
    """The member's sha256, size and SHA-1 (hex), its bytes handed to `sink` on the way: the
    SHA-1 only for the SPDX inventory, whose files must name one (`outbound/inventory.py`)."""
    assert member.open is not None
    digest = hashlib.sha256()
    sha1 = hashlib.sha1(usedforsecurity=False)
    size = 0
    with contextlib.ExitStack() as stack:
        with reading(path):
            stream = stack.enter_context(member.open())
        out = stack.enter_context(sink.open_file(clean)) if sink is not None else None
        while True:
            with reading(path):
                chunk = stream.read(CHUNK_SIZE)
            if not chunk:
                break
            size += len(chunk)
            tally.add(member.name, size, len(chunk))
            digest.update(chunk)
            sha1.update(chunk)
            if out is not None:
                out.write(chunk)
        if size != member.declared_size:
            raise IntegrityError(
                f"corrupt archive: {path.name}: member {quote(member.name)} holds {size} "
                f"bytes but its header says {member.declared_size}"
            )
        digested = getattr(out, "digested", None)
        if digested is not None:
            digested(digest.hexdigest(), size)
    return digest.digest(), size, sha1.hexdigest()


def _guarded(path: Path, members: Iterator[Member]) -> Iterator[Member]:
    while True:
        with reading(path):
            member = next(members, None)
        if member is None:
            return
        yield member


@contextlib.contextmanager
def reading(path: Path) -> Iterator[None]:
    """Turn a reader's damaged-input error into one `corrupt archive` IntegrityError."""
    try:
        yield
    except MirrorError:
        raise
    except FileNotFoundError:
        raise NotFound(f"archive {path} does not exist") from None
    except READ_ERRORS as exc:
        detail = (str(exc).splitlines() or [type(exc).__name__])[0]
        raise IntegrityError(f"corrupt archive: {path.name}: {detail}") from exc
