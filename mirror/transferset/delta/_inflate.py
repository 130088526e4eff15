"""A gzip stream's deflate blocks, each with its exact bits and what it inflates to.

A spliced archive (`transferset/delta/_splice.py`) copies the compressed bits of the base's
unchanged blocks, so it needs what no Python binding gives: where each deflate block of a
gzip stream begins and ends, to the bit. zlib's own `inflate(Z_BLOCK)` stops at every block
boundary and says how many bits of the last byte it left unused. It is reached through
ctypes in zlib-ng (the library the pinned `zlib-ng` wheel carries and exports, `zng_*`):
its inflate and CRC-32 are 2.4 and 15 times zlib 1.2's here. Inflating is defined by RFC
1951, so the boundaries are a property of the bytes, not of the library.

Promises: `GzipBlocks` reads its chunks once, in order, holding one block's compressed and
inflated bytes at a time (zlib's and libdeflate's blocks inflate to at most a few MiB, a
stored block to 64 KiB; a block over `MAX_BLOCK` is refused as IntegrityError); every
member of a multi-member gzip is read, each header and trailer checked (CRC-32 and length),
zero bytes after a member skipped (as Python's gzip, which checked the stored bundle, skips
them); anything else that is not a well-formed gzip stream is IntegrityError (exit 5). No
I/O beyond `chunks`.
"""

from __future__ import annotations

import ctypes
import gzip
import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import cache
from typing import IO, cast

from zlib_ng import gzip_ng
from zlib_ng.zlib_ng import crc32

from mirror.errors import ConfigError, IntegrityError

__all__ = [
    "MAX_BLOCK",
    "Block",
    "GzipBlocks",
    "crc32",
    "final_block",
    "gzip_file",
    "raw_blocks",
]


def gzip_file(fileobj: IO[bytes], mode: str, *, compresslevel: int = 6) -> gzip.GzipFile:
    """`gzip.GzipFile` with the pinned zlib-ng's deflate and inflate (its own subclass): here
    three times zlib's inflate speed and twice its deflate's; mtime 0 when writing."""
    made = gzip_ng.GzipFile(  # type: ignore[no-untyped-call]  # the module has no annotations
        fileobj=fileobj, mode=mode, compresslevel=compresslevel, mtime=0
    )
    return cast(gzip.GzipFile, made)


Z_OK = 0
Z_STREAM_END = 1
Z_BUF_ERROR = -5
Z_BLOCK = 5
_AT_BOUNDARY = 128
_UNUSED_BITS = 63  # data_type's low bits: bits held but not used (64 flags the last block)
_OUT_SIZE = 1024 * 1024
_COUNT_SIZE = 64 * 1024  # the output buffer of an inflate that keeps nothing
MAX_BLOCK = 64 * 1024 * 1024
_GZIP_MAGIC = b"\x1f\x8b\x08"
_FHCRC, _FEXTRA, _FNAME, _FCOMMENT = 2, 4, 8, 16


class _ZStream(ctypes.Structure):
    """zlib-ng's `zng_stream` (its size is checked by `zng_inflateInit2_`)."""

    _fields_ = [
        ("next_in", ctypes.c_void_p),
        ("avail_in", ctypes.c_uint32),
        ("total_in", ctypes.c_size_t),
        ("next_out", ctypes.c_void_p),
        ("avail_out", ctypes.c_uint32),
        ("total_out", ctypes.c_size_t),
        ("msg", ctypes.c_char_p),
        ("state", ctypes.c_void_p),
        ("zalloc", ctypes.c_void_p),
        ("zfree", ctypes.c_void_p),
        ("opaque", ctypes.c_void_p),
        ("data_type", ctypes.c_int),
        ("adler", ctypes.c_uint32),
        ("reserved", ctypes.c_ulong),
    ]


