"""The demo's last mile: `mirror serve` in front of the bucket, as the vendor's pods see it.

After the import and the promote, the demo writes the air-gapped side's settings
(`config-serve.toml`: `target.url_mode = "serve"`, serve on a free loopback port), starts
`mirror serve`, renders values that follow the current version through it, and lets
`chart check` fetch that link as a pod would, the bytes compared with the version's
manifest. Serve's `/metrics` shows the freshness histogram count going up by the version
first served; after `chart rollback`, `mirror_serve_current_is_newest` (the series the
alert MirrorServedNotNewest watches) says 0 within a poll. SIGTERM then drains it, exit 0.

Everything here is the real tool in subprocesses; this module only narrates and reads
`/metrics` (prometheus_client's parser: no format of our own).
"""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from mirror.sim.seaweed import free_ports

FRESHNESS_COUNT = "mirror_serve_freshness_seconds_count"
IS_NEWEST = "mirror_serve_current_is_newest"
DEADLINE = 120.0
"""Seconds the demo waits for serve to be ready, or for a metric to change (a poll)."""


@dataclass(frozen=True)
class ServeDemo:
    """Where the last mile works: the serve settings file and how to run a demo step."""

    workdir: Path
    config: Path
    env: dict[str, str]
    echo: Callable[[str], None]


def write_serve_config(workdir: Path, s3_url: str, bucket: str) -> Path:
    """The air-gapped side's settings: the bucket read by `mirror serve`, links through it."""
    port = free_ports(1)[0]
    keys = workdir / "keys" / "transfer.pub"
    config = workdir / "config-serve.toml"
    config.write_text(
        f"""# Written by `mirror demo`: the air-gapped side, mirror serve in front of the bucket.
[target]
endpoint_url = "{s3_url}"
bucket = "{bucket}"
transfer_keys = ["{keys}"]
url_mode = "serve"

[serve]
listen = "127.0.0.1:{port}"
public_url = "http://127.0.0.1:{port}"
cache_dir = "{workdir / "serve-cache"}"
poll_interval = "1s"
drain_timeout = "5s"
require_provenance = true
"""
    )
    return config


@contextlib.contextmanager
def serving(demo: ServeDemo) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """`mirror serve` of the demo's serve settings, ready; its URL and process. A process
    still running when the block ends (a failed step) is stopped by SIGTERM."""
    demo.echo(f"$ mirror --config {demo.config} serve &")
    with open(demo.workdir / "serve.log", "w") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "mirror", "--config", str(demo.config), "serve"],
            env=demo.env,
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
        )
    try:
        assert process.stdout is not None
        # off a terminal a service writes only JSON records: the first on stdout is its
        # address (`url`); "" when it exits at start
        announced, url = _announced(process.stdout.readline())
        demo.echo(f"  {announced or '(no address announced)'}")
        if not url or not _wait(lambda: _ready(url), process):
            _show_log(demo, process)
            raise ServeDemoFailed("mirror serve did not become ready")
        demo.echo(f"  ready: every current version fetched from the bucket and verified ({url})")
        yield url, process
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            process.wait(60)


class ServeDemoFailed(Exception):
    """A last-mile step did not do what the demo shows (said in the output before)."""


def stop(demo: ServeDemo, process: subprocess.Popen[str]) -> None:
    """SIGTERM, as Kubernetes and systemd stop it: drained, exit 0, its last log lines shown."""
    demo.echo(f"$ kill -TERM {process.pid}")
    process.send_signal(signal.SIGTERM)
    code = process.wait(60)
    for line in log_messages(demo.workdir / "serve.log")[-2:]:
        demo.echo(f"  {line}")
    demo.echo(f"  mirror serve exited {code}")
    if code != 0:
        raise ServeDemoFailed(f"mirror serve exited {code} on SIGTERM")


def metric(url: str, name: str, labels: dict[str, str]) -> float | None:
    """The value of one sample on serve's /metrics (None when it is not there)."""
    text = httpx.get(f"{url}/metrics", timeout=30).text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and labels.items() <= sample.labels.items():
                return float(sample.value)
    return None


def wait_for_metric(url: str, name: str, labels: dict[str, str], wanted: float) -> bool:
    """Whether the sample reads `wanted` within DEADLINE (serve re-reads the bucket each
    serve.poll_interval)."""
    return _wait(lambda: metric(url, name, labels) == wanted, None)


def show_metric(demo: ServeDemo, url: str, name: str, labels: dict[str, str]) -> float | None:
    value = metric(url, name, labels)
    shown = ",".join(f'{key}="{item}"' for key, item in labels.items())
    selector = f"{name}{{{shown}}}" if shown else name
    demo.echo(f"  {selector} {'absent' if value is None else f'{value:g}'}")
    return value


