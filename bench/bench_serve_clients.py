"""`python -m bench serve_clients`: 50 pods at once against `mirror serve` (issue 36, item 5),
and beside nginx (Debian's package) serving the same cached file on the same machine.

A SeaweedFS of its own on loopback holds one version of MIRROR_BENCH_MIB (256) MiB of random
bytes; `mirror serve` (this checkout's, as a process with the read-only identity) fills its
cache from it, then 50 `curl` clients fetch the version at once, twice: piped into
`sha256sum` (every copy byte-exact?) and into /dev/null (throughput from the cache). Then
ROUNDS rounds alternate the same 50 clients against mirror serve and against nginx (sendfile
on, the cached file itself), which goes first alternating: the median of the per-round ratios
nginx time / mirror time is the figure (goal: at least 0.8). Prints the wall times, the
aggregate rates and the server's peak RSS (VmHWM) and CPU seconds.
"""

from __future__ import annotations

import contextlib
import getpass
import hashlib
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from bench.common import ROUNDS, SIZE_MIB, MiB, machine

CLIENTS = 50
ACCESS = {"import": ("bench-import", "bench-import-secret"), "cluster": ("bench-ro", "bench-ro-s")}
DOMAIN = "docs.example.com"
LABEL = "2026-11-21"


def main() -> None:
    print(machine(), flush=True)
    with tempfile.TemporaryDirectory(prefix="mirror-bench-serve-") as temp:
        work = Path(temp)
        bundle = work / "bundle.tar.gz"
        digest = _random_file(bundle, SIZE_MIB * MiB)
        with _seaweed(work) as endpoint:
            _publish(endpoint, bundle, digest)
            with _serve(work, endpoint) as (url, pid):
                exact = _clients(f"{url}/domains/{DOMAIN}/{LABEL}/bundle.tar.gz", digest, True)
                served = f"{url}/domains/{DOMAIN}/{LABEL}/bundle.tar.gz"
                rate = _clients(served, digest, False)
                with _nginx(work, work / "cache" / "bundles" / digest) as peer:
                    pairs = _alternate(served, peer, digest)
                peak, cpu = _peak_rss_mib(pid), _cpu_seconds(pid)
    total = CLIENTS * SIZE_MIB
    print(
        f"{CLIENTS} clients x {SIZE_MIB} MiB, all byte-exact: {exact:.1f} s "
        f"({total / exact:.0f} MiB/s with sha256sum on the client side)"
    )
    print(
        f"{CLIENTS} clients x {SIZE_MIB} MiB to /dev/null: {rate:.1f} s ({total / rate:.0f} MiB/s)"
    )
    print(f"mirror serve: peak RSS {peak:.1f} MiB, CPU {cpu:.1f} s for every round and the fill")
    ratios = sorted(nginx / mirror for mirror, nginx in pairs)
    mirror_median = statistics.median(m for m, _ in pairs)
    nginx_median = statistics.median(n for _, n in pairs)
    print(
        f"beside nginx, {len(pairs)} alternating rounds of {CLIENTS} clients: mirror serve "
        f"{mirror_median:.1f} s ({total / mirror_median:.0f} MiB/s), nginx {nginx_median:.1f} s "
        f"({total / nginx_median:.0f} MiB/s); median ratio nginx/mirror "
        f"{statistics.median(ratios):.2f}x (goal >= 0.8x; rounds "
        f"{', '.join(f'{r:.2f}' for r in ratios)}); "
        f"load {os.getloadavg()[0]:.1f}"
    )


def _alternate(served: str, peer: str, digest: str) -> list[tuple[float, float]]:
    """ROUNDS rounds of both, the first of each pair alternating: (mirror s, nginx s)."""
    pairs = []
    for round_ in range(ROUNDS):
        if round_ % 2:
            nginx = _clients(peer, digest, False)
            mirror = _clients(served, digest, False)
        else:
            mirror = _clients(served, digest, False)
            nginx = _clients(peer, digest, False)
        pairs.append((mirror, nginx))
    return pairs


@contextlib.contextmanager
def _nginx(work: Path, cached: Path) -> Iterator[str]:
    """Debian's nginx serving the cached file at /bundle.tar.gz (sendfile, as a file server
    is set up), on a free loopback port; its workers run as this user (the bench's private
    temporary directory is not for nobody)."""
    binary = shutil.which("nginx") or "/usr/sbin/nginx"
    if not Path(binary).exists():
        raise SystemExit("nginx is missing: apt-get install nginx-light")
    root = work / "nginx"
    (root / "logs").mkdir(parents=True, exist_ok=True)
    (root / "html").mkdir(exist_ok=True)
    (root / "html" / "bundle.tar.gz").symlink_to(cached)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    (root / "nginx.conf").write_text(
        f"user {getpass.getuser()}; daemon off; worker_processes auto; pid nginx.pid;\n"
        "error_log logs/error.log;\n"
        "events { worker_connections 1024; }\n"
        "http { access_log off; sendfile on; tcp_nopush on; default_type application/gzip;\n"
        f"  server {{ listen 127.0.0.1:{port}; root {root / 'html'}; }} }}\n"
    )
    process = subprocess.Popen([binary, "-p", str(root), "-c", str(root / "nginx.conf")])
    url = f"http://127.0.0.1:{port}/bundle.tar.gz"
    try:
        deadline = time.monotonic() + 60
        while not _answers(url):
            if time.monotonic() > deadline or process.poll() is not None:
                raise SystemExit("nginx did not start")
            time.sleep(0.1)
        yield url
    finally:
        process.terminate()
        process.wait(60)


