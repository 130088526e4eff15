"""`mirror serve` (a process of its own, on the real S3 server) stopped while it sends: SIGTERM
drains, a second process on its cache directory is refused, SIGHUP reads the pointers at once
and keeps serving.

A download under way when SIGTERM comes completes byte-exact (within serve.drain_timeout),
with its access line, and the process exits 0; one still sending at the drain deadline is
cut, logged as cut, and the process still exits 0. The client in these tests reads through a
small receive buffer and stops reading, so its download is under way at SIGTERM for as long
as the test chooses: nothing depends on how fast the machine is.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from mirror.airgap import chart
from mirror.airgap.s3.objectstore import ObjectStore
from mirror.config import TargetSettings
from mirror.serve.routes import bundle_path
from tests.airgap.chart.seeding import DOMAIN, Seeded, seed_version
from tests.fixtures.cli import cli_env, error_lines, start_mirror, write_config
from tests.fixtures.daemon import wait_for
from tests.fixtures.s3 import free_port
from tests.fixtures.serving import read_to_end, start_download

pytestmark = [pytest.mark.s3, pytest.mark.timeout(600)]

V1, V2 = "2026-11-20", "2026-11-21"
SIZE = 24 * 1024 * 1024
PATH = bundle_path(DOMAIN, V1, "tar.gz")


@dataclass
class Served:
    process: subprocess.Popen[bytes]
    port: int
    log: Path
    config: Path

    def lines(self) -> list[dict[str, Any]]:
        found = []
        for line in self.log.read_text().splitlines():
            with contextlib.suppress(ValueError):
                found.append(json.loads(line))
        return found

    def said(self, start: str) -> bool:
        return any(str(r.get("message", "")).startswith(start) for r in self.lines())


@pytest.fixture
def seeded(object_store: ObjectStore, tmp_path: Path) -> Seeded:
    big = tmp_path / "big.tar.gz"
    big.write_bytes(hashlib.sha256(b"x").digest() * (SIZE // 32))
    version = seed_version(object_store, tmp_path, V1, archive=big)
    chart.promote(object_store, DOMAIN, V1)
    return version


def config(tmp_path: Path, target: TargetSettings, port: int, **serve: str) -> Path:
    bucket = {"endpoint_url": target.endpoint_url, "bucket": target.bucket}
    bucket |= {"prefix": target.prefix, "region": target.region}
    document = {
        "target": bucket,
        "serve": {
            "listen": f"127.0.0.1:{port}",
            "public_url": f"http://127.0.0.1:{port}",
            "cache_dir": str(tmp_path / "cache"),
            "idle_timeout": "300s",
            **serve,
        },
    }
    return write_config(tmp_path / f"serve-{port}.toml", document)


@contextlib.contextmanager
def mirror_serve(tmp_path: Path, target: TargetSettings, **serve: str) -> Iterator[Served]:
    port = free_port()
    path = config(tmp_path, target, port, **serve)
    log = tmp_path / f"serve-{port}.log"
    with open(log, "wb") as stderr:
        process = start_mirror(
            "--config", str(path), "serve", stdout=subprocess.PIPE, stderr=stderr
        )
        try:
            assert process.stdout is not None
            assert b"listening" in process.stdout.readline(), log.read_text()[-2000:]
            wait_for(lambda: _ready(port), 300, "mirror serve to be ready")
            yield Served(process, port, log, path)
        finally:
            if process.poll() is None:
                process.kill()
            process.wait(60)


def _ready(port: int) -> bool:
    with contextlib.suppress(httpx.HTTPError):
        return httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=10).status_code == 200
    return False


def _refused(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=10).close()
    except OSError:
        return True
    return False


def access(served: Served) -> list[dict[str, Any]]:
    return [r for r in served.lines() if r.get("logger") == "mirror.serve.access"]


@pytest.mark.fault("serve: SIGTERM during a download", "download completes byte-exact, exit 0")
def test_sigterm_lets_a_download_under_way_finish_byte_exact(
    seeded: Seeded, target_settings: TargetSettings, tmp_path: Path
) -> None:
    with mirror_serve(tmp_path, target_settings) as served:
        conn, first = start_download(served.port, PATH)
        served.process.send_signal(signal.SIGTERM)
        wait_for(lambda: served.said("stopping:"), 120, "the drain to start")
        wait_for(lambda: _refused(served.port), 120, "the listener to close")
        body = read_to_end(conn, first)
        assert served.process.wait(120) == 0, served.log.read_text()[-3000:]
    assert len(body) == seeded.size and hashlib.sha256(body).hexdigest() == seeded.sha256
    (line,) = [r for r in access(served) if r.get("path") == PATH]
    assert (line["status"], line["bytes"]) == (200, seeded.size)
    assert not line["message"].endswith("(cut)")
    assert served.said("stopped after") and "every response finished" in served.log.read_text()


@pytest.mark.fault("serve: SIGTERM, a client that stops reading", "cut at drain_timeout, exit 0")
def test_a_transfer_still_running_at_the_drain_deadline_is_cut_and_logged(
    seeded: Seeded, target_settings: TargetSettings, tmp_path: Path
) -> None:
    with mirror_serve(tmp_path, target_settings, drain_timeout="1s") as served:
        conn, first = start_download(served.port, PATH)  # and never read again until the end
        served.process.send_signal(signal.SIGTERM)
        assert served.process.wait(120) == 0, served.log.read_text()[-3000:]
        with contextlib.suppress(OSError):
            body = read_to_end(conn, first)
            assert len(body) < seeded.size
    (line,) = [r for r in access(served) if r.get("path") == PATH]
    assert line["status"] == 200 and line["message"].endswith("(cut)")
    assert 0 < line["bytes"] < seeded.size
    assert "1 responses cut at serve.drain_timeout" in served.log.read_text()


@pytest.mark.fault("serve: a second mirror serve on one cache_dir", "exit 2 naming dir and pid")
def test_a_second_mirror_serve_on_the_same_cache_dir_is_refused(
    seeded: Seeded, target_settings: TargetSettings, tmp_path: Path
) -> None:
    with mirror_serve(tmp_path, target_settings) as first:
        fills = tmp_path / "cache" / "tmp" / "a-fill-of-the-first.part"
        fills.write_bytes(b"under way")
        other = config(tmp_path, target_settings, free_port())
        second = start_mirror(
            "--config", str(other), "serve", stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        _, err = second.communicate(timeout=300)
        assert second.returncode == 2, err.decode()[-2000:]
        line = error_lines(err.decode())[-1]  # off a terminal: its JSON error record
        assert line.startswith("mirror: error: serve.cache_dir ")
        assert f"{tmp_path / 'cache'} is in use by another mirror serve" in line
        assert f"(pid {first.process.pid})" in line
        assert fills.read_bytes() == b"under way"  # the first one's fills untouched
        assert _ready(first.port)
        first.process.send_signal(signal.SIGTERM)
        assert first.process.wait(120) == 0


@pytest.mark.fault("serve: SIGHUP", "pointers read at once, one line logged, still serving")
def test_sighup_reads_the_pointers_now_and_keeps_serving(
    object_store: ObjectStore, seeded: Seeded, target_settings: TargetSettings, tmp_path: Path
) -> None:
    """What operators expect of a server's SIGHUP (`systemctl reload`): the promote is
    followed now, not at the next poll (an hour away here), and the process goes on."""
    with mirror_serve(tmp_path, target_settings, poll_interval="1h") as served:
        newer = seed_version(object_store, tmp_path, V2)
        chart.promote(object_store, DOMAIN, V2)
        served.process.send_signal(signal.SIGHUP)
        wait_for(lambda: served.said("SIGHUP: "), 120, "the SIGHUP line")
        url = f"http://127.0.0.1:{served.port}" + bundle_path(DOMAIN, None, "tar.gz")
        moving = httpx.get(url, timeout=120)
        assert served.process.poll() is None, served.log.read_text()[-3000:]
    assert moving.status_code == 200 and moving.headers["mirror-version"] == V2
    assert hashlib.sha256(moving.content).hexdigest() == newer.sha256
    (line,) = [r for r in served.lines() if str(r.get("message", "")).startswith("SIGHUP")]
    assert line["message"].startswith(f"SIGHUP: pointers read again, current: {DOMAIN} {V2}; ")
    assert "1 cached bundles checked, 0 dropped" in line["message"]
    assert "the config file is not re-read" in line["message"]


# `mirror serve`, with a SIGHUP sent to itself as it opens the service (the settings read,
# the cache and the bucket not yet): when a reload comes is then no matter of timing.
HUP_AT_START = """
import os, signal, sys
import mirror.serve.run as run
opened = run.open_service
def hup_first(settings):
    os.kill(os.getpid(), signal.SIGHUP)
    return opened(settings)
run.open_service = hup_first
from mirror.cli import main
main(sys.argv[1:])
"""


@pytest.mark.fault("serve: SIGHUP while it starts", "ignored, serves, exits 0 on SIGTERM")
def test_a_sighup_while_it_starts_does_not_end_it(
    target_settings: TargetSettings, tmp_path: Path
) -> None:
    """W3 (trial S31): `systemctl reload` is accepted as soon as the process exists; before
    the service's own handler is in, SIGHUP's default action ended mirror serve."""
    path = config(tmp_path, target_settings, free_port())
    argv = [sys.executable, "-c", HUP_AT_START, "--config", str(path), "serve"]
    process = subprocess.Popen(argv, env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert process.stdout is not None
        assert b"listening" in process.stdout.readline()
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, err.decode()[-2000:]
