"""The monitoring mixin against the real thing (issue 37): a daemon exports from the simulator,
its store is packed, the set imported into a real S3 server and promoted, `chart refresh`
renders a presigned link, `mirror serve` serves the current version to a pod, and a one-way
receiver runs as its unit runs it (`--metrics`); a real Prometheus (Debian's package) scrapes
the daemon, `mirror serve` and the receiver every second and evaluates
deploy/monitoring/rules.yaml. Every dashboard query, every recording rule and every metric an
alert names must return series there (a query naming a metric nobody exports fails), every
rule evaluates without error, and the freshness histogram has counted the version served."""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from mirror.config import TargetSettings
from tests.fixtures.cli import mirror_cli, start_mirror, write_config
from tests.fixtures.daemon import FAST, daemon_process, simulator, stored_domains, wait_for
from tests.fixtures.monitoring import MONITORING, mixin
from tests.fixtures.prometheus import Prometheus, prometheus
from tests.fixtures.s3 import free_port
from tests.fixtures.udp import free_udp_port, wait_bound

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

DOMAIN = "docs.example.com"


def run(*args: str) -> Any:
    done = mirror_cli("--json", *args, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout)


def keys(where: Path) -> dict[str, Path]:
    where.mkdir()
    for name in ("transfer", "receipt"):
        made = mirror_cli("keys", "generate", "--out", str(where / name))
        assert made.returncode == 0, made.stderr
    return {name: where / name for name in ("transfer", "receipt")}


def connected_config(tmp_path: Path, base_url: str, pair: dict[str, Path]) -> Path:
    return write_config(
        tmp_path / "connected.toml",
        {
            "api": {"base_url": base_url, "poll_interval": "0.1s", "max_poll_interval": "0.5s"},
            "store": {"path": str(tmp_path / "store")},
            "daemon": {"listen": "127.0.0.1:0"},
            "exports": [{"domain": DOMAIN, "every": "1h"}],
            "transfer": {
                "signing_key": str(pair["transfer"].with_suffix(".key")),
                "source_id": "monitoring-test",
                "receipt_keys": [str(pair["receipt"].with_suffix(".pub"))],
            },
        },
    )


def airgap_config(tmp_path: Path, target: TargetSettings, pair: dict[str, Path], port: int) -> Path:
    return write_config(
        tmp_path / "airgap.toml",
        {
            "target": {
                "endpoint_url": target.endpoint_url,
                "bucket": target.bucket,
                "prefix": target.prefix,
                "region": target.region,
                "transfer_keys": [str(pair["transfer"].with_suffix(".pub"))],
                "url_mode": "presigned",
            },
            "store": {"path": str(tmp_path / "unused-airgap-store")},
            "transfer": {"signing_key": str(pair["receipt"].with_suffix(".key"))},
            "chart": {"values_path": str(tmp_path / "values-{domain}.yaml")},
            "serve": {
                "listen": f"127.0.0.1:{port}",
                "cache_dir": str(tmp_path / "serve-cache"),
                "poll_interval": "1s",
            },
        },
    )


@contextlib.contextmanager
def serving(config: Path, port: int, log: Path) -> Iterator[str]:
    """The `mirror serve` of `config`, ready; its URL. Stopped by SIGTERM."""
    with open(log, "wb") as err:
        process = start_mirror("--config", str(config), "serve", stdout=subprocess.PIPE, stderr=err)
    url = f"http://127.0.0.1:{port}"
    try:
        assert process.stdout is not None
        assert b"listening" in process.stdout.readline(), log.read_text()

        def ready() -> bool:
            with contextlib.suppress(httpx.HTTPError):
                return httpx.get(url + "/readyz", timeout=10).status_code == 200
            return False

        wait_for(ready, 120, "mirror serve to be ready", interval=0.2)
        yield url
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(60) == 0, log.read_text()[-3000:]


