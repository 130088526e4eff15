"""The contents a delta's archive is made of, kept once each in one work file.

Both sides use it: the import keeps the contents a delta carries; the pack keeps the
contents its splice inserts (`mirror.outbound.recipe`).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Container, Iterator
from pathlib import Path
from typing import IO

from mirror.archive.spill import SpillMap
from mirror.errors import OperationFailed
from mirror.integrity import CHUNK_SIZE, Digest, HashingWriter


class Contents:
    """The contents a rebuild keeps, once each, appended to one file of the work directory
    (one file, not one per content: a site's thousands of pages cost no inodes or renames);
    also the contents a pack's splice inserts (`mirror.outbound.recipe`).
    A content that is not kept is cut off again at once, so the file holds only kept ones."""

    def __init__(self, path: Path | None = None, *, directory: Path | None = None) -> None:
        """In the file `path`, or in a nameless temp file in `directory`: a process killed
        leaves nothing there."""
        if path is not None:
            self.handle: IO[bytes] = open(path, "w+b")  # noqa: SIM115 (closed in close)
        else:
            self.handle = tempfile.TemporaryFile(dir=directory)  # noqa: SIM115 (the same)
        self.where = SpillMap()  # sha256 -> "offset size"

    def __enter__(self) -> Contents:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __contains__(self, sha256: str) -> bool:
        return sha256 in self.where

    def adding(self, *, hashing: bool = True) -> _Adding:
        return _Adding(self, hashing=hashing)

    def flush(self) -> None:
        self.handle.flush()

    def chunks(self, sha256: str) -> Iterator[bytes]:
        where = self.where.get(sha256)
        assert where is not None
        offset, remaining = (int(n) for n in where.split())
        fd = self.handle.fileno()
        while remaining > 0:
            chunk = os.pread(fd, min(CHUNK_SIZE, remaining), offset)
            if not chunk:
                raise OperationFailed(f"the rebuild's work file {self.handle.name} was truncated")
            offset += len(chunk)
            remaining -= len(chunk)
            yield chunk

    def close(self) -> None:
        self.handle.close()
        self.where.close()


class _Adding:
    """One content being appended: hashed as written (unless `hashing` is off: the caller
    learns its digest elsewhere and hands it to `finish`); `finish(wanted)` keeps it when
    its sha256 is wanted and not yet kept, else cuts it off. Leaving early cuts it off too."""

    def __init__(self, contents: Contents, *, hashing: bool = True) -> None:
        self.contents = contents
        self.start = contents.handle.seek(0, os.SEEK_END)
        self.written = HashingWriter(contents.handle) if hashing else None
        self.size = 0
        self.kept = False

    def write(self, data: bytes) -> int:
        if self.written is not None:
            return self.written.write(data)
        self.size += len(data)
        return self.contents.handle.write(data)

    @property
    def result(self) -> Digest:
        assert self.written is not None
        return self.written.result

    def finish(self, wanted: Container[str], digest: Digest | None = None) -> None:
        known = digest or self.result
        sha256, size = known.sha256, known.size
        if sha256 in wanted and sha256 not in self.contents:
            self.contents.where[sha256] = f"{self.start} {size}"
            self.kept = True

    def __enter__(self) -> _Adding:
        return self

    def __exit__(self, *exc: object) -> None:
        if not self.kept:
            self.contents.handle.seek(self.start)
            self.contents.handle.truncate()
