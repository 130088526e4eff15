"""`python -m bench.profile [STEP ...]`: where the time goes, by py-spy (`pip install py-spy`).

Each STEP (export, verify, import, status; all when none are named) runs once at
MIRROR_BENCH_MIB under `py-spy record`, writing PROFILE_DIR/STEP.svg (a flame
graph; PROFILE_DIR defaults to ./bench-profiles) and printing the functions with
the most samples of their own and, of mirror's, the most samples in all.
"""

from __future__ import annotations

import collections
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from bench.common import SIZE_MIB, MiB, tool
from bench.setting import Setting, fill_store, mirror, setting


def summary(raw: Path, lines: int = 10) -> list[str]:
    """The top functions of a py-spy raw (collapsed stacks) profile."""
    own: collections.Counter[str] = collections.Counter()
    within: collections.Counter[str] = collections.Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        samples = int(count)
        total += samples
        frames = stack.split(";")
        own[frames[-1]] += samples
        for frame in set(frames):
            within[frame] += samples
    out = [f"{total} samples; most samples of their own:"]
    out += [f"  {100 * n / total:5.1f}% {frame}" for frame, n in own.most_common(lines)]
    out.append("mirror's functions, most samples in all:")
    ours = [(f, n) for f, n in within.most_common() if "mirror/" in f and "__main__" not in f]
    out += [f"  {100 * n / total:5.1f}% {frame}" for frame, n in ours[:lines]]
    return out


def record(name: str, argv: list[str], env: dict[str, str], out: Path) -> None:
    spy = tool("py-spy")
    raw = out / f"{name}.txt"
    for fmt, path in (("raw", raw), ("flamegraph", out / f"{name}.svg")):
        subprocess.run(
            [spy, "record", "-r", "250", "-f", fmt, "-o", str(path), "--", *argv],
            env=env,
            check=True,
            capture_output=True,
        )
    print(f"\n### {name} ({out / name}.svg)")
    print("\n".join(summary(raw)), flush=True)


def _steps(s: Setting) -> dict[str, Callable[[], list[str]]]:
    s.sim.config.bundle_size = SIZE_MIB * MiB
    export_config = s.config("profile-export", s.work / "profile-export")
    store = s.work / "profile-store"
    fill_store(store, [SIZE_MIB * MiB])
    config = s.config("profile", store)
    set_dir = s.work / "profile-set"

    def packed() -> Path:
        if not set_dir.exists():
            subprocess.run(
                mirror(config, "transfer", "pack", str(set_dir), "--all", "--max-size", "64MiB"),
                env=s.env,
                check=True,
                capture_output=True,
            )
        return set_dir

    return {
        "export": lambda: mirror(export_config, "export", "run", "export.bench.test"),
        "verify": lambda: mirror(config, "transfer", "verify", str(packed())),
        "import": lambda: mirror(
            s.config("profile-import", store, s.new_bucket()), "transfer", "import", str(packed())
        ),
        "status": lambda: mirror(export_config, "status"),
    }


def main(names: list[str]) -> None:
    out = Path(os.environ.get("PROFILE_DIR", "bench-profiles")).absolute()
    out.mkdir(parents=True, exist_ok=True)
    with setting() as s:
        steps = _steps(s)
        for name in names or list(steps):
            if name not in steps:
                raise SystemExit(f"no such step: {name} (one of {', '.join(steps)})")
            record(name, steps[name](), s.env, out)


if __name__ == "__main__":
    main(sys.argv[1:])
