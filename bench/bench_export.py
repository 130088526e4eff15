"""`mirror export run` end to end vs the vendor's recipe made safe, from the shell.

Both start a job on the simulator, poll it every 0.1 s, ask for the bundle and
download it; the recipe then hashes it on the way (`curl | tee | openssl dgst`),
lists it (`tar -tzf`, the archive check), syncs it and moves it into place.
mirror also checks the archive's members, hashes its tree and indexes it.
"""

from __future__ import annotations

import shutil

from bench.common import RSS_HEADROOM_MIB, SIZE_MIB, MiB, Row, Side, compare, imports_rss_mib
from bench.setting import Setting, mirror

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


def run(s: Setting) -> list[Row]:
    s.sim.config.bundle_size = SIZE_MIB * MiB
    store = s.work / "export-store"
    config = s.config("export", store)
    recipe_dir = s.work / "recipe"

    def fresh_recipe_dir() -> None:
        shutil.rmtree(recipe_dir, ignore_errors=True)
        recipe_dir.mkdir()

    def recipe_stored() -> None:
        if len(list(recipe_dir.glob("*.tar.gz"))) != 1:
            raise SystemExit("export: the recipe stored nothing")
        shutil.rmtree(recipe_dir)

    args = ["export", "run", DOMAIN]
    budget = imports_rss_mib(["--config", str(config), *args], s.work, s.env) + RSS_HEADROOM_MIB
    row = Row(
        "export run, end to end",
        "mirror export run",
        "start, poll, curl | tee | openssl dgst, tar -tzf, sync, mv",
        SIZE_MIB * MiB,
        target=">= 1.5x (was 0.93x)",
        rss_budget_mib=budget,
    )
    compare(
        row,
        Side("mirror", lambda: mirror(config, *args), env=s.env),
        Side(
            "recipe",
            lambda: ["sh", "-c", RECIPE, "recipe", s.sim.url, str(recipe_dir)],
            before=fresh_recipe_dir,
            after=recipe_stored,
            env=s.env,
        ),
    )
    shutil.rmtree(store, ignore_errors=True)
    return [row]
