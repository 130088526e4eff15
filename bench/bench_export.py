"""`mirror export run` end to end vs the vendor's recipe made safe, from the shell.

Both start a job on the simulator, poll it every 0.1 s, ask for the bundle and
download it; the recipe then hashes it on the way (`curl | tee | openssl dgst`),
lists it (`tar -tzf`, the archive check), syncs it and moves it into place.
mirror also checks the archive's members, hashes its tree, scans the site (pages,
broken links, missing assets: `mirror.archive.completeness`) and indexes it.

Two bundles: one large file (MIRROR_BENCH_MIB), and the simulator's realistic site of
MIRROR_BENCH_SITE_MIB (default 500: about 13,600 HTML pages of 5-60 KiB, CSS, JS and
images, gzipped). The site is packaged once (`SimConfig.reuse_bundles`: 45 s of the
vendor's work on nobody's clock) and every mirror run starts from an empty store, so each
stores a version and reports its completeness. On the site, `export run` is also set
against itself with the scan's link parsing off (`NO_LINK_SCAN`: the scan's cost), and
the scan with its page parser process (`CHILD_SCAN`, `mirror.archive.scanworker`, which
`export run` starts on machines of 3 CPUs or more) against the scan in one process.
"""

from __future__ import annotations

import os
import shutil
import sys

from bench.common import RSS_HEADROOM_MIB, SIZE_MIB, MiB, Row, Side, compare, imports_rss_mib
from bench.setting import Setting, mirror
from mirror.sim import tree

SITE_MIB = int(os.environ.get("MIRROR_BENCH_SITE_MIB", "500"))
# `mirror ARGS` with the completeness scan's link parsing off: every file is still named
# (the page count), no page or stylesheet is parsed. A bench knob only: a run stores no
# version without its scan.
_PATCHED = """
import runpy, sys
from mirror.archive.completeness import SiteScanner
{patch}
sys.argv = ["mirror", *sys.argv[1:]]
runpy.run_module("mirror", run_name="__main__")
"""
NO_LINK_SCAN = _PATCHED.format(patch="SiteScanner.take = lambda self, source, text, kind: None")
IN_PROCESS_SCAN = _PATCHED.format(patch="SiteScanner.in_worker = classmethod(lambda cls: cls())")
CHILD_SCAN = _PATCHED.format(
    patch="SiteScanner.in_worker = classmethod(lambda cls: cls(worker_after=256))"
)

DOMAIN = "export.bench.test"
RECIPE = r"""
set -eu
api=$1 dir=$2
auth="Authorization: Bearer $MIRROR_API_KEY"
job=$(curl -sSf -H "$auth" -H 'Content-Type: application/json' \
      -d '{"domain": "export.bench.test"}' "$api/v1/static-export/jobs" | jq -r .jobId)
until [ "$(curl -sSf -H "$auth" "$api/v1/static-export/jobs/$job" | jq -r .status)" = completed ]
do sleep 0.1; done
until url=$(curl -sf -X POST -H "$auth" "$api/v1/static-export/jobs/$job/bundle" \
            | jq -re .bundleUrl)
do sleep 0.1; done
curl -sSf "$url" | tee "$dir/bundle.part" | openssl dgst -sha256 -r > "$dir/bundle.sha256"
tar -tzf "$dir/bundle.part" > /dev/null
sync "$dir/bundle.part"
mv "$dir/bundle.part" "$dir/$(cut -d' ' -f1 "$dir/bundle.sha256").tar.gz"
"""


RECIPE_STEPS = "start, poll, curl | tee | openssl dgst, tar -tzf, sync, mv"
ARGS = ["export", "run", DOMAIN]


def run(s: Setting) -> list[Row]:
    return [large_bundle(s), *page_heavy(s)]


def recipe(s: Setting) -> Side:
    """The vendor's recipe made safe, into a fresh directory each run."""
    where = s.work / "recipe"

    def fresh() -> None:
        shutil.rmtree(where, ignore_errors=True)
        where.mkdir()

    def stored() -> None:
        if len(list(where.glob("*.tar.gz"))) != 1:
            raise SystemExit("export: the recipe stored nothing")
        shutil.rmtree(where)

    argv = ["sh", "-c", RECIPE, "recipe", s.sim.url, str(where)]
    return Side("recipe", lambda: argv, before=fresh, after=stored, env=s.env)


def large_bundle(s: Setting) -> Row:
    s.sim.config.bundle_size = SIZE_MIB * MiB
    store = s.work / "export-store"
    config = s.config("export", store)
    budget = imports_rss_mib(["--config", str(config), *ARGS], s.work, s.env) + RSS_HEADROOM_MIB
    row = Row(
        "export run, end to end",
        "mirror export run",
        RECIPE_STEPS,
        SIZE_MIB * MiB,
        target=">= 1.5x (was 0.93x)",
        rss_budget_mib=budget,
    )
    compare(row, Side("mirror", lambda: mirror(config, *ARGS), env=s.env), recipe(s))
    shutil.rmtree(store, ignore_errors=True)
    return row


def page_heavy(s: Setting) -> list[Row]:
    """The realistic site against the recipe, and `export run` against itself without its
    link scan and with the scan in one process."""
    config = s.sim.config
    before = (config.bundle_size, config.changes_per_export)
    config.bundle_size, config.site_size = None, SITE_MIB * MiB
    config.changes_per_export, config.reuse_bundles = 0, True
    try:
        return _site_rows(s, s.sim.bundle_info(s.completed_job(DOMAIN), timeout=1800)["size"])
    finally:
        (config.bundle_size, config.changes_per_export), config.site_size = before, None
        config.reuse_bundles = False


def _site_rows(s: Setting, size: int) -> list[Row]:
    plan = tree.site_plan(s.sim.config.seed, DOMAIN, SITE_MIB * MiB)
    store = s.work / "site-store"
    conf = s.config("site", store)
    budget = imports_rss_mib(["--config", str(conf), *ARGS], s.work, s.env) + RSS_HEADROOM_MIB

    def row(step: str, peer: str, target: str) -> Row:
        sized = Row(step, "mirror export run", peer, size, target=target, rss_budget_mib=budget)
        sized.pages, sized.files = len(plan.pages), len(plan.pages) + len(plan.assets)
        return sized

    def side(name: str, argv: list[str]) -> Side:
        empty = lambda: shutil.rmtree(store, ignore_errors=True)  # noqa: E731
        return Side(name, lambda: [*argv, "--config", str(conf), *ARGS], empty, empty, s.env)

    scanned = side("mirror", [sys.executable, "-m", "mirror"])
    site = f"export run, {SITE_MIB} MiB site"
    return [
        compare(row(site, RECIPE_STEPS, ">= 1.5x"), scanned, recipe(s)),
        compare(
            row(f"{site}: scan on vs off", "the same, no link scan", ">= 0.95x"),
            scanned,
            side("no link scan", patch(NO_LINK_SCAN)),
        ),
        compare(
            row(f"{site}: scan in a child vs in one process", "the same, scan in-process", "> 1x"),
            side("child scan", patch(CHILD_SCAN)),
            side("in-process scan", patch(IN_PROCESS_SCAN)),
        ),
    ]


def patch(code: str) -> list[str]:
    """`mirror` run with a bench patch applied first."""
    return [sys.executable, "-c", code]
