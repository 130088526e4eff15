"""The erasure code of a one-way link: RaptorQ (RFC 6330) per block, from the raptorq wheel.

Chosen by bench/bench_fec.py (commit message of the choice): 5-10x the throughput of
zfec and pyeclib here, and a fountain code is not capped at 256 symbols per block, so a
block of 1000 symbols recovers at 5% random loss with 9% redundancy.

Promises: `encode` returns the block's source packets then `repair` repair packets, each
the RaptorQ payload id (4 bytes) and one symbol; `BlockDecoder.add` returns the block's
bytes once enough packets of any kind arrived, and None until then.

raptorq has wheels for x86_64 Linux only (pyproject.toml's marker): elsewhere this module
still imports, and `require` (the first step of each end of the link) says in one line that
the one-way link is missing here (mirror.features), before anything is read or bound.
"""

from __future__ import annotations

import functools

from mirror import features

try:
    import raptorq
except ImportError:  # no wheel for this platform: require() says so
    raptorq = None

PAYLOAD_ID = 4


def require() -> None:
    """ConfigError (exit 2) unless the erasure code is installed here."""
    features.require(features.ONEWAY)


def encode(data: bytes, symbol_size: int, repair: int) -> list[bytes]:
    packets: list[bytes] = raptorq.Encoder.with_defaults(
        data, symbol_size + PAYLOAD_ID
    ).get_encoded_packets(repair)
    return packets


@functools.cache
def packet_size(symbol_size: int) -> int:
    """The length of every packet of a block of `symbol_size` symbols, as the encoder makes
    it (it aligns the symbol to its own rule): a packet of any other length, or of another
    source block than the first, is not one of ours and would stop the decoder (a Rust
    panic, not an exception), so the receiver drops it before (`Table.data_error`)."""
    return len(encode(b"\0", symbol_size, 0)[0])


class BlockDecoder:
    """Collects one block's packets until the block can be rebuilt."""

    def __init__(self, length: int, symbol_size: int) -> None:
        self._decoder = raptorq.Decoder.with_defaults(length, symbol_size + PAYLOAD_ID)
        self._source = -(-length // symbol_size)
        self.repair_seen = False
        """True when a repair packet was used: a source packet of the block was lost."""

    def add(self, packet: bytes) -> bytes | None:
        if int.from_bytes(packet[1:PAYLOAD_ID], "big") >= self._source:
            self.repair_seen = True
        out = self._decoder.decode(packet)
        return None if out is None else bytes(out)
