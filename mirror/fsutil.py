"""Crash-safe file writing and streaming hashes.

Promise: a reader never sees a half-written file. Everything is written to a
temporary name in the target's own directory, fsynced, renamed over the target
and the directory fsynced, so after a crash either the old or the new file is
there, whole.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

CHUNK_SIZE = 1024 * 1024


def fsync_dir(directory: Path) -> None:
    """Make a rename or create inside `directory` durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_writer(path: Path, mode: int = 0o644) -> Iterator[IO[bytes]]:
    """Yield a binary file that replaces `path` only if the block finishes without error."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    temp_path = Path(temp_name)
    try:
        with os.fdopen(fd, "wb") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temp_path, mode)
        os.replace(temp_path, path)
        fsync_dir(path.parent)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            temp_path.unlink()
        raise


def atomic_write_bytes(path: Path, data: bytes, mode: int = 0o644) -> None:
    """Replace `path` with `data`, all or nothing."""
    with atomic_writer(path, mode) as handle:
        handle.write(data)


def iter_file(path: Path, start: int = 0, length: int | None = None) -> Iterator[bytes]:
    """Stream a file (or a byte range of it) in CHUNK_SIZE pieces."""
    remaining = length
    with open(path, "rb") as handle:
        handle.seek(start)
        while remaining is None or remaining > 0:
            size = CHUNK_SIZE if remaining is None else min(CHUNK_SIZE, remaining)
            chunk = handle.read(size)
            if not chunk:
                break
            if remaining is not None:
                remaining -= len(chunk)
            yield chunk


def sha256_file(path: Path, start: int = 0, length: int | None = None) -> str:
    """Hex sha256 of a file (or a byte range), streamed."""
    digest = hashlib.sha256()
    for chunk in iter_file(path, start, length):
        digest.update(chunk)
    return digest.hexdigest()
