"""The last mile as it runs (issue 36): the INSTALLED `mirror serve` (a process of its own, from
outside the source tree, with the cluster's read-only S3 identity) in front of a real S3
server, and a stand-in for the vendor's pod (tests/fixtures/pod.py: fetch
`staticExport.bundleUrl` at start, unpack, serve) started from values that `chart values`
rendered with `url_mode = "serve"`.

A new pod gets the current version's exact bytes, then again after the presigned TTL would
have run out, after `chart rollback`, with the object store stopped, and with `mirror serve`
restarted while it is still stopped; an object replaced in the bucket is never served, not
its first byte; 50 pods fetching one large version at once all get it byte-exact."""

from __future__ import annotations

import contextlib
import hashlib
import json
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from mirror.airgap import chart
from mirror.airgap.s3.objectstore import ObjectStore
from mirror.sim.seaweed import ADMIN, READ_ONLY, READ_WRITE, SeaweedServer
from tests.airgap.chart.seeding import DOMAIN, Seeded, seed_version
from tests.fixtures.artefact import Installed, clean_env
from tests.fixtures.daemon import wait_for
from tests.fixtures.s3 import (
    ADMIN_CREDENTIALS,
    READ_ONLY_CREDENTIALS,
    TEST_CREDENTIALS,
    client_as,
    free_port,
    identity,
)
from tests.fixtures.serving import get, raw

# The installed tool is built and installed once per run (tests/fixtures/artefact.py): minutes
# on a loaded machine, so this file goes first (slow) and has room for it.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]

POD = Path(__file__).resolve().parents[1] / "fixtures" / "pod.py"
V1, V2, V3 = "2026-11-20", "2026-11-21", "2026-11-22"
BUCKET = "serve-pipeline"


@dataclass
class Side:
    """The air-gapped side of the test: its S3 server, the import's view of the bucket, the
    installed tool's config and how to run it."""

    installed: Installed
    work: Path
    config: Path
    store: ObjectStore
    seaweed: SeaweedServer
    serve_url: str

    def env(self, credentials: dict[str, str]) -> dict[str, str]:
        return clean_env(self.work / "home", MIRROR_CONFIG=str(self.config), **credentials)

    def mirror(self, *args: str, writer: bool = False) -> subprocess.CompletedProcess[str]:
        credentials = TEST_CREDENTIALS if writer else READ_ONLY_CREDENTIALS
        return subprocess.run(
            [str(self.installed.mirror), *args],
            cwd=self.work,
            env=self.env(credentials),
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )

    def json(self, *args: str) -> Any:
        done = self.mirror("--json", *args)
        assert done.returncode == 0, done.stdout + done.stderr
        return json.loads(done.stdout)


def write_config(work: Path, endpoint: str, port: int, *, url_mode: str = "serve") -> Path:
    config = work / f"config-{url_mode}.toml"
    config.write_text(
        f"""[target]
endpoint_url = "{endpoint}"
bucket = "{BUCKET}"
region = "us-east-1"
url_mode = "{url_mode}"
presign_ttl = "2s"
deadline = "5s"
read_timeout = "2s"

[serve]
listen = "127.0.0.1:{port}"
public_url = "http://127.0.0.1:{port}"
cache_dir = "{work / "cache"}"
poll_interval = "1s"
idle_timeout = "10s"
"""
    )
    return config


@pytest.fixture
def side(installed: Installed, tmp_path: Path) -> Iterator[Side]:
    """An S3 server of the test's own (it is stopped half-way), a bucket with two promoted
    versions, and the config of the installed tool."""
    identities = [
        identity("admin", ADMIN_CREDENTIALS, ADMIN),
        identity("import", TEST_CREDENTIALS, READ_WRITE),
        identity("cluster", READ_ONLY_CREDENTIALS, READ_ONLY),
    ]
    work = tmp_path / "operator"
    (work / "home").mkdir(parents=True)
    with SeaweedServer(tmp_path / "s3", identities) as seaweed:
        client_as(seaweed.url, ADMIN_CREDENTIALS).create_bucket(Bucket=BUCKET)
        store = ObjectStore(client_as(seaweed.url, TEST_CREDENTIALS), BUCKET)
        port = free_port()
        config = write_config(work, seaweed.url, port)
        yield Side(installed, work, config, store, seaweed, f"http://127.0.0.1:{port}")


