"""Versions carried as deltas (issue 13): `mirror transfer import` of a version as a delta
vs the same version as its full bundle, each into a fresh bucket already holding the base.

The site is the simulator's realistic one (HTML pages of 5-60 KiB, CSS/JS, incompressible
images; MIRROR_BENCH_MIB unpacked in all); 1% of the pages change between the two exports,
and the sets are made by `transfer pack`. Also prints the sizes (full bundle, delta blob,
ratio), the delta pack's time (median of ROUNDS packs after a warm-up) and the rebuild's
own throughput (in process: the rebuilt archive read to its end, nothing uploaded).
"""

from __future__ import annotations

import os
import resource
import shutil
import statistics
import subprocess
import time
from pathlib import Path

from bench.common import (
    ROUNDS,
    RSS_HEADROOM_MIB,
    SIZE_MIB,
    MiB,
    Row,
    Side,
    compare,
    imports_rss_mib,
)
from bench.setting import CREDENTIALS, Setting, mirror
from mirror.transferset.format import ManifestItem
from tests.fixtures.versions import add_sim_version

DOMAIN = "docs.bench.test"
V1, V2 = "2026-11-21", "2026-11-22"


def _sets(s: Setting) -> tuple[Path, Path, Path, ManifestItem]:
    """Two exports of a realistic simulator site (HTML, CSS/JS, images; SIZE_MIB in all) with
    1% of the pages changed between them, packed by `transfer pack` itself: the first whole,
    the second once whole (--full) and once as a delta, both following the first set."""
    from mirror.config import settings_from_dict
    from mirror.outbound.pack import Selection, pack
    from mirror.outbound.records import forget_set
    from mirror.store.app import App
    from mirror.transferset.format import parse_manifest

    work = s.work / "delta"
    work.mkdir()
    settings = settings_from_dict(
        {
            "store": {"path": str(work / "store")},
            "transfer": {"signing_key": str(s.keys), "max_size": "64MiB"},
        }
    )
    app = App(settings)
    try:
        site = {"site_size": SIZE_MIB * MiB, "change_share": 0.01}
        add_sim_version(app, DOMAIN, V1, export_number=0, **site)
        base = work / "set-1"
        pack(app, base)
        add_sim_version(app, DOMAIN, V2, export_number=1, **site)
        full = work / "set-full"
        pack(app, full, Selection(full=True))
        forget_set(app, "default", 2)
        delta = work / "set-delta"
        walls, cpus = [], []
        for round_ in range(ROUNDS + 1):  # a warm-up, then the rounds; the last set is kept
            if round_:
                forget_set(app, "default", 2)
                shutil.rmtree(delta)
            started, cpu = time.monotonic(), _cpu_seconds()
            pack(app, delta)
            walls.append(time.monotonic() - started)
            cpus.append(_cpu_seconds() - cpu)
        print(
            f"  delta pack: median {statistics.median(walls[1:]):.2f} s of {ROUNDS} rounds "
            f"after a warm-up ({min(walls[1:]):.2f}-{max(walls[1:]):.2f} s; "
            f"{statistics.median(cpus[1:]):.2f} s CPU, its compressing processes included)",
            flush=True,
        )
    finally:
        app.close()
    (item,) = parse_manifest((delta / "manifest.json").read_bytes()).items
    return base, full, delta, item


def _cpu_seconds() -> float:
    """CPU seconds of this process and of its children that ended."""
    own, children = (
        resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
    )
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _rebuild_throughput(s: Setting, base: Path, delta: Path, item: ManifestItem) -> float:
    """MiB/s of the rebuild alone: the base imported, the archive read to its end."""
    from mirror.airgap.importer import import_set
    from mirror.airgap.publish import open_published
    from mirror.airgap.s3.objectstore import ObjectStore, make_s3_client
    from mirror.config import TargetSettings
    from mirror.transferset.format import parse_manifest
    from mirror.transferset.keys import load_trusted_keys

    bucket = s.new_bucket()
    try:
        target = TargetSettings(endpoint_url=s.s3_url, bucket=bucket, region="us-east-1")
        store = ObjectStore(make_s3_client(target), bucket, target.prefix)
        copy = s.work / "base-copy"
        shutil.copytree(base, copy)
        import_set(store, copy, load_trusted_keys([s.pub]))
        delta_manifest = parse_manifest((delta / "manifest.json").read_bytes())
        (manifest_item,) = delta_manifest.items
        started = time.monotonic()
        total = 0
        with open_published(
            delta, manifest_item, store, sequence=delta_manifest.sequence, work_dir=s.work
        ) as archive:
            while chunk := archive.read(8 * MiB):
                total += len(chunk)
        seconds = time.monotonic() - started
        assert item.delta is not None and total == (item.delta.archive_size or total)
        return total / MiB / seconds
    finally:
        s.drop_bucket(bucket)


def run(s: Setting) -> list[Row]:
    os.environ.update(CREDENTIALS)  # for the in-process rebuild's S3 client
    base, full, delta, item = _sets(s)
    assert item.delta is not None
    full_size = sum(p.stat().st_size for p in (full / "blobs").iterdir())
    # A spliced delta names no archive size (learnt at import): about the vendor's bundle's.
    archive_size = item.delta.archive_size or full_size
    archive = (
        "spliced archive"
        if item.delta.spliced
        else f"rebuilt archive {archive_size / MiB:.1f} MiB "
        f"({archive_size / full_size:.2f}x the vendor's bundle)"
    )
    print(
        f"  sizes: full bundle {full_size / MiB:.1f} MiB, delta blob {item.size / MiB:.2f} "
        f"MiB ({100 * item.size / full_size:.2f}% of the bundle), {archive}, "
        f"{item.delta.carried_files} of {item.delta.file_count} files carried",
        flush=True,
    )
    print(f"  rebuild alone: {_rebuild_throughput(s, base, delta, item):.0f} MiB/s", flush=True)
    buckets: list[str] = []

    def with_base() -> None:
        buckets.append(s.new_bucket())
        copy = s.work / "base-run"
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(base, copy)
        config = s.config("import-base", s.work / "unused-store", buckets[-1])
        done = subprocess.run(
            mirror(config, "transfer", "import", str(copy)), env=s.env, capture_output=True
        )
        assert done.returncode == 0, done.stderr

    def importing(set_dir: Path) -> list[str]:
        copy = s.work / f"run-{set_dir.name}"
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(set_dir, copy)
        config = s.config("import", s.work / "unused-store", buckets[-1])
        return mirror(config, "transfer", "import", str(copy))

    def drop() -> None:
        s.drop_bucket(buckets.pop())

    with_base()
    budget = (
        imports_rss_mib(
            [
                "--config",
                str(s.config("import", s.work / "unused-store", buckets[-1])),
                "transfer",
                "import",
                str(delta),
            ],
            s.work,
            s.env,
        )
        + RSS_HEADROOM_MIB
    )
    drop()
    return [
        compare(
            Row(
                "transfer import of a version (1% of pages changed)",
                "mirror transfer import DELTA-SET",
                "mirror transfer import FULL-SET",
                archive_size,
                rss_budget_mib=budget,
            ),
            Side("delta", lambda: importing(delta), before=with_base, after=drop, env=s.env),
            Side("full", lambda: importing(full), before=with_base, after=drop, env=s.env),
        )
    ]