@contextlib.contextmanager
def receiving(tmp_path: Path, pair: dict[str, Path]) -> Iterator[str]:
    """`transfer receive` as its systemd unit runs it (a service, `--metrics`); the address of
    its counters. Stopped by SIGTERM."""
    udp, port = free_udp_port(), free_port()
    log = tmp_path / "receive.log"
    with open(log, "wb") as err:
        process = start_mirror(
            "--defaults", "transfer", "receive", str(tmp_path / "spool"),
            "--listen", f"127.0.0.1:{udp}", "--metrics", f"127.0.0.1:{port}",
            "--trusted-key", str(pair["transfer"].with_suffix(".pub")),
            stdout=subprocess.DEVNULL, stderr=err,
        )  # fmt: skip
    try:
        wait_bound(udp)
        yield f"127.0.0.1:{port}"
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(60) == 0, log.read_text()[-3000:]


def queries() -> list[str]:
    """Every query the mixin makes: dashboards, recording rules, and what each alert names."""
    parts = [part for alert in mixin.ALERTS for part in alert.parts]
    return sorted({*mixin.dashboard_queries(), *mixin.RECORDS, *mixin.RECORDS.values(), *parts})


def empty(running: Prometheus) -> list[str]:
    return [expr for expr in queries() if not running.query(expr)]


def test_every_panel_and_rule_returns_series_from_both_sides(
    tmp_path: Path, target_settings: TargetSettings
) -> None:
    pair = keys(tmp_path / "keys")
    serve_port = free_port()
    airgap = airgap_config(tmp_path, target_settings, pair, serve_port)
    with simulator(one_active_job=False, **FAST) as sim:
        connected = connected_config(tmp_path, sim.url, pair)
        with daemon_process(connected, sim.key, tmp_path) as daemon:
            daemon.wait_ready()
            wait_for(lambda: stored_domains(connected) == {DOMAIN}, 300, "a stored version")
            run("--config", str(connected), "transfer", "pack", str(tmp_path / "set"))
            run("--config", str(airgap), "transfer", "import", str(tmp_path / "set"), "--promote")
            run("--config", str(airgap), "chart", "refresh", "--domain", DOMAIN)
            daemon_address = daemon.metrics_url().removeprefix("http://")
            with (
                serving(airgap, serve_port, tmp_path / "serve.log") as url,
                receiving(tmp_path, pair) as receiver,
            ):
                pod = httpx.get(f"{url}/domains/{DOMAIN}/current/bundle.tar.gz", timeout=60)
                assert pod.status_code == 200
                targets = {
                    "daemon": daemon_address,
                    "serve": f"127.0.0.1:{serve_port}",
                    "receiver": receiver,
                }
                rules = [MONITORING / "rules.yaml"]
                with prometheus(tmp_path / "prometheus", targets, rules) as running:
                    wait_for(running.targets_up, 120, "both targets up", interval=0.5)
                    with contextlib.suppress(AssertionError):
                        wait_for(lambda: not empty(running), 180, "every query", 1.0)
                    assert empty(running) == [], "these queries return no series"
                    check_answers(running, pod.headers["mirror-version"])


def check_answers(running: Prometheus, served: str) -> None:
    """The rules evaluate without error; the freshness histogram counted the version served;
    the version served is the current one, so its alert is quiet."""
    unhealthy = [(rule["name"], rule.get("lastError")) for rule in running.rules()]
    assert [pair for pair in unhealthy if pair[1]] == []
    count = running.query("sum(mirror_serve_freshness_seconds_count)")
    assert float(count[0]["value"][1]) == 1.0
    current = running.query(f'mirror_serve_current_info{{domain="{DOMAIN}"}}')
    assert current[0]["metric"]["version"] == served
    last = running.query(f'mirror_serve_last_served_info{{domain="{DOMAIN}"}}')
    assert last[0]["metric"]["current"] == "true"
    assert running.query("max by (domain) (mirror_serve_current_is_newest) == 0") == []
    for name in ("datagrams_total", "sets_total", "imports_total"):  # the one-way panels' own
        assert running.query(f'mirror_oneway_{name}{{job="receiver"}}'), name
