"""Run every benchmark under bench/ and print their ratio tables.

`python -m bench [NAME ...]` runs bench_NAME.py modules (all when none are named).
Each module has a `main() -> None` that prints its own table.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
import time
from pathlib import Path


def main(names: list[str]) -> None:
    here = Path(__file__).parent
    modules = sorted(
        m.name for m in pkgutil.iter_modules([str(here)]) if m.name.startswith("bench_")
    )
    chosen = [m for m in modules if not names or m.removeprefix("bench_") in names]
    for name in chosen:
        print(f"\n=== {name}", flush=True)
        started = time.monotonic()
        importlib.import_module(f"bench.{name}").main()
        print(f"=== {name} took {time.monotonic() - started:.1f}s", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
