"""The tar reader: members in archive order from a decompressed stream read once, front to back."""

from __future__ import annotations

import bz2
import functools
import gzip
import io
import lzma
import tarfile
from collections.abc import Callable, Generator
from pathlib import Path
from typing import IO, Self, cast

from mirror.archive.formats import Format
from mirror.archive.members import Member, Tally
from mirror.archive.paths import quote
from mirror.errors import IntegrityError
from mirror.integrity import CHUNK_SIZE, Readable

MAX_TAR_EXTENDED_HEADER = 1024 * 1024


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


def _checked_tarinfo(path: Path, last_header: list[str]) -> type[tarfile.TarInfo]:
    """A TarInfo that notes in `last_header` how the header stream ended ("end" for the
    end-of-archive marker) and refuses extended headers too big to buffer."""

    class _CheckedTarInfo(tarfile.TarInfo):
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
                    f"for {quote(info.name)}"
                )
            return info

    return _CheckedTarInfo


def tar_members(
    path: Path, fmt: Format, opener: Callable[[], IO[bytes]], tally: Tally
) -> Generator[Member, None, None]:
    # The decompressor sits below tarfile so that memory stays bounded whatever the
    # compression ratio (tarfile's own stream decompression is not bounded).
    last_header: list[str] = []
    checked = _checked_tarinfo(path, last_header)
    with (
        opener() as raw,
        _decompressed(fmt, raw) as plain,
        tarfile.open(
            fileobj=cast(IO[bytes], forward := _Forward(plain)), mode="r:", tarinfo=checked
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


def _tar_member(forward: _Forward, info: tarfile.TarInfo) -> Member:
    if info.issparse() or any(key.startswith("GNU.sparse.") for key in info.pax_headers):
        # unpacked under another name or with other bytes than it stores: never a file here
        return Member(info.name, "a GNU sparse file", info.size)
    if info.isreg():
        return Member(info.name, "file", info.size, functools.partial(forward.member, info.size))
    if info.isdir():
        return Member(info.name, "dir", 0)
    kind = _TAR_KINDS.get(info.type, f"of unsupported tar type {info.type!r}")
    return Member(info.name, kind, info.size)


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


def _drain_padding(path: Path, tar: tarfile.TarFile, tally: Tally) -> None:
    """Read to the end, so the compressor's checksum is verified, and allow only zeros:
    data hidden after the end-of-archive marker would be read by some tools, not others."""
    while chunk := tar.fileobj.read(CHUNK_SIZE):
        if chunk.count(0) != len(chunk):
            raise IntegrityError(
                f"corrupt archive: {path.name}: data after the tar end-of-archive marker"
            )
        tally.add_padding(len(chunk))
