"""`mirror store verify` (every blob re-hashed against the index, on every core) against
the machine's limit: `openssl dgst -sha256` run as one process per core over the same blobs
(`xargs -P $(nproc)`), and on ten thousand small blobs against four large ones.

Three rows:
- four blobs of MIRROR_BENCH_MIB each vs `xargs -P NPROC -n 1 openssl dgst -sha256`;
- SMALL_BLOBS (MIRROR_BENCH_SMALL_BLOBS, default 10,000) blobs of about the same bytes in
  all (about 110 KiB each at the default 256 MiB) vs `xargs -P NPROC -n SMALL_BLOBS/NPROC
  openssl dgst -sha256`: one openssl a core, as `-n 1` would time ten thousand process
  starts (86-96 s here), not hashing;
- the small blobs vs the large ones, both `store verify`: the ratio of the times, scaled by
  their sizes (`Row.peer_size`), is the ratio per byte (above 1: small blobs verify faster
  a byte).
"""

from __future__ import annotations

import os
from pathlib import Path

from bench.common import RSS_HEADROOM_MIB, SIZE_MIB, MiB, Row, Side, compare, imports_rss_mib
from bench.setting import Setting, fill_store, mirror

BLOBS = 4
SMALL_BLOBS = int(os.environ.get("MIRROR_BENCH_SMALL_BLOBS", "10000"))


def parallel_openssl(blobs: list[str], per_process: int, listing: Path) -> list[str]:
    """`openssl dgst -sha256` over `blobs`, `per_process` a process, one process per core;
    the names go through `listing` (ten thousand are too long for one argument)."""
    listing.write_text("\n".join(blobs) + "\n")
    cores = str(len(os.sched_getaffinity(0)))
    return ["xargs", "-a", str(listing), "-P", cores, "-n", str(per_process),
            "openssl", "dgst", "-sha256"]  # fmt: skip


def run(s: Setting) -> list[Row]:
    stores = {"large": s.work / "verify-store", "small": s.work / "verify-small"}
    large = fill_store(stores["large"], [SIZE_MIB * MiB + n for n in range(BLOBS)])
    each = BLOBS * SIZE_MIB * MiB // SMALL_BLOBS
    small = fill_store(stores["small"], [each + n % 512 for n in range(SMALL_BLOBS)])
    configs = {name: s.config(f"verify-{name}", store) for name, store in stores.items()}
    args = ["store", "verify"]
    budget = imports_rss_mib(["--config", str(configs["small"]), *args], s.work, s.env)
    cores = len(os.sched_getaffinity(0))

    def verify(name: str) -> Side:
        return Side(f"mirror {name}", lambda: mirror(configs[name], *args), env=s.env)

    def openssl(blobs: list[str], per_process: int) -> Side:
        listing = s.work / f"blobs-{len(blobs)}.txt"
        return Side("openssl", lambda: parallel_openssl(blobs, per_process, listing), env=s.env)

    rows = []
    for blobs, per_process in ((large, 1), (small, -(-len(small) // cores))):
        row = Row(
            f"store verify ({len(blobs)} blobs)",
            "mirror store verify",
            f"xargs -P {cores} -n {per_process} openssl dgst -sha256",
            _bytes(blobs),
            target=">= 0.95x",
            rss_budget_mib=budget + RSS_HEADROOM_MIB,
        )
        name = "large" if blobs is large else "small"
        rows.append(compare(row, verify(name), openssl([str(b) for b in blobs], per_process)))
    row = Row(
        f"store verify, {len(small)} small blobs vs {BLOBS} large, per byte",
        "mirror store verify (small)",
        "mirror store verify (large)",
        _bytes(small),
        target=">= 1x",
        peer_size=_bytes(large),
    )
    rows.append(compare(row, verify("small"), verify("large")))
    return rows


def _bytes(blobs: list[Path]) -> int:
    return sum(blob.stat().st_size for blob in blobs)
