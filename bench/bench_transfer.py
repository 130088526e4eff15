"""Transfer throughput and memory: pack, verify and import of one big bundle vs common tools.

A BENCH_TRANSFER_MIB (default 2048) MiB bundle (a real tar archive of random
bytes, so nothing compresses) is put into a fresh store and index. Measured in
the same run, each in its own process so its peak RSS is its own:
- `sha256sum FILE` and `cp FILE` (the local references),
- `mirror transfer pack OUT --max-size 512MiB` (copy + hash every part and the whole),
- `mirror transfer verify OUT` (signature, every part's hash, the joined blob's hash),
- `aws s3 cp FILE s3://...` (the upload reference) and `mirror transfer import OUT`
  (verify again, then a streamed multipart upload that re-hashes while reading),
- `mirror transfer import` of a set 1/8 the size, to show memory does not grow with size.
The S3 API server is $MIRROR_TEST_S3_ENDPOINT (make bench) or a moto server started here.
"""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

from bench.common import Measurement, baseline_rss_mib, print_table, run_timed
from mirror.config import settings_from_dict
from mirror.store.app import App
from mirror.store.models import Bundle, Version
from mirror.transferset.keys import generate_keypair

MiB = 1024 * 1024
CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "bench-access",
    "AWS_SECRET_ACCESS_KEY": "bench-secret",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_EC2_METADATA_DISABLED": "true",
}


class _RandomStream(io.RawIOBase):
    """`size` pseudo-random bytes, produced as they are read (constant memory)."""

    def __init__(self, size: int) -> None:
        self.left = size
        self.block = os.urandom(MiB)
        self.counter = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if self.left <= 0:
            return 0
        self.counter += 1
        chunk = hashlib.sha256(self.counter.to_bytes(8, "big")).digest() + self.block
        n = min(len(buffer), len(chunk), self.left)
        buffer[:n] = chunk[:n]
        self.left -= n
        return n


def make_bundle(path: Path, size: int) -> None:
    with tarfile.open(path, "w") as archive:
        info = tarfile.TarInfo("site/assets/big.bin")
        info.size = size
        archive.addfile(info, io.BufferedReader(_RandomStream(size), buffer_size=MiB))
        page = b"<h1>bench</h1>"
        info = tarfile.TarInfo("site/index.html")
        info.size = len(page)
        archive.addfile(info, io.BytesIO(page))


def store_bundle(app: App, source: Path, domain: str, label: str) -> tuple[str, int]:
    sha256, size = app.store.add_file(source)
    source.unlink()
    with app.db.session() as session:
        if session.get(Bundle, sha256) is None:
            session.add(
                Bundle(sha256=sha256, size=size, format="tar", tree_sha256=sha256, file_count=2)
            )
            session.flush()
        session.add(Version(domain=domain, label=label, bundle_sha256=sha256, tree_sha256=sha256))
    return sha256, size


def s3_endpoint(work: Path) -> tuple[str, subprocess.Popen[bytes] | None]:
    url = os.environ.get("MIRROR_TEST_S3_ENDPOINT", "")
    if url:
        return url.rstrip("/"), None
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    log = open(work / "moto.log", "wb")  # noqa: SIM115
    process = subprocess.Popen(
        [str(Path(sys.executable).parent / "moto_server"), "-H", "127.0.0.1", "-p", str(port)],
        stdout=log,
        stderr=log,
    )
    url = f"http://127.0.0.1:{port}"
    for _ in range(300):
        try:
            urllib.request.urlopen(url + "/moto-api/", timeout=1).close()
            return url, process
        except OSError:
            time.sleep(0.1)
    process.kill()
    raise SystemExit("moto_server did not start")


def write_config(path: Path, store: Path, key: Path, pub: Path, endpoint: str, bucket: str) -> Path:
    path.write_text(
        f"""[store]
path = "{store}"

[transfer]
signing_key = "{key}"
source_id = "bench"
max_size = "512MiB"

[target]
endpoint_url = "{endpoint}"
bucket = "{bucket}"
trusted_keys = ["{pub}"]
"""
    )
    return path


def mirror(*args: str) -> list[str]:
    return [sys.executable, "-m", "mirror", *args]


