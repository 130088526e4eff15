"""Start-up: `mirror --help` and `mirror status` vs the bare interpreter (`python -c pass`).
The issue asks for both under 0.3 s; peak RSS is the imports alone."""

from __future__ import annotations

import subprocess
import sys

from bench.common import Row, Side, compare
from bench.setting import Setting, mirror

BARE = Side("python -c pass", lambda: [sys.executable, "-c", "pass"])


def run(s: Setting) -> list[Row]:
    config = s.config("startup", s.work / "startup-store")
    subprocess.run(mirror(config, "db", "upgrade"), check=True, env=s.env, capture_output=True)
    rows = []
    for args in (["--help"], ["status"]):
        command = " ".join(["mirror", *args])
        rows.append(
            compare(
                Row(f"start-up: {command}", command, "python -c pass", 0, target="< 0.3 s"),
                Side(command, lambda args=args: mirror(config, *args), env=s.env),
                BARE,
                rounds=10,
            )
        )
    return rows