@contextlib.contextmanager
def serving(side: Side, name: str) -> Iterator[subprocess.Popen[str]]:
    """The installed `mirror serve`, ready (its /readyz answered 200); stopped by SIGTERM."""
    log = open(side.work / f"serve-{name}.log", "w")  # noqa: SIM115 (closed below)
    process = subprocess.Popen(
        [str(side.installed.mirror), "serve"],
        cwd=side.work,
        env=side.env(READ_ONLY_CREDENTIALS),
        stdout=subprocess.PIPE,
        stderr=log,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()  # off a terminal: its address, a JSON record
        announced = json.loads(line)
        assert announced["message"] == f"mirror serve listening on {side.serve_url}", line
        assert announced["url"] == side.serve_url and announced["level"] == "info", line
        wait_for(lambda: _ready(side), 120, "mirror serve to be ready")
        yield process
    finally:
        process.send_signal(signal.SIGTERM)
        code = process.wait(60)
        log.close()
        assert code == 0, (side.work / f"serve-{name}.log").read_text()[-3000:]


def _ready(side: Side) -> bool:
    with contextlib.suppress(httpx.HTTPError):
        return httpx.get(side.serve_url + "/readyz", timeout=10).status_code == 200
    return False


@dataclass(frozen=True)
class PodStarted:
    url: str
    sha256: str
    size: int
    version: str


@contextlib.contextmanager
def pod(values: Path, work: Path) -> Iterator[PodStarted]:
    """A new pod of the vendor's chart, started from `values` (tests/fixtures/pod.py)."""
    process = subprocess.Popen(
        [sys.executable, str(POD), str(values), str(work)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert process.stdout is not None
        words = process.stdout.readline().split()
        assert words[:2] == ["pod", "serving"], words
        yield PodStarted(words[2], words[4], int(words[6]), words[8])
    finally:
        process.terminate()
        process.wait(30)


def assert_pod_serves(values: Path, work: Path, seeded: Seeded) -> None:
    """A new pod started from `values` got `seeded`'s exact bytes and serves its site."""
    with pod(values, work) as started:
        assert (started.sha256, started.size) == (seeded.sha256, seeded.size)
        assert started.version == seeded.version
        page = httpx.get(started.url + "/version.txt", timeout=30)
    assert page.text == f"{DOMAIN} {seeded.version}\n"


def test_pods_get_the_right_bytes_through_ttl_rollback_and_the_store_stopped(
    side: Side, tmp_path: Path
) -> None:
    older = seed_version(side.store, tmp_path, V1)
    newer = seed_version(side.store, tmp_path, V2)
    chart.promote(side.store, DOMAIN, V1)
    chart.promote(side.store, DOMAIN, V2)
    forged = seed_version(side.store, tmp_path, V3)  # neither current nor rollback target
    pods = tmp_path / "pods"
    with serving(side, "first"):
        moving, pinned = side.work / "moving.yaml", side.work / "pinned.yaml"
        rendered = side.json("chart", "values", DOMAIN, "--moving", "--out", str(moving))
        assert (rendered["url_mode"], rendered["moving"], rendered["version"]) == (
            "serve",
            True,
            V2,
        )
        assert rendered["bundle_url"] == side.serve_url + f"/domains/{DOMAIN}/current/bundle.tar.gz"
        side.json("chart", "values", DOMAIN, "--out", str(pinned))
        assert_pod_serves(moving, pods / "1", newer)
        assert_pod_serves(pinned, pods / "2", newer)
        for values in (moving, pinned):
            checked = side.json("chart", "check", str(values), "--site")
            assert (checked["status"], checked["version"]) == ("ok", V2), checked
            assert checked["actual_sha256"] == newer.sha256 and checked["expires_at"] is None

        _after_the_presigned_ttl(side, pods, moving, newer)
        _a_replaced_object_is_never_served(side, forged)
        rolled = side.mirror("chart", "rollback", DOMAIN, writer=True)
        assert rolled.returncode == 0, rolled.stderr
        wait_for(lambda: _serving_version(side) == V1, 60, "the current link to follow rollback")
        assert_pod_serves(moving, pods / "3", older)
        assert_pod_serves(pinned, pods / "4", newer)  # the pinned link never moves

        side.seaweed.stop()
        assert_pod_serves(moving, pods / "5", older)
        assert_pod_serves(pinned, pods / "6", newer)
        wait_for(lambda: "unreachable" in _status(side), 60, "the page to say the store is away")
    with serving(side, "again, the store still stopped"):
        assert_pod_serves(moving, pods / "7", older)
        assert_pod_serves(pinned, pods / "8", newer)
        metrics = httpx.get(side.serve_url + "/metrics").text
        assert "mirror_serve_pointers_from_disk 1.0" in metrics
        assert "mirror_serve_bucket_up 0.0" in metrics
        assert "pointers an earlier run saved" in _status(side)


def _after_the_presigned_ttl(side: Side, pods: Path, moving: Path, newer: Seeded) -> None:
    """A presigned link rendered now (TTL 2 s) is refused once it has run out; a new pod
    started from the serve values after that gets the bytes all the same."""
    presigned = side.work / "presigned.yaml"
    config = write_config(
        side.work, side.seaweed.url, int(side.serve_url.rsplit(":", 1)[1]), url_mode="presigned"
    )
    done = subprocess.run(
        [
            str(side.installed.mirror),
            "--config",
            str(config),
            "chart",
            "values",
            DOMAIN,
            "--out",
            str(presigned),
        ],
        cwd=side.work,
        env=side.env(READ_ONLY_CREDENTIALS),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    link = chart.read_values_file(presigned).bundle_url
    wait_for(
        lambda: httpx.get(link, timeout=10).status_code == 403, 60, "the presigned link to expire"
    )
    assert_pod_serves(moving, pods / "after-ttl", newer)


def _a_replaced_object_is_never_served(side: Side, forged: Seeded) -> None:
    """V3's object replaced by other bytes of the same size: 502 naming the version, not one
    byte of either; `chart check` of its values fails with exit 5."""
    data = forged.archive.read_bytes()
    other = bytes([data[0] ^ 0xFF]) + data[1:]
    side.store.client.put_object(Bucket=BUCKET, Key=forged.key, Body=other)
    port = int(side.serve_url.rsplit(":", 1)[1])
    answer = raw(port, get(f"/domains/{DOMAIN}/{V3}/bundle.tar.gz"))
    assert answer.status == 502, answer.raw[:300]
    assert answer.body.count(b"\n") == 1 and f"version {V3} of {DOMAIN}".encode() in answer.body
    assert other[:16] not in answer.raw and data[:16] not in answer.raw
    values = side.work / "forged.yaml"
    side.json("chart", "values", DOMAIN, "--pin", V3, "--out", str(values))
    checked = side.mirror("--json", "chart", "check", str(values))
    assert checked.returncode == 5, checked.stdout + checked.stderr
    assert json.loads(checked.stdout)["status"] == "mismatch"
    assert 'mirror_serve_refused_total{domain="docs.example.com",version="2026-11-22"} 1.0' in (
        httpx.get(side.serve_url + "/metrics").text
    )


def _serving_version(side: Side) -> str | None:
    answer = httpx.head(side.serve_url + f"/domains/{DOMAIN}/current/bundle.tar.gz", timeout=10)
    return answer.headers.get("mirror-version")


def _status(side: Side) -> str:
    return httpx.get(side.serve_url + "/", timeout=10).text


def test_fifty_pods_at_once_get_a_large_version_byte_exact(side: Side, tmp_path: Path) -> None:
    """50 concurrent fetches of a 16 MiB version (bench/RESULTS.md has the 256 MiB run): every
    one byte-exact, and the server's peak memory bounded (flat in clients and size)."""
    big = tmp_path / "big.tar.gz"
    with open(big, "wb") as out:
        for block in range(16):
            out.write(hashlib.sha256(b"%d" % block).digest() * (32 * 1024))
    seeded = seed_version(side.store, tmp_path, V1, archive=big)
    url = side.serve_url + f"/domains/{DOMAIN}/{V1}/bundle.tar.gz"
    digests: list[str] = []
    lock = threading.Lock()

    def fetch() -> None:
        digest = hashlib.sha256()
        with httpx.stream("GET", url, timeout=120) as answer:
            for chunk in answer.iter_bytes(1 << 20):
                digest.update(chunk)
        with lock:
            digests.append(digest.hexdigest())

    with serving(side, "fifty") as process:
        clients = [threading.Thread(target=fetch) for _ in range(50)]
        for client in clients:
            client.start()
        for client in clients:
            client.join(300)
        peak = _peak_rss(process.pid)
    assert digests == [seeded.sha256] * 50
    assert peak < 200 * 1024 * 1024, f"peak RSS {peak >> 20} MiB"


def _peak_rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")
