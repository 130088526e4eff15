"""One member as a format reader yields it, where checked members go, and the tally of
members and bytes against the limits (the compression-ratio guard among them)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import IO, Protocol

from mirror.archive.paths import ArchiveLimits, unsafe

RATIO_FLOOR = 64 * 1024**2


@dataclass
class Member:
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
class Tally:
    """Counts members and bytes against the limits while they stream past."""

    archive_size: int
    limits: ArchiveLimits
    members: int = 0
    total: int = 0
    padding: int = 0

    def member(self, name: str) -> None:
        self.members += 1
        if self.members > self.limits.max_files:
            raise unsafe(name, f"is past the limit of {self.limits.max_files} members")

    def declared(self, name: str, size: int) -> None:
        if size > self.limits.max_member_bytes:
            raise unsafe(
                name, f"declares {size} bytes, over the {self.limits.max_member_bytes}-byte limit"
            )

    def add(self, name: str, member_bytes: int, chunk: int) -> None:
        self.total += chunk
        limits = self.limits
        if member_bytes > limits.max_member_bytes:
            raise unsafe(name, f"is larger than the {limits.max_member_bytes}-byte member limit")
        if self.total > limits.max_total_bytes:
            raise unsafe(
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
            raise unsafe(
                name,
                f"takes the unpacked size past {self.limits.max_ratio:g} times the archive "
                f"size of {self.archive_size} bytes (compression bomb)",
            )
