"""A gzip stream's deflate blocks, to the bit (mirror/transferset/delta/_inflate.py).

Every stream here is made by zlib (Python's `zlib` and `gzip`) or by hand; each block is
checked against the stream's own bytes: where its bits lie, and that those bits alone, with
the 32 KiB before them as the dictionary, inflate to its data.
"""

from __future__ import annotations

import gzip
import random
import struct
import zlib
from collections.abc import Iterator

import pytest

from mirror.errors import IntegrityError
from mirror.transferset.delta._inflate import Block, GzipBlocks, final_block, raw_blocks
from tests.fixtures.archives import word_text

WINDOW = 32 * 1024


def _text(size: int, seed: int = 1) -> bytes:
    return word_text(size, seed)


def _deflate(data: bytes, level: int, *, mem_level: int = 8, flush_every: int = 0) -> bytes:
    """A raw deflate stream; a small `mem_level` makes many small blocks, `flush_every` adds
    sync flushes (empty stored blocks, byte-aligned boundaries)."""
    compressor = zlib.compressobj(level, zlib.DEFLATED, -15, mem_level)
    step = flush_every or len(data) or 1
    out = b""
    for at in range(0, len(data), step):
        out += compressor.compress(data[at : at + step])
        if flush_every:
            out += compressor.flush(zlib.Z_SYNC_FLUSH)
    return out + compressor.flush()


def _member(data: bytes, deflated: bytes, header: bytes = b"") -> bytes:
    header = header or b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"
    return header + deflated + struct.pack("<II", zlib.crc32(data), len(data) & 0xFFFFFFFF)


def _bits_at(stream: bytes, offset: int, count: int) -> int:
    return (int.from_bytes(stream, "little") >> offset) & ((1 << count) - 1)


def _blocks(gz: bytes, chunk: int | None = None) -> list[Block]:
    if chunk is None:
        return list(GzipBlocks([gz], label="base"))
    return list(GzipBlocks((gz[i : i + chunk] for i in range(0, len(gz), chunk)), label="base"))


