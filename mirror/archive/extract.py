"""Unpacking a checked archive into a directory, all or nothing, with fixed modes."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import IO

from mirror.archive.check import ArchiveReport, scan
from mirror.archive.paths import ArchiveLimits
from mirror.errors import OperationFailed


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
        report = scan(path, limits, sink=_DirectorySink(staging))
        os.chmod(staging, 0o755)  # noqa: S103 (a site is meant to be readable)
        os.replace(staging, dest)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return report


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
