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

Every wait has a deadline and ends in one line saying what did not happen (SystemExit):
serve's address on its stdout (START_SECONDS), its readiness (READY_SECONDS, or at once when
it exits), a round of clients (a client that receives under 1 KiB/s for STALL_SECONDS is
cut by curl; a round past its deadline is killed). Serve's log (its stderr, a file in the
bench's temporary directory) is shown, its last lines, when it did not start or get ready.
"""

from __future__ import annotations

import contextlib
import getpass
import hashlib
import json
import os
import select
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
START_SECONDS = 120
"""From `mirror serve` started to its address on stdout (it binds before anything else)."""
READY_SECONDS = 600
"""From its address to /readyz 200: the fill of SIZE_MIB from the bench's SeaweedFS."""
STALL_SECONDS = 60
"""A client receiving under 1 KiB/s this long is cut (curl --speed-time)."""
FLOOR_MIB_S = 10
"""A round of CLIENTS is given 120 s plus CLIENTS * SIZE_MIB at this aggregate rate."""


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
        _stop(process)


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
    log = work / "serve.log"
    with open(log, "wb") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-m", "mirror", "--config", str(config), "-q", "serve"],
            stdout=subprocess.PIPE,
            stderr=stderr,
            env=env,
        )
    try:
        url = _announced(process, log)
        _wait_ready(process, url, log)
        yield url, process.pid
    finally:
        _stop(process)


def _stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL after 60 s: a server that does not stop holds no run."""
    process.terminate()
    try:
        process.wait(60)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(60)


def _announced(process: subprocess.Popen[bytes], log: Path) -> str:
    """The address `mirror serve` says on its first stdout line: a JSON record with `url`
    off a terminal (its stderr here is a file), else the line's last word."""
    assert process.stdout is not None
    readable, _, _ = select.select([process.stdout], [], [], START_SECONDS)
    if not readable:
        _fail(f"mirror serve said nothing on stdout in {START_SECONDS} s (its address)", log)
    line = process.stdout.readline().decode()
    if not line:  # its stdout closed: it ended
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(10)
        _fail(f"mirror serve ended (exit {process.returncode}) before it said its address", log)
    with contextlib.suppress(ValueError, TypeError, KeyError):
        return str(json.loads(line)["url"])
    return line.split()[-1]


def _wait_ready(process: subprocess.Popen[bytes], url: str, log: Path) -> None:
    deadline = time.monotonic() + READY_SECONDS
    while not _ready(url):
        if process.poll() is not None:
            _fail(f"mirror serve exited ({process.returncode}) before it was ready", log)
        if time.monotonic() > deadline:
            _fail(f"mirror serve was not ready within {READY_SECONDS} s", log)
        time.sleep(0.2)


def _fail(line: str, log: Path) -> None:
    tail = log.read_text(errors="replace").splitlines()[-8:] if log.exists() else []
    print("\n".join(f"  serve.log: {said[:400]}" for said in tail), file=sys.stderr)
    raise SystemExit(f"bench serve_clients: {line}")


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/readyz", timeout=5) as answer:
            return bool(answer.status == 200)
    except OSError:
        return False


def _clients(url: str, digest: str, hashed: bool) -> float:
    """CLIENTS fetches of `url` at once (each hashed, or into /dev/null): the wall time.
    SystemExit naming the first client that failed, or the round's deadline."""
    curl = f"curl -sS -f --speed-limit 1024 --speed-time {STALL_SECONDS}"
    sink = f"{curl} {url} | sha256sum" if hashed else f"{curl} -o /dev/null {url}"
    argv = ["bash", "-o", "pipefail", "-c", sink]
    allowed = 120 + CLIENTS * SIZE_MIB / FLOOR_MIB_S
    started = time.monotonic()
    running = [
        subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(CLIENTS)
    ]
    try:
        outputs = [_finished(process, started + allowed) for process in running]
    finally:
        for process in running:
            if process.poll() is None:
                process.kill()
                process.wait()
    took = time.monotonic() - started
    if hashed and {out.split()[0] for out in outputs} != {digest}:
        raise SystemExit(f"a client got other bytes: {json.dumps(sorted(set(outputs)))}")
    return took


def _finished(process: subprocess.Popen[str], deadline: float) -> str:
    """One client's stdout once it ended well; SystemExit when it failed or is still at it
    at `deadline`."""
    try:
        out, err = process.communicate(timeout=max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        raise SystemExit(
            f"bench serve_clients: a round of {CLIENTS} clients x {SIZE_MIB} MiB was not done "
            f"by its deadline (at least {FLOOR_MIB_S} MiB/s in all)"
        ) from None
    if process.returncode:
        raise SystemExit(
            f"bench serve_clients: a client failed (exit {process.returncode}): {err.strip()}"
        )
    return out


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