def _check_stream(blocks: list[Block], deflated: bytes, data: bytes, start: int) -> None:
    """The blocks are the raw deflate stream `deflated` (inflating to `data`, whose first
    byte is at inflated offset `start`) cut at block boundaries, in order, nothing left."""
    assert blocks, "no blocks"
    bit = 0
    for block in blocks:
        assert block.shift == bit % 8
        assert block.raw == deflated[bit // 8 : (bit + block.bits + 7) // 8]
        assert block.member_start == start
        assert block.kind == _bits_at(deflated, bit + 1, 2)
        assert block.data == data[block.start - start : block.end - start]
        assert _inflates_alone(block, data[: block.start - start])
        bit += block.bits
    assert (bit + 7) // 8 == len(deflated), "the blocks do not reach the stream's end"
    assert [b.start for b in blocks[1:]] == [b.end for b in blocks[:-1]]
    assert blocks[0].start == start and blocks[-1].end == start + len(data)
    assert [_bits_at(b.raw, b.shift, 1) for b in blocks] == [0] * (len(blocks) - 1) + [1]


def _inflates_alone(block: Block, before: bytes) -> bool:
    """The block's bits, made a final block, inflate to its data given the 32 KiB before
    it: the bit range is exactly the block's. A stored block's padding depends on where it
    lies: its bytes are read as the format lays them out instead."""
    if block.kind == 0:
        length = len(block.data).to_bytes(2, "little")
        body = length + bytes(b ^ 0xFF for b in length) + block.data
        return block.raw[(block.shift + 3 + 7) // 8 :] == body and (
            block.shift + block.bits == 8 * len(block.raw)
        )
    bits = _bits_at(block.raw, block.shift, block.bits) | 1
    alone = bits.to_bytes((block.bits + 7) // 8, "little")
    inflater = zlib.decompressobj(-15, zdict=before[-WINDOW:])
    return inflater.decompress(alone) == block.data and inflater.eof and not inflater.unused_data


def _split(blocks: list[Block], streams: list[bytes]) -> Iterator[list[Block]]:
    """The blocks of each deflate stream of `streams`, one after the other."""
    at = 0
    for deflated in streams:
        mine, bits = [], 0
        while (bits + 7) // 8 < len(deflated):
            mine.append(blocks[at])
            bits += blocks[at].bits
            at += 1
        yield mine
    assert at == len(blocks)


@pytest.mark.parametrize("level", [0, 1, 6, 9])
@pytest.mark.parametrize("mem_level", [1, 8])
def test_blocks_are_the_members_deflate_stream_cut_at_block_boundaries(
    level: int, mem_level: int
) -> None:
    data = _text(150_000) + random.Random(2).randbytes(40_000) + _text(30_000, seed=3)
    deflated = _deflate(data, level, mem_level=mem_level)
    gz = _member(data, deflated)
    assert gzip.decompress(gz) == data
    reader = GzipBlocks([gz], label="base")
    blocks = list(reader)
    assert len(blocks) >= 3
    assert reader.size == len(data)
    assert b"".join(b.data for b in blocks) == data
    _check_stream(blocks, deflated, data, 0)
    kinds = {b.kind for b in blocks}
    if level == 0:
        assert kinds == {0}
    else:
        assert 2 in kinds


def test_sync_flushes_give_empty_stored_blocks_at_byte_boundaries() -> None:
    data = _text(60_000)
    deflated = _deflate(data, 6, flush_every=7_000)
    blocks = _blocks(_member(data, deflated))
    _check_stream(blocks, deflated, data, 0)
    flushes = [b for b in blocks if not b.data and b.kind == 0]
    assert len(flushes) == len(range(0, len(data), 7_000))
    assert all((b.shift + b.bits) % 8 == 0 for b in flushes)


def test_a_tiny_stream_is_one_fixed_code_block() -> None:
    blocks = _blocks(gzip.compress(b"a", mtime=0))
    assert [(b.kind, b.data, b.shift, b.start) for b in blocks] == [(1, b"a", 0, 0)]
    (empty,) = _blocks(gzip.compress(b"", mtime=0))
    assert (empty.kind, empty.data, empty.bits) == (1, b"", 10)


def test_python_gzip_at_each_level_inflates_to_what_gzip_decompress_gives() -> None:
    data = _text(100_000, seed=5)
    for level in range(10):
        gz = gzip.compress(data, compresslevel=level, mtime=0)
        blocks = _blocks(gz)
        assert b"".join(b.data for b in blocks) == gzip.decompress(gz) == data
        _check_stream(blocks, gz[10:-8], data, 0)


def _members() -> list[tuple[bytes, bytes, bytes]]:
    """(data, deflate stream, member) of several kinds, one after the other."""
    pieces = [_text(40_000, seed=7), b"", random.Random(8).randbytes(70_000), _text(9_000)]
    levels = [6, 9, 0, 1]
    out = []
    for data, level in zip(pieces, levels, strict=True):
        deflated = _deflate(data, level, mem_level=2)
        out.append((data, deflated, _member(data, deflated)))
    return out


def test_every_member_of_a_multi_member_stream_is_read_with_its_own_start() -> None:
    members = _members()
    gz = b"".join(m for _, _, m in members)
    whole = b"".join(d for d, _, _ in members)
    assert gzip.decompress(gz) == whole
    reader = GzipBlocks([gz], label="base")
    blocks = list(reader)
    assert reader.size == len(whole)
    assert b"".join(b.data for b in blocks) == whole
    start = 0
    streams = [deflated for _, deflated, _ in members]
    for (data, deflated, _), mine in zip(members, _split(blocks, streams), strict=True):
        _check_stream(mine, deflated, data, start)
        start += len(data)
    assert sorted({b.member_start for b in blocks}) == [0, 40_000, 110_000]


def _header(flags: int, extra: bytes = b"", name: bytes = b"", comment: bytes = b"") -> bytes:
    header = b"\x1f\x8b\x08" + bytes([flags]) + b"\x01\x02\x03\x04\x02\x03"
    if flags & 4:
        header += struct.pack("<H", len(extra)) + extra
    if flags & 8:
        header += name + b"\0"
    if flags & 16:
        header += comment + b"\0"
    if flags & 2:
        header += struct.pack("<H", zlib.crc32(header) & 0xFFFF)
    return header


HEADERS = {
    "name": _header(8, name=b"site.tar"),
    "extra": _header(4, extra=b"AB\x04\x00\x00\x1f\x8b\x08"),
    "empty extra": _header(4),
    "comment": _header(16, comment=b"made by hand"),
    "header crc": _header(2),
    "all": _header(2 | 4 | 8 | 16, extra=b"xy\x00\x00", name=b"n\xe9", comment=b"c"),
}


@pytest.mark.parametrize("header", HEADERS.values(), ids=HEADERS.keys())
def test_optional_header_fields_are_skipped(header: bytes) -> None:
    data = _text(50_000)
    deflated = _deflate(data, 6, mem_level=2)
    gz = _member(data, deflated, header) + _member(data, deflated, header)
    assert gzip.decompress(gz) == data * 2
    blocks = _blocks(gz)
    _check_stream([b for b in blocks if b.member_start == 0], deflated, data, 0)
    _check_stream([b for b in blocks if b.member_start > 0], deflated, data, len(data))
    assert _blocks(gz, chunk=1) == blocks


@pytest.mark.parametrize("chunk", [1, 2, 511, 4096])
def test_chunks_of_any_size_give_the_same_blocks(chunk: int) -> None:
    members = _members()
    gz = b"".join(m for _, _, m in members)
    assert _blocks(gz, chunk=chunk) == _blocks(gz)


def test_empty_chunks_are_skipped() -> None:
    gz = _member(_text(5_000), _deflate(_text(5_000), 6))

    def chunks() -> Iterator[bytes]:
        for byte in gz:
            yield b""
            yield bytes([byte])
        yield b""

    assert list(GzipBlocks(chunks(), label="base")) == _blocks(gz)


def _flip(data: bytes, at: int) -> bytes:
    return data[:at] + bytes([data[at] ^ 0xFF]) + data[at + 1 :]


_DATA = _text(30_000)
_GZ = _member(_DATA, _deflate(_DATA, 6, mem_level=2))
_REFUSED = {
    "empty": (b"", "base: not a gzip stream"),
    "zlib stream": (zlib.compress(_DATA), "base: not a gzip stream"),
    "plain text": (b"<html>hello</html>", "base: not a gzip stream"),
    "deflate method 7": (b"\x1f\x8b\x07" + _GZ[3:], "base: not a gzip stream"),
    "header cut": (_GZ[:6], "base: the gzip stream ends inside a header"),
    "name cut": (_header(8, name=b"never ends")[:-1], "base: the gzip stream ends inside a header"),
    "extra cut": (_header(4, extra=b"1234")[:-2], "base: the gzip stream ends inside a header"),
    "header only": (_GZ[:10], "base: the deflate stream ends before its final block"),
    "cut mid-block": (_GZ[: len(_GZ) // 2], "base: the deflate stream ends before its final block"),
    "cut in trailer": (_GZ[:-3], "base: the gzip stream ends inside a trailer"),
    "no trailer": (_GZ[:-8], "base: the gzip stream ends inside a trailer"),
    "wrong crc": (_flip(_GZ, len(_GZ) - 8), "base: a gzip member's CRC-32 or length is wrong"),
    "wrong length": (_flip(_GZ, len(_GZ) - 1), "base: a gzip member's CRC-32 or length is wrong"),
    "garbage after": (_GZ + b"junk", "base: not a gzip stream"),
    "zeros, then garbage": (_GZ + b"\0" * 16 + b"\x1f", "base: not a gzip stream"),
    "bad block type": (_GZ[:10] + b"\x07" + _GZ[11:], "base: not a deflate stream"),
    "second member cut": (_GZ + _GZ[:40], "base: the deflate stream ends before its final"),
}


@pytest.mark.parametrize(("gz", "message"), _REFUSED.values(), ids=_REFUSED.keys())
def test_a_stream_that_is_not_well_formed_gzip_is_refused_in_one_line(
    gz: bytes, message: str
) -> None:
    for chunk in (None, 1):
        with pytest.raises(IntegrityError) as refused:
            _blocks(gz, chunk)
        assert refused.value.message.startswith(message)
        assert "\n" not in str(refused.value)


def test_zero_padding_after_a_member_is_skipped_as_gzip_readers_do() -> None:
    """Tape-blocked writers pad a .tar.gz with zeros; Python's gzip (which checked the
    bundle when it was stored) and GNU gzip read past them."""
    padded = _GZ + b"\0" * 10_000 + _GZ + b"\0"
    assert gzip.decompress(padded) == _DATA * 2
    for chunk in (None, 1, 4096):
        blocks = _blocks(padded, chunk)
        assert b"".join(b.data for b in blocks) == _DATA * 2
        assert {b.member_start for b in blocks} == {0, len(_DATA)}


def test_damaged_deflate_data_is_refused_or_caught_by_the_crc() -> None:
    """Flipping any byte of the deflate stream never passes silently."""
    rng = random.Random(11)
    for at in rng.sample(range(10, len(_GZ) - 8), 60):
        with pytest.raises(IntegrityError, match=r"^base: (not a deflate|a gzip member|the defl)"):
            _blocks(_flip(_GZ, at))


def test_raw_blocks_reads_one_deflate_stream_in_memory() -> None:
    data = _text(80_000)
    deflated = _deflate(data, 9, mem_level=1)
    blocks = raw_blocks(deflated)
    _check_stream(blocks, deflated, data, 0)
    with pytest.raises(IntegrityError, match="goes on after its final block"):
        raw_blocks(deflated + b"\0")
    with pytest.raises(IntegrityError, match="ends before its final block"):
        raw_blocks(deflated[:-10])


@pytest.mark.parametrize(("level", "mem_level"), [(0, 8), (1, 1), (6, 8), (9, 1)])
def test_final_block_is_where_raw_blocks_puts_the_last_block(level: int, mem_level: int) -> None:
    """`final_block` finds the final block's bits without keeping what the stream inflates
    to, and refuses what `raw_blocks` refuses."""
    data = _text(300_000)
    deflated = _deflate(data, level, mem_level=mem_level)
    blocks = raw_blocks(deflated)
    end = sum(block.bits for block in blocks)
    assert len(blocks) > 1
    assert final_block(deflated) == (end - blocks[-1].bits, end)
    with pytest.raises(IntegrityError, match="goes on after its final block"):
        final_block(deflated + b"\0")
    with pytest.raises(IntegrityError, match="ends before its final block"):
        final_block(deflated[:-10])


def test_a_zlib_ng_library_that_cannot_be_loaded_is_one_config_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A zlib-ng wheel whose library does not load (or does not export `zng_*`) is refused in
    one line naming the remedy (exit 2), not an unexpected ctypes error. The loader is
    replaced here because no such broken wheel can be installed beside the locked one."""
    import ctypes

    from mirror.errors import ConfigError
    from mirror.transferset.delta import _inflate as inflate

    def unloadable(name: str, *args: object, **kwargs: object) -> ctypes.CDLL:
        raise OSError(f"{name}: cannot open shared object file")

    inflate._libz.cache_clear()
    monkeypatch.setattr(ctypes, "CDLL", unloadable)
    try:
        with pytest.raises(ConfigError, match="zlib-ng") as raised:
            list(GzipBlocks([gzip.compress(b"x" * 1000)], label="base"))
        assert raised.value.exit_code == 2 and "requirements.lock" in (raised.value.hint or "")
    finally:
        inflate._libz.cache_clear()
