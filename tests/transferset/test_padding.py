"""Empty deflate blocks that move a stream's bit position (mirror/transferset/delta/_padding.py):
every one is read as nothing by every inflater at hand, the system's zlib, zlib-ng,
libdeflate and GNU gzip, and takes the stream exactly where it was asked to."""

from __future__ import annotations

import itertools
import struct
import subprocess
import zlib

import deflate
import pytest
from zlib_ng import zlib_ng

from mirror.transferset.delta._padding import padding

FINAL_EMPTY = (0b011, 10)  # BFINAL, fixed codes, end-of-block
PAIRS = list(itertools.product(range(8), repeat=2))


def _stream(held: int, wanted: int) -> bytes:
    """A raw deflate stream: empty blocks to bit `held`, `padding(held, wanted)`, then an
    empty final block."""
    value, count = 0, 0
    for bits, length in (padding(0, held), padding(held, wanted), FINAL_EMPTY):
        value |= bits << count
        count += length
    return value.to_bytes((count + 7) // 8, "little")


@pytest.mark.parametrize(("held", "wanted"), PAIRS)
def test_padding_ends_where_it_was_asked_and_inflates_to_nothing(held: int, wanted: int) -> None:
    value, count = padding(held, wanted)
    assert (held + count) % 8 == wanted
    assert count <= 101 and value < 1 << max(count, 1)
    stream = _stream(held, wanted)
    assert zlib.decompress(stream, -15) == b""
    assert zlib_ng.decompress(stream, -15) == b""
    assert bytes(deflate.deflate_decompress(stream, 0)) == b""


def test_each_padding_is_final_nowhere() -> None:
    """A stream of paddings alone has no final block: an inflater asks for more."""
    for held, wanted in PAIRS:
        value, count = padding(held, wanted)
        if count:
            inflater = zlib.decompressobj(-15)
            assert inflater.decompress(value.to_bytes((count + 7) // 8, "little")) == b""
            assert not inflater.eof


def test_gnu_gzip_reads_every_padding() -> None:
    member = b"".join(
        b"\x1f\x8b\x08\0\0\0\0\0\0\xff" + _stream(held, wanted) + struct.pack("<II", 0, 0)
        for held, wanted in PAIRS
    )
    done = subprocess.run(["gzip", "-dc"], input=member, capture_output=True, check=False)
    assert (done.returncode, done.stdout, done.stderr) == (0, b"", b"")