def main() -> None:
    size_mib = int(os.environ.get("BENCH_TRANSFER_MIB", "2048"))
    work = Path(tempfile.mkdtemp(prefix="mirror-bench-transfer-", dir=os.environ.get("TMPDIR")))
    env = {**os.environ, **CREDENTIALS}
    moto: subprocess.Popen[bytes] | None = None
    try:
        endpoint, moto = s3_endpoint(work)
        import boto3

        client = boto3.client("s3", endpoint_url=endpoint, **_boto_credentials())
        bucket = f"bench-{uuid.uuid4().hex[:10]}"
        client.create_bucket(Bucket=bucket)
        made = generate_keypair(work / "transfer")
        store = work / "store"
        config = write_config(
            work / "config.toml", store, made.private_path, made.public_path, endpoint, bucket
        )
        app = App(settings_from_dict({"store": {"path": str(store)}}))
        print(f"making a {size_mib} MiB bundle in {work}", flush=True)
        make_bundle(work / "bundle.tar", size_mib * MiB)
        sha256, size = store_bundle(app, work / "bundle.tar", "bench.example.com", "2026-11-21")
        blob = app.store.open(sha256)
        rows: list[Measurement] = [
            run_timed("sha256sum FILE", [_tool("sha256sum"), str(blob)], size),
            run_timed("cp FILE", [_tool("cp"), str(blob), str(work / "copy")], size),
        ]
        (work / "copy").unlink()
        set_dir = work / "usb" / "set-1"
        set_dir.parent.mkdir()
        cfg = ["--config", str(config)]
        rows.append(
            run_timed(
                "mirror transfer pack (512 MiB parts)",
                mirror(*cfg, "transfer", "pack", str(set_dir), "--max-size", "512MiB"),
                size,
                env,
            )
        )
        parts = sorted(p.name for p in (set_dir / "blobs").iterdir())
        rows.append(
            run_timed(
                "mirror transfer verify",
                mirror(*cfg, "transfer", "verify", str(set_dir)),
                size,
                env,
            )
        )
        rows.append(
            run_timed(
                "aws s3 cp FILE",
                [
                    str(Path(sys.executable).parent / "aws"),
                    "s3",
                    "cp",
                    "--only-show-errors",
                    "--endpoint-url",
                    endpoint,
                    str(blob),
                    f"s3://{bucket}/aws-cli-copy.tar",
                ],
                size,
                env,
            )
        )
        client.delete_object(Bucket=bucket, Key="aws-cli-copy.tar")
        rows.append(
            run_timed(
                "mirror transfer import (+verify)",
                mirror(*cfg, "transfer", "import", str(set_dir)),
                size,
                env,
            )
        )
        head = client.head_object(
            Bucket=bucket, Key="static-export/bench.example.com/2026-11-21/bundle.tar"
        )
        if head["Metadata"].get("sha256") != sha256 or head["ContentLength"] != size:
            raise SystemExit("the imported object does not match the bundle")
        shutil.rmtree(set_dir)
        app.store.remove(sha256)

        small_mib = max(1, size_mib // 8)
        make_bundle(work / "small.tar", small_mib * MiB)
        _, small_size = store_bundle(app, work / "small.tar", "bench.example.com", "2026-11-22")
        small_set = work / "usb" / "set-2"
        subprocess.run(
            mirror(*cfg, "transfer", "pack", str(small_set), "--max-size", "512MiB"),
            check=True,
            env=env,
            stdout=subprocess.DEVNULL,
        )
        rows.append(
            run_timed(
                f"mirror transfer import, 1/{size_mib // small_mib} size",
                mirror(*cfg, "transfer", "import", str(small_set)),
                small_size,
                env,
            )
        )
        app.close()
        print(f"blob {size / MiB:.0f} MiB in {len(parts)} parts: {', '.join(parts)}")
        print_table(rows, "sha256sum FILE")
        aws = next(r for r in rows if r.name == "aws s3 cp FILE")
        imported = next(r for r in rows if r.name.startswith("mirror transfer import (+"))
        print(
            f"import vs aws s3 cp: {imported.mib_per_second / aws.mib_per_second:.2f}x throughput "
            f"(import also re-verifies the whole set first), peak RSS "
            f"{imported.peak_rss_mib:.0f} MiB vs {aws.peak_rss_mib:.0f} MiB"
        )
        alone = baseline_rss_mib("mirror.cli.transfer, mirror.airgap.importer")
        print(f"interpreter + mirror's imports alone: {alone:.0f} MiB peak RSS")
    finally:
        if moto is not None:
            moto.terminate()
            moto.wait(10)
        shutil.rmtree(work, ignore_errors=True)


def _tool(name: str) -> str:
    found = shutil.which(name)
    if not found:
        raise SystemExit(f"{name} is not installed")
    return found


def _boto_credentials() -> dict[str, str]:
    return {
        "aws_access_key_id": CREDENTIALS["AWS_ACCESS_KEY_ID"],
        "aws_secret_access_key": CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
        "region_name": CREDENTIALS["AWS_DEFAULT_REGION"],
    }


if __name__ == "__main__":
    main()
