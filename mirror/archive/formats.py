"""What format an archive is: decided by its first bytes, never by its name."""

from __future__ import annotations

import lzma
import struct
import tarfile
import zipfile
import zlib
from pathlib import Path
from typing import Literal

from mirror.errors import IntegrityError, NotFound, OperationFailed

Format = Literal["tar.gz", "tar", "zip", "tar.xz", "tar.bz2"]


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
READ_ERRORS: tuple[type[Exception], ...] = (
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


def file_extension(fmt: Format) -> str:
    """The extension of object names (`bundle.<ext>`) for an archive in `fmt`."""
    return _EXTENSIONS[fmt]


def detect_format(path: Path) -> Format:
    """The archive format of `path`, from its first bytes (the file name is ignored)."""
    return format_of(read_head(path, 512), path.name)


def format_of(head: bytes, name: str) -> Format:
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


def read_head(path: Path, size: int) -> bytes:
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
