"""The zip reader: members from the central directory, its size checked before it is loaded."""

from __future__ import annotations

import functools
import os
import stat
import struct
import zipfile
from collections.abc import Generator
from pathlib import Path

from mirror.archive.members import Member
from mirror.archive.paths import ArchiveLimits
from mirror.errors import IntegrityError


def zip_members(path: Path, limits: ArchiveLimits) -> Generator[Member, None, None]:
    _check_zip_directory(path, limits)
    with zipfile.ZipFile(path) as archive:
        for info in archive.infolist():
            name = _zip_name(info)
            if info.flag_bits & 0x1:
                yield Member(name, "an encrypted file", info.file_size)
            else:
                opener = functools.partial(archive.open, info)
                yield Member(name, _zip_kind(info), info.file_size, opener)


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