@cache
def _libz() -> ctypes.CDLL:
    from zlib_ng import zlib_ng

    try:
        lib = ctypes.CDLL(zlib_ng.__file__)
        pointer = ctypes.POINTER(_ZStream)
        lib.zng_inflateInit2_.argtypes = [pointer, ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
        lib.zng_inflate.argtypes = [pointer, ctypes.c_int]
        lib.zng_inflateEnd.argtypes = [pointer]
        lib.zlibng_version.restype = ctypes.c_char_p
    except (OSError, AttributeError):
        raise ConfigError(
            "the zlib-ng wheel installed does not export zlib-ng's inflate (zng_inflate)",
            hint="install mirror's locked dependencies (requirements.lock: zlib-ng)",
        ) from None
    return lib


@dataclass(frozen=True)
class Block:
    """One deflate block: `raw` holds its bits, from bit `shift` of `raw[0]` for `bits`
    bits (the block header's first bit, BFINAL, is the first of them); `data` is what it
    inflates to, starting at offset `start` of the inflated stream. `member_start` is where
    its gzip member's inflated bytes start: no back-reference reaches before it. `offset`
    is where `raw[0]` stands in the compressed stream."""

    raw: bytes
    shift: int
    bits: int
    data: bytes
    start: int
    member_start: int
    offset: int

    @property
    def kind(self) -> int:
        """BTYPE: 0 stored, 1 fixed Huffman codes, 2 dynamic."""
        return (int.from_bytes(self.raw[:2], "little") >> (self.shift + 1)) & 3

    @property
    def end(self) -> int:
        return self.start + len(self.data)


def raw_blocks(deflated: bytes, *, keep_data: bool = True) -> list[Block]:
    """The blocks of one raw deflate stream held in memory (a piece compressed here); with
    `keep_data` false, what they inflate to is counted, not kept (their `data` is empty)."""
    source = _Input(iter((deflated,)))
    inflater = _RawInflater(source, 0, 0, keep_data=keep_data)
    blocks = list(inflater.blocks())
    if inflater.end != len(deflated):
        raise IntegrityError("a deflate stream goes on after its final block")
    return blocks


def final_block(deflated: bytes) -> tuple[int, int]:
    """Where the final block of the one raw deflate stream `deflated` begins and ends, in
    bits."""
    blocks = raw_blocks(deflated, keep_data=False)
    end = sum(block.bits for block in blocks)
    return end - blocks[-1].bits, end


class GzipBlocks:
    """The deflate blocks of every member of a gzip stream read from `chunks` (module
    docstring). After the iteration, `size` is the inflated length."""

    def __init__(self, chunks: Iterable[bytes], *, label: str) -> None:
        self._input = _Input(iter(chunks))
        self._label = label
        self.size = 0

    def __iter__(self) -> Iterator[Block]:
        source = self._input
        at = 0
        while at == 0 or source.has(at):
            if source.get(at, 3) != _GZIP_MAGIC:
                raise IntegrityError(f"{self._label}: not a gzip stream")
            at = self._past_header(at)
            inflater = _RawInflater(source, at, self.size)
            crc = 0
            try:
                for block in inflater.blocks():
                    crc = crc32(block.data, crc)
                    yield block
            except IntegrityError as exc:
                raise IntegrityError(f"{self._label}: {exc.message}") from None
            member_size = (inflater.inflated - self.size) & 0xFFFFFFFF
            self.size = inflater.inflated
            trailer = source.get(inflater.end, 8)
            if len(trailer) != 8:
                raise IntegrityError(f"{self._label}: the gzip stream ends inside a trailer")
            if struct.unpack("<II", trailer) != (crc & 0xFFFFFFFF, member_size):
                raise IntegrityError(f"{self._label}: a gzip member's CRC-32 or length is wrong")
            at = inflater.end + 8
            while source.get(at, 1) == b"\0":  # zero padding, which gzip readers skip
                at += 1
            source.release(at)

    def _past_header(self, at: int) -> int:
        """The offset of a member's deflate stream, its header (at `at`) skipped."""
        source = self._input
        header = source.get(at, 10)
        if len(header) != 10:
            raise IntegrityError(f"{self._label}: the gzip stream ends inside a header")
        flags, at = header[3], at + 10
        if flags & _FEXTRA:
            at += 2 + int.from_bytes(source.get(at, 2).ljust(2, b"\0"), "little")
        for flag in (_FNAME, _FCOMMENT):
            if flags & flag:
                end = source.find_zero(at)
                if end is None:
                    raise IntegrityError(f"{self._label}: the gzip stream ends inside a header")
                at = end + 1
        if flags & _FHCRC:
            at += 2
        if not source.has(at - 1):
            raise IntegrityError(f"{self._label}: the gzip stream ends inside a header")
        return at


class _Input:
    """Compressed bytes as they arrive, addressed by stream offset, kept from the oldest
    offset still needed (`release`)."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self._chunks = chunks
        self._buffer = bytearray()
        self._base = 0
        self._ended = False
        self._last = b""  # the chunk that arrived last

    @property
    def end(self) -> int:
        return self._base + len(self._buffer)

    def more(self) -> bool:
        while not self._ended:
            chunk = next(self._chunks, None)
            if chunk is None:
                self._ended = True
            elif chunk:
                self._buffer += chunk
                self._last = bytes(chunk)
                return True
        return False

    def has(self, offset: int) -> bool:
        while offset >= self.end:
            if not self.more():
                return False
        return True

    def get(self, offset: int, size: int) -> bytes:
        self.has(offset + size - 1)
        return bytes(self._buffer[offset - self._base : offset - self._base + size])

    def find_zero(self, offset: int) -> int | None:
        while (found := self._buffer.find(b"\0", offset - self._base)) < 0:
            if not self.more():
                return None
        return self._base + found

    def since(self, offset: int) -> bytes:
        """The bytes from `offset` on: the last chunk itself when it starts there (no copy)."""
        if offset == self.end - len(self._last):
            return self._last
        return bytes(self._buffer[offset - self._base :])

    def release(self, offset: int) -> None:
        drop = min(offset - self._base, len(self._buffer))
        if drop > 0:
            del self._buffer[:drop]
            self._base += drop


class _RawInflater:
    """One raw deflate stream of `source` from offset `offset`, block by block; `end` is
    the offset past its last byte once the final block was read."""

    def __init__(
        self, source: _Input, offset: int, inflated: int, *, keep_data: bool = True
    ) -> None:
        self._source = source
        self._keep_data = keep_data
        self._fed = offset  # the offset past the last byte handed to zlib
        self._bit = offset * 8  # where the next block begins
        self._member_start = inflated
        self.inflated = inflated
        self.end = offset
        self._held = b""  # what zlib reads now, kept alive while it does

    def blocks(self) -> Iterator[Block]:
        lib = _libz()
        stream = _ZStream()
        if (
            lib.zng_inflateInit2_(
                ctypes.byref(stream), -15, lib.zlibng_version(), ctypes.sizeof(_ZStream)
            )
            != Z_OK
        ):
            raise MemoryError("zlib could not start an inflate")
        try:
            yield from self._run(lib, stream)
        finally:
            lib.zng_inflateEnd(ctypes.byref(stream))
            self._held = b""

    def _run(self, lib: ctypes.CDLL, stream: _ZStream) -> Iterator[Block]:
        size = _OUT_SIZE if self._keep_data else _COUNT_SIZE
        out = ctypes.create_string_buffer(size)
        data: list[bytes] = []
        inflated = 0
        while True:
            exhausted = stream.avail_in == 0 and not self._feed(stream)
            stream.next_out = ctypes.addressof(out)
            stream.avail_out = size
            code = lib.zng_inflate(ctypes.byref(stream), Z_BLOCK)
            if code not in (Z_OK, Z_STREAM_END, Z_BUF_ERROR):
                raise IntegrityError(f"not a deflate stream ({(stream.msg or b'?').decode()})")
            if stream.avail_out < size:
                if self._keep_data:
                    data.append(ctypes.string_at(out, size - stream.avail_out))
                inflated += size - stream.avail_out
            if inflated > MAX_BLOCK:
                raise IntegrityError(f"a deflate block inflates to more than {MAX_BLOCK} bytes")
            if code == Z_BUF_ERROR and stream.avail_out:
                raise IntegrityError(
                    "the deflate stream ends before its final block"
                    if exhausted
                    else "not a deflate stream (zlib made no progress)"
                )
            if code == Z_STREAM_END or stream.data_type & _AT_BOUNDARY:
                consumed = self._fed - stream.avail_in
                bit = consumed * 8 - (stream.data_type & _UNUSED_BITS)
                # zlib stops after the final block's end code (a boundary) before it
                # reports the end: what the end adds is the padding to a byte, no block
                if bit > self._bit and (inflated or code != Z_STREAM_END):
                    yield self._block(bit, data[0] if len(data) == 1 else b"".join(data))
                    data.clear()
                    inflated = 0
                if code == Z_STREAM_END:
                    self.end = consumed
                    return

    def _feed(self, stream: _ZStream) -> bool:
        source = self._source
        if not source.has(self._fed):
            return False
        chunk = source.since(self._fed)
        self._held = chunk  # zlib reads the bytes object's own buffer: no copy
        stream.next_in = ctypes.cast(ctypes.c_char_p(chunk), ctypes.c_void_p).value
        stream.avail_in = len(chunk)
        self._fed += len(chunk)
        return True

    def _block(self, end_bit: int, data: bytes) -> Block:
        start_bit = self._bit
        first = start_bit // 8
        raw = self._source.get(first, (end_bit + 7) // 8 - first)
        self._source.release(end_bit // 8)
        self._bit = end_bit
        block = Block(
            raw=raw,
            shift=start_bit % 8,
            bits=end_bit - start_bit,
            data=data,
            start=self.inflated,
            member_start=self._member_start,
            offset=first,
        )
        self.inflated += len(data)
        return block