def log_messages(path: Path) -> list[str]:
    """The `message` of each JSON log line serve wrote (a line that is none kept as is)."""
    messages = []
    for line in path.read_text().splitlines():
        try:
            messages.append(str(json.loads(line)["message"]))
        except (ValueError, KeyError, TypeError):
            messages.append(line)
    return messages


def _announced(line: str) -> tuple[str, str]:
    """(the announcement, its URL) from serve's first stdout line, its JSON record;
    ("", "") when it is none (serve ended at start)."""
    with contextlib.suppress(ValueError, TypeError, AttributeError, KeyError):
        record = json.loads(line)
        return str(record["message"]), str(record["url"])
    return "", ""


def _show_log(demo: ServeDemo, process: subprocess.Popen[str]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        process.wait(60)
    for line in log_messages(demo.workdir / "serve.log")[-5:]:
        demo.echo(f"  {line}")


def _ready(url: str) -> bool:
    with contextlib.suppress(httpx.HTTPError):
        return httpx.get(f"{url}/readyz", timeout=10).status_code == 200
    return False


def _wait(condition: Callable[[], bool], process: subprocess.Popen[str] | None) -> bool:
    """Poll `condition` until it holds (True), DEADLINE passes or `process` ends (False)."""
    deadline = time.monotonic() + DEADLINE
    while time.monotonic() < deadline:
        if condition():
            return True
        if process is not None and process.poll() is not None:
            return False
        time.sleep(0.2)
    return False


Heading = Callable[[str], None]
Command = Callable[[list[str], Path | None], bool]
"""Runs `mirror ARGS` as a demo step (showing a file after it): False when it failed."""


def last_mile(demo: ServeDemo, heading: Heading, command: Command, domain: str) -> bool:
    """Serve, fetch through it, roll back, stop (module docstring); False at the first step
    that fails (said in the output)."""
    heading("Serve the bucket to the vendor's pods: mirror serve, the last mile")
    try:
        with serving(demo) as (url, process):
            if not _fetch_through_serve(demo, heading, command, domain, url):
                return False
            if not _rollback_seen(demo, heading, command, domain, url):
                return False
            heading("Stop mirror serve as Kubernetes or systemd does: it drains, then exits 0")
            stop(demo, process)
    except ServeDemoFailed as failed:
        demo.echo(f"  ({failed}: the demo stops here)")
        return False
    return True


def _fetch_through_serve(
    demo: ServeDemo, heading: Heading, command: Command, domain: str, url: str
) -> bool:
    values = demo.workdir / "values-serve.yaml"
    heading(f"Render values for {domain} whose link follows the current version through serve")
    config = ["--config", str(demo.config)]
    if not command([*config, "chart", "values", domain, "--moving", "--out", str(values)], values):
        return False
    heading("Fetch it through mirror serve as a pod would; the bytes checked against the manifest")
    demo.echo(f"$ curl -s {url}/metrics | grep {FRESHNESS_COUNT}")
    before = show_metric(demo, url, FRESHNESS_COUNT, {}) or 0.0
    if not command([*config, "chart", "check", str(values)], None):
        return False
    demo.echo(f"$ curl -s {url}/metrics | grep {FRESHNESS_COUNT}")
    wait_for_metric(url, FRESHNESS_COUNT, {}, before + 1)  # counted once the last byte is sent
    after = show_metric(demo, url, FRESHNESS_COUNT, {})
    if after != before + 1:
        raise ServeDemoFailed("the freshness histogram did not count the version first served")
    demo.echo("  (one more: from the vendor's export to this first serve, read from provenance)")
    return True


def _rollback_seen(
    demo: ServeDemo, heading: Heading, command: Command, domain: str, url: str
) -> bool:
    heading(f"Roll {domain} back: serve follows, and says the current version is not the newest")
    if not command(["--config", str(demo.config), "chart", "rollback", domain], None):
        return False
    labels = {"domain": domain}
    demo.echo(f"$ curl -s {url}/metrics | grep '{IS_NEWEST}{{domain=\"{domain}\"}}'")
    seen = wait_for_metric(url, IS_NEWEST, labels, 0.0)
    show_metric(demo, url, IS_NEWEST, labels)
    if not seen:
        raise ServeDemoFailed(f"{IS_NEWEST} did not turn 0 after the rollback")
    demo.echo("  (0 for an hour fires MirrorServedNotNewest: deploy/monitoring/rules.yaml)")
    return True
