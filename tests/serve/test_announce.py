"""`mirror -q serve` as a script or a unit starts it: stderr not a terminal, stdout a pipe.

Its first stdout line is where it listens (a JSON record with `url`, mirror.logs), `-q` or
not: a script that starts it waits for that line. `-q` dropped it (the stdout records took
the root's level, ERROR), and the 50-client bench waited for the line for ever. The store
here is away (nothing listens at its address): serve starts and answers all the same.
"""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
from pathlib import Path

import httpx

from tests.fixtures.cli import start_mirror, write_config
from tests.fixtures.daemon import wait_for
from tests.fixtures.s3 import free_port


def test_quiet_serve_off_a_terminal_says_where_it_listens(tmp_path: Path) -> None:
    port, away = free_port(), free_port()
    config = write_config(
        tmp_path / "serve.toml",
        {
            "target": {"endpoint_url": f"http://127.0.0.1:{away}", "bucket": "docs"},
            "serve": {"listen": f"127.0.0.1:{port}", "cache_dir": str(tmp_path / "cache")},
        },
    )
    log = tmp_path / "serve.log"
    with open(log, "wb") as stderr:
        process = start_mirror(
            "--config", str(config), "-q", "serve", stdout=subprocess.PIPE, stderr=stderr
        )
        try:  # it answers only after it announced: then the line is in the pipe, or never
            wait_for(lambda: _answers(port), 120, "mirror serve to answer /healthz")
        finally:
            process.send_signal(signal.SIGTERM)
            stdout, _ = process.communicate(timeout=120)
    url = f"http://127.0.0.1:{port}"
    lines = stdout.decode().splitlines()
    assert lines, f"nothing on stdout; its log: {log.read_text()[-2000:]}"
    record = json.loads(lines[0])
    assert (record["message"], record["url"]) == (f"mirror serve listening on {url}", url)
    assert process.returncode == 0, log.read_text()[-2000:]


def _answers(port: int) -> bool:
    with contextlib.suppress(httpx.HTTPError):
        return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=10).status_code == 200
    return False
