"""Memory flat in the file count (issue 21, item 4): a site of 200,000 small files.

`python -m bench manyfiles` (MIRROR_BENCH_FILES, default 199,000: the archive limit is
200,000 members). Two exports of a site of small pages (200 to a folder, no directory
members; 1% of them changed between the two) are stored; then, each in its own process,
measured with the harness's `run_once` (peak RSS of the process tree, sampled from /proc,
and wall time; CPU seconds from the child's getrusage):

- export inspection: `inspect_archive` of the second bundle with the completeness scanner
  observing, as an export run checks a download;
- delta pack: `transfer pack` of the second version against the first (already packed);
- rebuild: `transfer import` of that delta set into a bucket holding the first version
  (needs the S3 server of `scripts/with-test-servers`).

Each is set against the peak RSS of an interpreter that only imports what it imported
(`imports_rss_mib`): the goal is at most 64 MiB above that.

MIRROR_BENCH_STAGES picks the steps (default `inspect,pack,rebuild`); `inspect` alone
inspects the second export's bundle as generated, without storing the two exports first
(the same bytes the store would hold: minutes less).
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable
from pathlib import Path
from random import Random

from bench.common import bench_env, imports_rss_mib, machine, run_once
from bench.setting import CREDENTIALS, Setting, mirror, setting

FILES = int(os.environ.get("MIRROR_BENCH_FILES", "199000"))
GOAL_MIB = 64
STAGES = os.environ.get("MIRROR_BENCH_STAGES", "inspect,pack,rebuild").split(",")
DOMAIN = "docs.many.test"

_CPU = """
import os, resource, runpy, sys
try:
    {body}
finally:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    with open(os.environ["BENCH_CPU_FILE"], "w") as out:
        out.write(f"{{usage.ru_utime + usage.ru_stime:.2f}}")
"""

INSPECT = """
from pathlib import Path
from mirror.archive import inspect_archive
from mirror.archive.completeness import SiteScanner
import sys
report = inspect_archive(Path(sys.argv[1]), observe=SiteScanner)
assert report.file_count > 0
"""

IMPORT = """
import runpy, sys
sys.argv = ["mirror", *sys.argv[1:]]
try:
    runpy.run_module("mirror", run_name="__main__")
except SystemExit as exc:
    if exc.code:
        raise
"""

PACK = """
import sys
from pathlib import Path
from mirror.config import settings_from_dict
from mirror.outbound.pack import pack
from mirror.store.app import App
settings = settings_from_dict(
    {"store": {"path": sys.argv[1]}, "transfer": {"signing_key": sys.argv[2], "max_size": "1GiB"}}
)
app = App(settings)
try:
    result = pack(app, Path(sys.argv[3]))
finally:
    app.close()
