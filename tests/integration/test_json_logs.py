"""Every long-running command writes its log as JSON lines (issue 37, item 5): run as a
service runs it (stderr not a terminal), each of `mirror daemon`, `mirror serve` and
`mirror transfer receive` (a service: no --once) does some work and is stopped by SIGTERM;
every line on its stderr is one JSON object with the fields README.md's Monitoring section
names (`time`, `level`, `logger`, `message`), the lines that matter are there, and no
secret of its environment (the vendor key, the S3 secret key) is in anything it wrote."""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path

import httpx
import pytest

from mirror.config import TargetSettings
from tests.fixtures.cli import cli_env, require_no_secrets, start_mirror, write_config
from tests.fixtures.daemon import daemon_config, simulator, stored_domains, wait_for
from tests.fixtures.s3 import free_port, new_key_pair
from tests.fixtures.udp import free_udp_port, wait_bound

pytestmark = pytest.mark.timeout(600)

LEVELS = {"debug", "info", "warning", "error", "critical"}
FIELDS = {"time", "level", "logger", "message"}
DOMAIN = "docs.example.com"

Launch = Callable[..., subprocess.Popen[bytes]]
"""Starts `mirror ARGS` (env= laid over the test environment) with the test's output files."""


def records(path: Path) -> list[dict[str, object]]:
    """Each stderr line as a JSON object; AssertionError naming the first that is none."""
    found = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        try:
            record = json.loads(line)
        except ValueError:
            raise AssertionError(f"stderr line {number} is not JSON: {line!r}") from None
        assert isinstance(record, dict), f"stderr line {number} is not an object: {line!r}"
        found.append(record)
    return found


@contextlib.contextmanager
def daemon(tmp_path: Path, target: TargetSettings, launch: Launch) -> Iterator[list[str]]:
    """The daemon exports one domain from the simulator (its vendor key in the environment)."""
    with simulator() as sim:
        config = daemon_config(
            tmp_path / "daemon.toml", base_url=sim.url, store=tmp_path / "store", domains=[DOMAIN]
        )
        launch("--config", str(config), "daemon", env={"MIRROR_API_KEY": sim.key})
        wait_for(lambda: stored_domains(config) == {DOMAIN}, 300, "a stored version")
        yield ["metrics listening", "stopping", "stopped"]


@contextlib.contextmanager
def serve(tmp_path: Path, target: TargetSettings, launch: Launch) -> Iterator[list[str]]:
    """mirror serve reads the (empty) bucket with the S3 secret key and answers a pod: 404."""
    port = free_port()
    config = write_config(
        tmp_path / "serve.toml",
        {
            "target": target.model_dump(include={"endpoint_url", "bucket", "prefix", "region"}),
            "serve": {
                "listen": f"127.0.0.1:{port}",
                "cache_dir": str(tmp_path / "cache"),
                "poll_interval": "1s",
            },
        },
    )
    launch("--config", str(config), "serve")
    url = f"http://127.0.0.1:{port}"
    wait_for(lambda: "mirror_serve_bucket_up 1.0" in _text(f"{url}/metrics"), 120, "a read", 0.2)
    assert _answers(f"{url}/domains/{DOMAIN}/current/bundle.tar.gz") == 404
    yield ["GET /domains/", "stopped after"]


@contextlib.contextmanager
def receive(tmp_path: Path, target: TargetSettings, launch: Launch) -> Iterator[list[str]]:
    """transfer receive as its systemd unit runs it: no --once, counters on --metrics."""
    _, public = new_key_pair(tmp_path)
    udp, metrics = free_udp_port(), free_port()
    launch(
        "--defaults", "transfer", "receive", str(tmp_path / "spool"),
        "--listen", f"127.0.0.1:{udp}", "--metrics", f"127.0.0.1:{metrics}",
        "--trusted-key", str(public),
    )  # fmt: skip
    wait_bound(udp)
    assert _answers(f"http://127.0.0.1:{metrics}/") == 200
    yield ["receiving on 127.0.0.1:", "stopped after 0 set(s) ended"]


def _text(url: str) -> str:
    with contextlib.suppress(httpx.HTTPError):
        return httpx.get(url, timeout=30).text
    return ""


def _answers(url: str) -> int:
    with contextlib.suppress(httpx.HTTPError):
        return httpx.get(url, timeout=30).status_code
    return 0


@pytest.mark.parametrize("command", [daemon, serve, receive], ids=lambda c: c.__name__)
def test_every_log_line_is_one_json_object_and_no_secret(
    command: Callable[..., contextlib.AbstractContextManager[list[str]]],
    tmp_path: Path,
    target_settings: TargetSettings,
) -> None:
    started: list[tuple[subprocess.Popen[bytes], dict[str, str]]] = []
    out, err = tmp_path / "stdout", tmp_path / "stderr"

    def launch(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        with open(out, "wb") as stdout, open(err, "wb") as stderr:
            process = start_mirror(*args, env=env, stdout=stdout, stderr=stderr)
        started.append((process, cli_env(env)))
        return process

    try:
        with command(tmp_path, target_settings, launch) as wanted:
            process, env = started[0]
            process.send_signal(signal.SIGTERM)
            assert process.wait(120) == 0, err.read_text()[-3000:]
    finally:
        for running, _ in started:
            if running.poll() is None:
                running.kill()
                running.wait(60)
    check(records(err), wanted)
    require_no_secrets(env, out.read_text(), err.read_text())


def check(found: list[dict[str, object]], wanted: list[str]) -> None:
    """The documented fields on every line; each wanted message on some line."""
    assert found, "nothing was logged"
    for record in found:
        assert record.keys() >= FIELDS, record
        assert record["level"] in LEVELS, record
        datetime.fromisoformat(str(record["time"]))
    said = [str(record["message"]) for record in found]
    missing = [text for text in wanted if not any(text in message for message in said)]
    assert missing == [], said