def _answers(url: str) -> bool:
    try:
        request = urllib.request.Request(url, method="HEAD")
        with urllib.request.urlopen(request, timeout=5) as answer:
            return bool(answer.status == 200)
    except OSError:
        return False


def _random_file(path: Path, size: int) -> str:
    digest = hashlib.sha256()
    with open(path, "wb") as out:
        for _ in range(size // MiB):
            block = os.urandom(MiB)
            digest.update(block)
            out.write(block)
    return digest.hexdigest()


@contextlib.contextmanager
def _seaweed(work: Path) -> Iterator[str]:
    from mirror.sim.seaweed import ADMIN, READ_ONLY, READ_WRITE, Identity, SeaweedServer

    identities = [
        Identity("admin", "bench-admin", "bench-admin-secret", ADMIN),
        Identity("import", *ACCESS["import"], READ_WRITE),
        Identity("cluster", *ACCESS["cluster"], READ_ONLY),
    ]
    with SeaweedServer(work / "s3", identities) as server:
        yield server.url


def _client(endpoint: str, who: str) -> object:
    import boto3

    key, secret = ACCESS.get(who, ("bench-admin", "bench-admin-secret"))
    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id=key,
        aws_secret_access_key=secret,
    )


def _publish(endpoint: str, bundle: Path, digest: str) -> None:
    """The version in the bucket's layout: bundle, manifest, index (mirror.airgap.layout)."""
    from mirror.airgap.layout import Index, IndexEntry, VersionManifest
    from mirror.airgap.s3.multipart import upload_blob
    from mirror.airgap.s3.objectstore import ObjectStore

    _client(endpoint, "admin").create_bucket(Bucket="bench")  # type: ignore[attr-defined]
    store = ObjectStore(_client(endpoint, "import"), "bench")  # type: ignore[arg-type]
    key = store.key(DOMAIN, LABEL, "bundle.tar.gz")
    size = bundle.stat().st_size
    with open(bundle, "rb") as source:
        upload_blob(store, key, source, sha256=digest, size=size)
    now = "2026-11-21T02:00:00Z"
    manifest = VersionManifest(
        domain=DOMAIN,
        version=LABEL,
        object=key,
        sha256=digest,
        size=size,
        archive_format="tar.gz",
        tree_sha256="0" * 64,
        exported_at=now,
        imported_at=now,
        transfer_sequence=1,
        source_id="bench",
    )
    store.put_immutable(
        store.key(DOMAIN, LABEL, "manifest.json"),
        manifest.to_bytes(),
        identity={"bundle-sha256": digest},
    )
    entry = IndexEntry(
        version=LABEL,
        sha256=digest,
        size=size,
        object=key,
        manifest=store.key(DOMAIN, LABEL, "manifest.json"),
        imported_at=now,
    )
    index = Index(domain=DOMAIN, updated_at=now, versions=[entry])
    store.write_json(store.key(DOMAIN, "index.json"), index.as_dict(), if_match=None)


@contextlib.contextmanager
def _serve(work: Path, endpoint: str) -> Iterator[tuple[str, int]]:
    config = work / "config.toml"
    config.write_text(
        f'[target]\nendpoint_url = "{endpoint}"\nbucket = "bench"\n'
        f'[serve]\nlisten = "127.0.0.1:0"\ncache_dir = "{work / "cache"}"\n'
    )
    key, secret = ACCESS["cluster"]
    env = {
        **os.environ,
        "AWS_ACCESS_KEY_ID": key,
        "AWS_SECRET_ACCESS_KEY": secret,
        "AWS_EC2_METADATA_DISABLED": "true",
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "mirror", "--config", str(config), "-q", "serve"],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert process.stdout is not None
        url = process.stdout.readline().split()[-1]
        deadline = time.monotonic() + 600
        while not _ready(url):
            if time.monotonic() > deadline:
                raise SystemExit("mirror serve did not get ready in 10 minutes")
            time.sleep(0.2)
        yield url, process.pid
    finally:
        process.terminate()
        process.wait(60)


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/readyz", timeout=5) as answer:
            return bool(answer.status == 200)
    except OSError:
        return False


def _clients(url: str, digest: str, hashed: bool) -> float:
    curl = shutil.which("curl") or "curl"
    sink = f"{curl} -sf {url} | sha256sum" if hashed else f"{curl} -sf -o /dev/null {url}"
    started = time.monotonic()
    running = [
        subprocess.Popen(["sh", "-c", sink], stdout=subprocess.PIPE, text=True)
        for _ in range(CLIENTS)
    ]
    outputs = [process.communicate()[0] for process in running]
    took = time.monotonic() - started
    if any(process.returncode for process in running):
        raise SystemExit("a client failed")
    if hashed and {out.split()[0] for out in outputs} != {digest}:
        raise SystemExit(f"a client got other bytes: {json.dumps(sorted(set(outputs)))}")
    return took


def _peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


if __name__ == "__main__":
    main()
