"""Empty deflate blocks that move a deflate stream's bit position.

A spliced archive (`transferset/delta/_splice.py`) copies a base's compressed blocks as bytes: a
block that began at bit `s` of a byte in the base is copied byte for byte only where the
output stands at bit `s` of a byte too. Between blocks, the output is moved there by empty,
non-final blocks, which every inflater reads as nothing (RFC 1951 section 3.2.3):

- a fixed-code block holding only its end-of-block code is 10 bits;
- a dynamic-code block holding only its end-of-block code, with complete Huffman codes
  (two code lengths of 1, or four of 2, for the literal/length and the distance codes), is
  91, 94, 95 or 97 bits, by which code lengths it names and how many code-length code
  lengths it transmits.

Promises: `padding(held, wanted)` is the shortest sequence built of those blocks whose
length in bits is congruent to `wanted - held` modulo 8, as (value, bit count) in deflate's
bit order; zero bits when they are equal. Pure; the same bits every time.
"""

from __future__ import annotations

from functools import cache

_CODE_LENGTH_ORDER = (16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1, 15)
_FIXED_EMPTY = (0b010, 10)  # BFINAL 0, BTYPE 01, then code 256: seven zero bits


class _Bits:
    def __init__(self) -> None:
        self.value = 0
        self.count = 0

    def put(self, value: int, count: int) -> None:
        self.value |= value << self.count
        self.count += count


def _dynamic_empty(length: int, cl_entries: int) -> tuple[int, int]:
    """An empty non-final dynamic block whose literal/length code gives symbols 257 - n ..
    256 and whose distance code gives n symbols, all of code length `length` (n = 2 for 1,
    4 for 2: complete codes); its code-length code has two symbols of length 1 (`length`
    itself and 18, a run of 11-138 zeros), transmitted in `cl_entries` entries."""
    used = 2 if length == 1 else 4
    bits = _Bits()
    bits.put(0b100, 3)  # BFINAL 0, BTYPE 10
    bits.put(0, 5)  # HLIT: 257 literal/length codes
    bits.put(used - 1, 5)  # HDIST
    bits.put(cl_entries - 4, 4)  # HCLEN
    for symbol in _CODE_LENGTH_ORDER[:cl_entries]:
        bits.put(1 if symbol in (length, 18) else 0, 3)
    # canonical codes of two 1-bit symbols: the smaller (`length`) is 0, 18 is 1
    zeros = 257 - used
    for run in (138, zeros - 138):
        bits.put(1, 1)
        bits.put(run - 11, 7)
    for _ in range(2 * used):
        bits.put(0, 1)
    bits.put((1 << length) - 1, length)  # code 256, the last of its length: all ones
    return bits.value, bits.count


def _blocks() -> list[tuple[int, int]]:
    blocks = [_FIXED_EMPTY]
    for length, least in ((1, 18), (2, 16)):
        blocks += [_dynamic_empty(length, n) for n in range(least, 20)]
    return blocks


@cache
def _shortest() -> dict[int, tuple[int, int]]:
    """For each shift modulo 8, the shortest sequence of one or two empty blocks."""
    blocks = _blocks()
    found: dict[int, tuple[int, int]] = {0: (0, 0)}
    candidates = blocks + [
        (first[0] | second[0] << first[1], first[1] + second[1])
        for first in blocks
        for second in blocks
    ]
    candidates.append((_FIXED_EMPTY[0] * (1 | 1 << 10 | 1 << 20), 30))  # three fixed blocks
    for value, count in sorted(candidates, key=lambda c: c[1]):
        found.setdefault(count % 8, (value, count))
    assert sorted(found) == list(range(8))
    return found


def padding(held: int, wanted: int) -> tuple[int, int]:
    """Empty blocks that take a stream standing at bit `held` of a byte to bit `wanted`
    (module docstring)."""
    return _shortest()[(wanted - held) % 8]
