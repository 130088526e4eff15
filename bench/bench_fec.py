"""Forward error correction for the one-way link (issue 23): zfec, pyeclib and raptorq.

`python -m bench.bench_fec` (or `python -m bench fec`) measures, for 1440-byte symbols
(what fits a 1500-byte MTU after IPv4 and UDP, our header and CRC, and RaptorQ's payload id):

- encode and decode throughput (MiB/s of source data) for one block size per library,
  decode with ~5% of the symbols lost (so the repair path runs, not just a copy);
- loss tolerance at ~10% redundancy: the share of blocks that cannot be decoded when
  5% of datagrams are lost at random, simulated over many blocks.

zfec and pyeclib are Reed-Solomon codes limited to 256 symbols per block, so a block is at
most ~230 data symbols; raptorq (RFC 6330, a fountain code) takes blocks of thousands of
symbols, and a wider block is what turns 10% redundancy into near-certain recovery at 5%
random loss. Libraries that are not installed are reported as such.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable

SYMBOL = 1440
MiB = 1024 * 1024
LOSS = 0.05
ROUNDS = int(os.environ.get("MIRROR_BENCH_FEC_BLOCKS", "300"))

Codec = tuple[int, int, Callable[[bytes], list[bytes]], Callable[[dict[int, bytes]], bytes | None]]


def zfec_codec(k: int, m: int) -> Codec:
    import zfec

    encoder, decoder = zfec.Encoder(k, k + m), zfec.Decoder(k, k + m)

    def encode(data: bytes) -> list[bytes]:
        source = [data[i * SYMBOL : (i + 1) * SYMBOL] for i in range(k)]
        return source + list(encoder.encode(source, list(range(k, k + m))))

    def decode(got: dict[int, bytes]) -> bytes | None:
        if len(got) < k:
            return None
        numbers = sorted(got)[:k]
        return b"".join(decoder.decode([got[n] for n in numbers], numbers))

    return k, m, encode, decode


def pyeclib_codec(k: int, m: int) -> Codec:
    from pyeclib.ec_iface import ECDriver

    driver = ECDriver(k=k, m=m, ec_type="liberasurecode_rs_vand")

    def encode(data: bytes) -> list[bytes]:
        return list(driver.encode(data))

    def decode(got: dict[int, bytes]) -> bytes | None:
        if len(got) < k:
            return None
        return bytes(driver.decode(list(got.values())))

    return k, m, encode, decode


def raptorq_codec(k: int, m: int) -> Codec:
    import raptorq

    size = k * SYMBOL + 4  # each packet carries a 4-byte payload id

    def encode(data: bytes) -> list[bytes]:
        return list(raptorq.Encoder.with_defaults(data, SYMBOL + 4).get_encoded_packets(m))

    def decode(got: dict[int, bytes]) -> bytes | None:
        decoder = raptorq.Decoder.with_defaults(size - 4, SYMBOL + 4)
        for packet in got.values():
            out = decoder.decode(packet)
            if out is not None:
                return bytes(out)
        return None

    return k, m, encode, decode


def measure(name: str, codec: Codec) -> str:
    k, m, encode, decode = codec
    rng = random.Random(7)
    data = os.urandom(k * SYMBOL)
    blocks = max(8, (64 * MiB) // len(data))
    started = time.perf_counter()
    for _ in range(blocks):
        symbols = encode(data)
    encode_s = time.perf_counter() - started
    lose = max(1, round(len(symbols) * LOSS))
    started = time.perf_counter()
    for _ in range(blocks):
        kept = dict(enumerate(symbols))
        for n in rng.sample(range(len(symbols)), lose):
            del kept[n]
        out = decode(kept)
    decode_s = time.perf_counter() - started
    assert out is not None and out[: len(data)] == data, f"{name}: decoded bytes differ"
    failed = 0
    for _ in range(ROUNDS):
        kept = {n: s for n, s in enumerate(symbols) if rng.random() >= LOSS}
        failed += decode(kept) is None
    volume = blocks * len(data) / MiB
    return (
        f"{name:8} k={k:5} m={m:4} ({100 * m / k:4.1f}%)  encode {volume / encode_s:7.1f} MiB/s"
        f"  decode {volume / decode_s:7.1f} MiB/s  blocks lost at {LOSS:.0%} random loss: "
        f"{failed}/{ROUNDS}"
    )


def main() -> None:
    candidates: list[tuple[str, Callable[[], Codec]]] = [
        ("zfec", lambda: zfec_codec(230, 23)),
        ("pyeclib", lambda: pyeclib_codec(230, 23)),
        ("raptorq", lambda: raptorq_codec(230, 23)),
        ("raptorq", lambda: raptorq_codec(1000, 90)),
        ("raptorq", lambda: raptorq_codec(2000, 170)),
    ]
    for name, make in candidates:
        try:
            codec = make()
        except ImportError as exc:
            print(f"{name:8} not installed ({exc})")
            continue
        print(measure(name, codec), flush=True)


if __name__ == "__main__":
    main()
