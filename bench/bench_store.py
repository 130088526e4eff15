"""`mirror store verify` (every blob re-hashed against the index, on every core) vs
`openssl dgst -sha256` over the same blobs, one after the other: BLOBS blobs of
MIRROR_BENCH_MIB each, so the hashing, not the start-up, is what is compared."""

from __future__ import annotations

from bench.common import RSS_HEADROOM_MIB, SIZE_MIB, MiB, Row, Side, compare, imports_rss_mib
from bench.setting import Setting, fill_store, mirror

BLOBS = 4


def run(s: Setting) -> list[Row]:
    store = s.work / "verify-store"
    blobs = fill_store(store, [SIZE_MIB * MiB + n for n in range(BLOBS)])
    config = s.config("verify", store)
    args = ["store", "verify"]
    budget = imports_rss_mib(["--config", str(config), *args], s.work, s.env) + RSS_HEADROOM_MIB
    row = Row(
        f"store verify ({BLOBS} blobs)",
        "mirror store verify",
        "openssl dgst -sha256 BLOBS",
        sum(b.stat().st_size for b in blobs),
        target=">= 1.9x",
        rss_budget_mib=budget,
    )
    compare(
        row,
        Side("mirror", lambda: mirror(config, *args), env=s.env),
        Side("openssl", lambda: ["openssl", "dgst", "-sha256", *map(str, blobs)], env=s.env),
    )
    return [row]
