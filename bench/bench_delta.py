"""Versions carried as deltas (issue 13): `mirror transfer import` of a version as a delta
vs the same version as its full bundle, each into a fresh bucket already holding the base.

The site is the simulator's: half pages (8 KiB of prose each), half one large asset, stored
(MIRROR_BENCH_MIB in all); 1% of the pages change between the two exports. Also prints
the sizes (full bundle, delta blob, ratio) and the rebuild's own throughput (in process:
the rebuilt archive read to its end, nothing uploaded).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

from bench.common import RSS_HEADROOM_MIB, SIZE_MIB, MiB, Row, Side, compare, imports_rss_mib
from bench.setting import CREDENTIALS, Setting, mirror
from mirror.sim.site import SiteSpec, build_bundle
from tests.fixtures.deltasets import SetItem, delta_item, full_item, unpack, write_set

DOMAIN = "docs.bench.test"
PAGE = 8192
V1, V2 = "2026-11-21", "2026-11-22"
T1, T2 = "2026-11-21T03:00:00Z", "2026-11-22T03:00:00Z"


def _site(work: Path, export_number: int) -> Path:
    pages = max(SIZE_MIB * MiB // 2 // PAGE, 100)
    spec = SiteSpec(
        DOMAIN,
        export_number=export_number,
        pages=pages,
        page_size=PAGE,
        changes_per_export=max(pages // 100, 1),
        bundle_size=SIZE_MIB * MiB,
    )
    return build_bundle(spec, work / f"site-{export_number}.tar.gz").path


def _sets(s: Setting) -> tuple[Path, Path, Path, SetItem]:
    from mirror.transferset.keys import load_signing_key

    key = load_signing_key(s.keys)
    work = s.work / "delta"
    work.mkdir()
    old, new = _site(work, 0), _site(work, 1)
    old_tree, new_tree = unpack(old, work / "old"), unpack(new, work / "new")
    base = work / "set-1"
    first = write_set(base, [full_item(DOMAIN, V1, old, T1)], key, part_limit=64 * MiB)
    full = work / "set-full"
    write_set(
        full,
        [full_item(DOMAIN, V2, new, T2)],
        key,
        sequence=2,
        previous=(1, first),
        part_limit=64 * MiB,
    )
    item = delta_item(DOMAIN, V2, V1, old_tree, new_tree, T2, work / "blobs")
    delta = work / "set-delta"
    write_set(delta, [item], key, sequence=2, previous=(1, first), part_limit=64 * MiB)
    shutil.rmtree(old_tree)
    shutil.rmtree(new_tree)
    return base, full, delta, item


def _rebuild_throughput(s: Setting, base: Path, delta: Path, item: SetItem) -> float:
    """MiB/s of the rebuild alone: the base imported, the archive read to its end."""
    from mirror.airgap.importer import import_set
    from mirror.airgap.objectstore import ObjectStore, make_s3_client
    from mirror.airgap.rebuild import RebuiltArchive
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
        (manifest_item,) = parse_manifest((delta / "manifest.json").read_bytes()).items
        started = time.monotonic()
        total = 0
        with RebuiltArchive(delta, manifest_item, store, work_dir=s.work) as archive:
            while chunk := archive.read(8 * MiB):
                total += len(chunk)
        seconds = time.monotonic() - started
        assert item.delta is not None and total == item.delta.archive_size
        return total / MiB / seconds
    finally:
        s.drop_bucket(bucket)


def run(s: Setting) -> list[Row]:
    os.environ.update(CREDENTIALS)  # for the in-process rebuild's S3 client
    base, full, delta, item = _sets(s)
    assert item.delta is not None
    full_size = sum(p.stat().st_size for p in (full / "blobs").iterdir())
    print(
        f"  sizes: full bundle {full_size / MiB:.1f} MiB, delta blob {item.blob.size / MiB:.2f} "
        f"MiB ({100 * item.blob.size / full_size:.2f}% of the bundle), rebuilt archive "
        f"{item.delta.archive_size / MiB:.1f} MiB, {item.delta.carried_files} of "
        f"{item.delta.file_count} files carried",
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
                item.delta.archive_size,
                rss_budget_mib=budget,
            ),
            Side("delta", lambda: importing(delta), before=with_base, after=drop, env=s.env),
            Side("full", lambda: importing(full), before=with_base, after=drop, env=s.env),
        )
    ]
