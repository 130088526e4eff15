"""What a spliced delta carries, from the two versions' kept digests and one inflate.

A spliced delta (`transferset/format.py` `DeltaEntry.spliced`) carries every file of the new
version that its base does not hold at the same path with the same content. Both versions'
files are known without reading either bundle (`store.digests`, proven against the trees
the index records), so the pack reads the new bundle only to take the carried files' bytes:
one inflate, the tar headers at the offsets their sizes give (`transferset/delta/_tarunits.py`),
nothing checked again that the bundle's inspection checked when it was stored.

Promises:
- `compare` walks both listings once, in the tree's order (a merge, flat in the file
  count): the carried files (path -> sha256, on disk as they grow) and how many files were
  changed, added and removed.
- `take_contents` hands each carried content to the blob writer once, after hashing it
  against the listing; a carried path the bundle does not hold, or holds with other bytes,
  is IntegrityError (the store is inconsistent with its listing). Memory is one piece of
  the inflated stream and the carried files below `SPOOL_IN_MEMORY` being read.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from tempfile import SpooledTemporaryFile
from typing import IO, cast

from mirror.archive import ArchiveLimits, member_path
from mirror.archive.spill import SpillMap
from mirror.errors import IntegrityError
from mirror.integrity import HashingWriter, mismatch
from mirror.transferset.delta import DeltaBlobWriter, MemberData, TarUnits, gzip_file, read_chunks

SPOOL_IN_MEMORY = 4 * 1024 * 1024
INFLATED_PIECE = 1024 * 1024


@dataclass
class Comparison:
    """The files a spliced delta carries (path -> sha256) and the counts of the change."""

    carried: SpillMap
    changed: int = 0
    added: int = 0
    removed: int = 0


def compare(new: Iterable[tuple[str, int, str]], base: Iterable[tuple[str, str]]) -> Comparison:
    """Both in the tree's order (paths by their UTF-8 bytes): `new` (path, size, sha256),
    `base` (path, sha256)."""
    found = Comparison(SpillMap())
    olds = iter(base)
    old = next(olds, None)
    for path, _, sha256 in new:
        key = path.encode()
        while old is not None and old[0].encode() < key:
            found.removed += 1
            old = next(olds, None)
        if old is not None and old[0] == path:
            if old[1] != sha256:
                found.changed += 1
                found.carried[path] = sha256
            old = next(olds, None)
        else:
            found.added += 1
            found.carried[path] = sha256
    found.removed += sum(1 for _ in olds) + (old is not None)
    return found


def take_contents(
    bundle: Path,
    carried: SpillMap,
    blob: DeltaBlobWriter,
    *,
    spool_dir: Path,
    label: str,
    limits: ArchiveLimits | None = None,
) -> None:
    """The carried files' contents from the tar.gz `bundle`, into `blob` (module
    docstring)."""
    with _Taking(carried, blob, spool_dir, label, limits or ArchiveLimits()) as taking:
        position = 0
        for data in _inflated(bundle):
            taking.feed(data, position)
            position += len(data)
        taking.finish()


class _Taking:
    """The carried members' bytes as the inflated stream passes, each hashed and spooled,
    handed to the blob at its end."""

    def __init__(
        self,
        carried: SpillMap,
        blob: DeltaBlobWriter,
        spool_dir: Path,
        label: str,
        limits: ArchiveLimits,
    ) -> None:
        self._carried, self._blob, self._spool_dir = carried, blob, spool_dir
        self._label, self._limits = label, limits
        self._units = TarUnits()
        self._wanted: MemberData[tuple[str, str, IO[bytes], HashingWriter]] = MemberData()
        self._taken = SpillMap()

    def __enter__(self) -> _Taking:
        return self

    def __exit__(self, *exc: object) -> None:
        self._taken.close()

    def feed(self, data: bytes, position: int) -> None:
        for unit in self._units.feed(data):
            path = member_path(unit.path, self._limits) if unit.path is not None else None
            sha256 = self._carried.get(path) if unit.kind == "file" and path else None
            if path is not None and sha256 is not None and self._taken.add(path):
                spool = _spool(self._spool_dir)
                self._wanted.want(unit, (path, sha256, spool, HashingWriter(spool)))
        for (path, sha256, spool, hashing), piece, last in self._wanted.pieces(data, position):
            hashing.write(piece)
            if last:
                _carry(self._blob, path, sha256, spool, hashing, self._label)

    def finish(self) -> None:
        if len(self._taken) != len(self._carried) or self._wanted.pending:
            raise IntegrityError(
                f"{self._label}: the bundle lacks {len(self._carried) - len(self._taken)} of "
                "the files its kept digests list; the store is inconsistent with its index"
            )


def _spool(directory: Path) -> IO[bytes]:
    return cast(IO[bytes], SpooledTemporaryFile(max_size=SPOOL_IN_MEMORY, dir=str(directory)))


def _carry(
    blob: DeltaBlobWriter,
    path: str,
    sha256: str,
    spool: IO[bytes],
    hashing: HashingWriter,
    label: str,
) -> None:
    try:
        if hashing.result.sha256 != sha256:
            raise mismatch(f"{label}: {path} in the stored bundle", hashing.result.sha256, sha256)
        spool.seek(0)
        blob.add_content(sha256, hashing.size, read_chunks(spool))
    finally:
        spool.close()


def _inflated(bundle: Path) -> Iterator[bytes]:
    """The tar stream of the tar.gz `bundle` (every gzip member), in pieces: inflated by
    the pinned zlib-ng, three times zlib's speed here."""
    with bundle.open("rb") as raw, gzip_file(raw, "rb") as stream:
        while piece := stream.read(INFLATED_PIECE):
            yield piece
