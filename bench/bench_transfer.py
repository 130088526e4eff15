"""Transfer sets: `mirror transfer pack` vs `cp`, `mirror transfer verify` vs
`openssl dgst -sha256` over the set's parts, one process per core (`xargs -P $(nproc)`),
and `mirror transfer import` vs `aws s3 cp` of the bundle to the same S3 server (a fresh
bucket every run)."""

from __future__ import annotations

import os
import shutil

from bench.bench_store import parallel_openssl
from bench.common import RSS_HEADROOM_MIB, SIZE_MIB, MiB, Row, Side, compare, imports_rss_mib, tool
from bench.setting import Setting, fill_store, mirror

PART = "64MiB"


def run(s: Setting) -> list[Row]:
    store = s.work / "transfer-store"
    (blob,) = fill_store(store, [SIZE_MIB * MiB])
    size = blob.stat().st_size
    config = s.config("transfer", store)
    usb = s.work / "usb"
    usb.mkdir()
    pack_dir, copy = usb / "pack", usb / "copy.tar"

    def pack_argv() -> list[str]:
        shutil.rmtree(pack_dir, ignore_errors=True)
        return mirror(config, "transfer", "pack", str(pack_dir), "--all", "--max-size", PART)

    def budget(cfg: str, *args: str) -> float:
        return imports_rss_mib(["--config", cfg, *args], s.work, s.env) + RSS_HEADROOM_MIB

    set_dir = usb / "set"
    rows = [
        compare(
            Row(
                f"transfer pack ({PART} parts)",
                "mirror transfer pack",
                "cp FILE",
                size,
                rss_budget_mib=budget(
                    str(config), "transfer", "pack", str(set_dir), "--all", "--max-size", PART
                ),
            ),
            Side("mirror", pack_argv, after=lambda: shutil.rmtree(pack_dir), env=s.env),
            Side("cp", lambda: ["cp", str(blob), str(copy)], after=copy.unlink, env=s.env),
        )
    ]
    parts = sorted(str(p) for p in (set_dir / "blobs").iterdir())
    cores = len(os.sched_getaffinity(0))
    rows.append(
        compare(
            Row(
                "transfer verify",
                "mirror transfer verify",
                f"xargs -P {cores} -n 1 openssl dgst -sha256 PARTS",
                size,
                target=">= 0.95x",
                rss_budget_mib=budget(str(config), "transfer", "verify", str(set_dir)),
            ),
            Side("mirror", lambda: mirror(config, "transfer", "verify", str(set_dir)), env=s.env),
            Side("openssl", lambda: parallel_openssl(parts, 1, s.work / "parts.txt"), env=s.env),
        )
    )
    buckets: list[str] = []

    def import_argv() -> list[str]:
        buckets.append(s.new_bucket())
        target = s.config("import", store, buckets[-1])
        return mirror(target, "transfer", "import", str(set_dir))

    def aws_argv() -> list[str]:
        buckets.append(s.new_bucket())
        return [
            tool("aws"),
            "s3",
            "cp",
            "--only-show-errors",
            "--endpoint-url",
            s.s3_url,
            str(blob),
            f"s3://{buckets[-1]}/bundle.tar",
        ]

    def drop() -> None:
        s.drop_bucket(buckets.pop())

    bucket = s.new_bucket()
    import_budget = budget(
        str(s.config("import", store, bucket)), "transfer", "import", str(set_dir)
    )
    s.drop_bucket(bucket)
    rows.append(
        compare(
            Row(
                "transfer import",
                "mirror transfer import",
                "aws s3 cp FILE",
                size,
                target=">= 1.2x (was 0.87x)",
                rss_budget_mib=import_budget,
            ),
            Side("mirror", import_argv, after=drop, env=s.env),
            Side("aws", aws_argv, after=drop, env=s.env),
        )
    )
    return rows