"""


def _site(path: Path, version: int) -> Path:
    """A tar.gz of FILES small pages (no directory members, 200 to a folder; each with 512
    hex digits of one of 4096 random tokens, so the bundle is larger than a delta's file
    list and the pack chooses the delta); version 2 changes every hundredth page."""
    random = Random(21)
    tokens = [random.randbytes(256).hex() for _ in range(4096)]
    with tarfile.open(path, "w:gz", compresslevel=6) as tar:
        for n in range(FILES):
            changed = version if n % 100 == 7 else 1
            body = (
                f"<html><head><title>Page {n}</title></head><body><h1>Page {n} of "
                f"section {n // 200}</h1><p>Revision {changed}. {tokens[n % 4096]} "
                + "Lorem ipsum dolor sit amet. "
                * (n % 7 + 1)
                + f'<a href="../section-{(n + 1) // 200:04d}/page-{n + 1:06d}.html">next</a>'
                "</p></body></html>"
            ).encode()
            info = tarfile.TarInfo(f"section-{n // 200:04d}/page-{n:06d}.html")
            info.size, info.mtime, info.mode = len(body), 1_700_000_000, 0o644
            tar.addfile(info, io.BytesIO(body))
    return path


def _stored(work: Path, keys: Path) -> tuple[Path, Path]:
    """A store holding the two versions, the first packed whole; (store, bundle of v2)."""
    from mirror.config import settings_from_dict
    from mirror.outbound.pack import pack
    from mirror.store.app import App
    from mirror.store.models import Version
    from tests.fixtures.versions import store_archive

    settings = settings_from_dict(
        {
            "store": {"path": str(work / "store")},
            "transfer": {"signing_key": str(keys), "max_size": "1GiB"},
        }
    )
    app = App(settings)
    try:
        started = time.monotonic()
        store_archive(app, DOMAIN, "2026-11-21", _site(work / "v1.tar.gz", 1))
        pack(app, work / "set-1")
        store_archive(app, DOMAIN, "2026-11-22", _site(work / "v2.tar.gz", 2))
        print(f"  two exports of {FILES} files stored in {time.monotonic() - started:.0f} s")
        with app.db.session() as session:
            second = session.query(Version).filter_by(label="2026-11-22").one()
            bundle = app.store.open(second.bundle_sha256)
    finally:
        app.close()
    return work / "store", bundle


def _measure(
    name: str,
    code: str,
    args: list[str],
    work: Path,
    env: dict[str, str],
    base: float | None = None,
    reset: Callable[[], None] | None = None,
) -> None:
    """One run of `code` with `args` in a fresh interpreter: wall, CPU and peak RSS, against
    `base` (the imports' peak RSS; found by running it once when not given)."""
    body = code.strip().replace("\n", "\n    ")
    if base is None:
        base = imports_rss_mib(args, work, env, code=code)
    if reset is not None:
        reset()
    cpu_file = work / "cpu"
    argv = [sys.executable, "-c", _CPU.format(body=body), *args]
    run = run_once(argv, {**env, "BENCH_CPU_FILE": str(cpu_file)})
    above = run.peak_rss_mib - base
    verdict = "met" if above <= GOAL_MIB else "missed"
    print(
        f"  {name}: {run.seconds:.1f} s wall, {cpu_file.read_text()} s CPU, peak RSS "
        f"{run.peak_rss_mib:.0f} MiB, imports {base:.0f} MiB, {above:.0f} MiB above "
        f"(goal {GOAL_MIB}: {verdict})",
        flush=True,
    )


def _forget_set(store: Path, keys: Path, out: Path) -> None:
    """Undo the pack of the second set (its record and its directory), to pack it again."""
    from mirror.config import settings_from_dict
    from mirror.outbound.records import forget_set
    from mirror.sites import DEFAULT_SITE
    from mirror.store.app import App

    settings = settings_from_dict(
        {"store": {"path": str(store)}, "transfer": {"signing_key": str(keys)}}
    )
    app = App(settings)
    try:
        forget_set(app, DEFAULT_SITE, 2)
    finally:
        app.close()
    shutil.rmtree(out)


def main() -> None:
    print(machine(), flush=True)
    with setting() as s:
        env = bench_env(**CREDENTIALS)
        work = s.work / "manyfiles"
        work.mkdir()
        if STAGES == ["inspect"]:
            bundle = _site(work / "v2.tar.gz", 2)
            _measure("export inspection", INSPECT, [str(bundle)], work, env)
            return
        store, bundle = _stored(work, s.keys)
        if "inspect" in STAGES:
            _measure("export inspection", INSPECT, [str(bundle)], work, env)
        out = work / "set-2"
        pack_args = [str(store), str(s.keys), str(out)]
        if "pack" in STAGES:
            reset = lambda: _forget_set(store, s.keys, out)  # noqa: E731
            _measure("delta pack", PACK, pack_args, work, env, reset=reset)
        else:
            subprocess.run([sys.executable, "-c", PACK, *pack_args], env=env, check=True)
        from mirror.transferset.format import parse_manifest

        (item,) = parse_manifest((out / "manifest.json").read_bytes()).items
        assert item.delta is not None, "the second version went whole: nothing to rebuild"
        print(f"  delta blob {item.size / 2**20:.1f} MiB, {item.delta.carried_files} carried")
        if "rebuild" in STAGES:
            _measure_import(s, work, out)


def _measure_import(s: Setting, work: Path, delta: Path) -> None:
    """The rebuild: the delta set imported into a bucket that holds the first version (its
    import measured once for the imports' baseline, once for the numbers)."""
    base: float | None = None
    for _round in ("baseline", "measured"):
        bucket = s.new_bucket()
        try:
            config = s.config("import", work / "unused-store", bucket)
            for name in ("set-1", delta.name):
                shutil.rmtree(work / f"copy-{name}", ignore_errors=True)
                shutil.copytree(work / name, work / f"copy-{name}")
            first = mirror(config, "transfer", "import", str(work / "copy-set-1"))
            subprocess.run(first, env=s.env, check=True, capture_output=True)
            args = mirror(config, "transfer", "import", str(work / f"copy-{delta.name}"))[3:]
            if base is None:
                base = imports_rss_mib(args, work, s.env, code=IMPORT)
                continue
            _measure("rebuild (transfer import of the delta)", IMPORT, args, work, s.env, base)
        finally:
            s.drop_bucket(bucket)
