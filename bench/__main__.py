"""`python -m bench [NAME ...]`: every comparison (or the named ones), then one table.

NAME is a module bench_NAME.py: startup, download, export, store, transfer, delta (the
comparisons, each with `run(setting) -> list[Row]`), or daemon_idle, fec, oneway,
oneway_sessions, manyfiles, splice and serve_clients (their own measurements, run only when
named).
"""

from __future__ import annotations

import importlib
import sys
import time

from bench.common import Row, machine, print_table
from bench.setting import setting

COMPARISONS = ("startup", "download", "export", "store", "transfer", "delta")
ON_THEIR_OWN = (
    "daemon_idle",
    "fec",
    "oneway",
    "oneway_sessions",
    "manyfiles",
    "splice",
    "serve_clients",
)


def main(names: list[str]) -> None:
    unknown = set(names) - {*COMPARISONS, *ON_THEIR_OWN}
    if unknown:
        raise SystemExit(f"no such benchmark: {', '.join(sorted(unknown))}")
    chosen = [n for n in COMPARISONS if not names or n in names]
    print(machine(), flush=True)
    rows: list[Row] = []
    if chosen:
        with setting() as where:
            for name in chosen:
                started = time.monotonic()
                print(f"=== {name}", flush=True)
                rows += importlib.import_module(f"bench.bench_{name}").run(where)
                print(f"=== {name} took {time.monotonic() - started:.0f}s", flush=True)
        print_table(rows)
    for name in ON_THEIR_OWN:
        if name in names:
            print(f"\n=== {name}", flush=True)
            importlib.import_module(f"bench.bench_{name}").main()


if __name__ == "__main__":
    main(sys.argv[1:])
