"""`mirror chart` run as operators run it (subprocesses, real S3 server), and the chart's part."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from mirror.airgap import chart
from mirror.airgap.s3.objectstore import ObjectStore
from mirror.archive import extract_archive
from mirror.config import TargetSettings
from tests.airgap.chart.seeding import DOMAIN, Seeded, seed_version
from tests.fixtures.cli import REPO, mirror_cli, write_config


class Operator:
    """Runs `mirror --config CONFIG ...` against the test bucket."""

    def __init__(self, config: Path) -> None:
        self.config = config

    def __call__(self, *args: str) -> subprocess.CompletedProcess[str]:
        return mirror_cli("--config", str(self.config), *args, cwd=REPO)

    def json(self, *args: str) -> tuple[int, dict[str, Any]]:
        done = mirror_cli("--config", str(self.config), "--json", *args, cwd=REPO)
        return done.returncode, json.loads(done.stdout)


def make_config(path: Path, target: TargetSettings, **chart_settings: Any) -> Path:
    return write_config(
        path,
        {
            "target": {
                "endpoint_url": target.endpoint_url,
                "bucket": target.bucket,
                "prefix": target.prefix,
                "region": target.region,
                "presign_ttl": "2d",
            },
            "chart": chart_settings,
            "exports": [{"domain": DOMAIN}],
        },
    )


@pytest.fixture
def seeded(object_store: ObjectStore, tmp_path: Path) -> tuple[Seeded, Seeded]:
    return (
        seed_version(object_store, tmp_path, "2026-11-20"),
        seed_version(object_store, tmp_path, "2026-11-21"),
    )


@pytest.fixture
def operator(tmp_path: Path, target_settings: TargetSettings) -> Operator:
    marker = tmp_path / "on_change.log"
    config = make_config(
        tmp_path / "config.toml",
        target_settings,
        values_path=str(tmp_path / "deploy" / "{domain}.values.yaml"),
        on_change=f"sh -c 'echo \"$MIRROR_DOMAIN $MIRROR_VERSION\" >> {marker}'",
        refresh_before="3d",
    )
    return Operator(config)


def test_operator_session(
    operator: Operator, seeded: tuple[Seeded, Seeded], object_store: ObjectStore, tmp_path: Path
) -> None:
    older, newest = seeded
    values_file = tmp_path / "values.yaml"

    done = operator("chart", "values", DOMAIN, "--out", str(values_file))
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(
        f"wrote {values_file}: {DOMAIN} {newest.version}; bundleUrl expires"
    )
    assert "(presigned, 2d)" in done.stdout
    assert values_file.read_text().startswith("# bundleUrl expires ")

    done = operator("chart", "check", str(values_file))
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"ok: {DOMAIN} {newest.version} from 127.0.0.1")
    assert "X-Amz-Signature" not in done.stdout + done.stderr

    done = operator("chart", "values", DOMAIN, "--pin", older.version)
    assert done.returncode == 0, done.stderr
    assert yaml.safe_load(done.stdout)["staticExport"]["version"] == older.version
    assert "bundleUrl expires" in done.stderr

    code, document = operator.json("chart", "values", DOMAIN, "--version", "2020-01-01")
    assert code == 3
    assert "versions: 2026-11-20, 2026-11-21" in document["error"]

    for version in (older.version, newest.version):
        assert operator("chart", "promote", DOMAIN, version).returncode == 0
    done = operator("chart", "rollback", DOMAIN)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"{DOMAIN}: rolled back from {newest.version} to {older.version}")
    code, history = operator.json("chart", "history", DOMAIN)
    assert code == 0
    assert history["current"] == older.version
    assert [(e["version"], e["action"], e["current"]) for e in history["history"]] == [
        (older.version, "rollback", True),
        (newest.version, "promote", False),
        (older.version, "promote", False),
    ]
    done = operator("chart", "rollback", DOMAIN)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        f"mirror: error: nothing to roll back to: {older.version} is the oldest promotion of "
        f"{DOMAIN} left; the later ones ({newest.version}) were rolled back "
        f"(make one current again with: mirror chart promote {DOMAIN} VERSION)"
    ]


def test_check_exit_codes(
    operator: Operator,
    seeded: tuple[Seeded, Seeded],
    object_store: ObjectStore,
    target_settings: TargetSettings,
    tmp_path: Path,
) -> None:
    older, newest = seeded
    values_file = tmp_path / "values.yaml"
    chart.write_values(chart.render_values(object_store, target_settings, DOMAIN), values_file)

    done = operator("chart", "check", str(values_file), "--warn", "8d")
    assert done.returncode == 1
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("mirror: error: the bundleUrl of ") and "(warning at 8d)" in line

    done = operator("chart", "check", str(values_file), "--warn", "soon")
    assert done.returncode == 2 and "not a duration" in done.stderr

    missing = tmp_path / "missing.yaml"
    url, _ = object_store.presign_get(object_store.key(DOMAIN, "2031-01-01", "bundle.tar.gz"), 600)
    missing.write_text(yaml.safe_dump({"staticExport": {"enabled": True, "bundleUrl": url}}))
    code, report = operator.json("chart", "check", str(missing))
    assert code == 3
    assert report["status"] == "missing" and report["exit_code"] == 3

    short = tmp_path / "short.yaml"
    ttl_1s = target_settings.model_copy(update={"presign_ttl": 1.0})
    chart.write_values(chart.render_values(object_store, ttl_1s, DOMAIN, older.version), short)
    time.sleep(2.1)
    code, report = operator.json("chart", "check", str(short))
    assert code == 1 and report["status"] == "expired"
    assert report["seconds_left"] < 0

    object_store.client.put_object(
        Bucket=object_store.bucket, Key=newest.key, Body=b"not the bundle you published"
    )
    done = operator("chart", "check", str(values_file))
    assert done.returncode == 5
    assert "replaced or damaged" in done.stderr
    assert "mirror-test-secret" not in done.stdout + done.stderr

    done = operator("chart", "check", str(tmp_path / "absent.yaml"))
    assert done.returncode == 3 and "does not exist" in done.stderr


def test_refresh_from_the_timer(
    operator: Operator, seeded: tuple[Seeded, Seeded], object_store: ObjectStore, tmp_path: Path
) -> None:
    older, newest = seeded
    marker = tmp_path / "on_change.log"
    values_file = tmp_path / "deploy" / f"{DOMAIN}.values.yaml"

    code, first = operator.json("chart", "refresh")
    assert code == 0, first
    assert [(r["action"], r["reason"], r["hook_exit"]) for r in first["results"]] == [
        ("rendered", "missing", 0)
    ]
    assert marker.read_text() == f"{DOMAIN} {newest.version}\n"
    # presign_ttl 2d is inside refresh_before 3d: every run renders again, as it should.
    code, second = operator.json("chart", "refresh", "--domain", DOMAIN)
    reason = second["results"][0]["reason"]  # "2d" when run within half a second of the first
    assert code == 0 and re.fullmatch(r"link expires in (2d|1d23h(\d+m)?)", reason), reason

    chart.promote(object_store, DOMAIN, older.version)
    done = operator("chart", "refresh")
    assert done.returncode == 0, done.stderr
    assert (
        f"wrote {values_file}: {DOMAIN} {older.version} (version {newest.version} -> "
        in done.stdout
    )
    assert marker.read_text().splitlines()[-1] == f"{DOMAIN} {older.version}"
    assert operator("chart", "check", str(values_file)).returncode == 0


def test_refresh_hook_failure_and_fresh_files(
    seeded: tuple[Seeded, Seeded], target_settings: TargetSettings, tmp_path: Path
) -> None:
    config = make_config(
        tmp_path / "config.toml",
        target_settings,
        values_path=str(tmp_path / "values.yaml"),
        on_change="sh -c 'echo kubectl: connection refused >&2; exit 3'",
        refresh_before="1h",
    )
    operator = Operator(config)
    done = operator("chart", "refresh")
    assert done.returncode == 1
    assert "chart.on_change (sh) exited with 3" in done.stderr
    assert "kubectl: connection refused" in done.stderr
    assert (tmp_path / "values.yaml").exists()
    done = operator("chart", "refresh")  # the file is fresh now: nothing to do, no hook
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"kept {tmp_path / 'values.yaml'}: {DOMAIN} ")


def test_the_chart_can_deploy_from_the_values_file_alone(
    seeded: tuple[Seeded, Seeded],
    object_store: ObjectStore,
    target_settings: TargetSettings,
    tmp_path: Path,
) -> None:
    """Plays the vendor chart at pod start: values file in, site out, no S3 credentials."""
    values_file = tmp_path / "values.yaml"
    chart.write_values(chart.render_values(object_store, target_settings, DOMAIN), values_file)

    values = yaml.safe_load(values_file.read_text())["staticExport"]
    assert values["enabled"] is True
    download = tmp_path / "pod" / "bundle"
    download.parent.mkdir()
    with httpx.Client(timeout=30) as http, http.stream("GET", values["bundleUrl"]) as response:
        assert response.status_code == 200
        with download.open("wb") as handle:
            for chunk in response.iter_bytes(1024 * 1024):
                handle.write(chunk)
    site = tmp_path / "pod" / "site"
    report = extract_archive(download, site)
    assert report.has_index_html
    assert (site / "index.html").read_bytes().startswith(b"<html>")
    assert (site / "version.txt").read_text() == f"{DOMAIN} {values['version']}\n"


def test_import_promote_values_check(
    transfer_app: Any,
    key_pair: tuple[Path, Path],
    target_settings: TargetSettings,
    tmp_path: Path,
) -> None:
    """Connected side packs; `transfer import --promote` publishes; the chart values follow."""
    from mirror.outbound.pack import pack
    from tests.fixtures.s3 import transfer_config
    from tests.fixtures.versions import add_version

    add_version(transfer_app, DOMAIN, "2026-11-21")
    packed = pack(transfer_app, tmp_path / "set")
    assert packed.path is not None
    air = transfer_config(tmp_path / "air-store", key_pair, target_settings)
    air["chart"] = {"values_path": str(tmp_path / "values.yaml")}
    air["exports"] = [{"domain": DOMAIN}]
    operator = Operator(write_config(tmp_path / "air.toml", air))

    done = operator("transfer", "import", str(packed.path), "--promote")
    assert done.returncode == 0, done.stderr
    assert f"promoted {DOMAIN} 2026-11-21" in done.stdout
    code, history = operator.json("chart", "history", DOMAIN)
    assert code == 0 and history["current"] == "2026-11-21"
    assert [(e["version"], e["action"]) for e in history["history"]] == [("2026-11-21", "promote")]

    done = operator("chart", "refresh")
    assert done.returncode == 0, done.stderr
    done = operator("chart", "check", str(tmp_path / "values.yaml"))
    assert done.returncode == 0, done.stderr

    url = yaml.safe_load((tmp_path / "values.yaml").read_text())["staticExport"]["bundleUrl"]
    bundle = tmp_path / "fetched.tar.gz"
    with httpx.Client(timeout=30) as http:
        bundle.write_bytes(http.get(url).raise_for_status().content)
    extract_archive(bundle, tmp_path / "site")
    assert (tmp_path / "site" / "index.html").read_text() == f"<h1>{DOMAIN} 2026-11-21</h1>"


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze not installed")
def test_refresh_units_verify_clean(tmp_path: Path) -> None:
    """`verify` insists that ExecStart exists: /usr/local/bin/mirror (where the installer
    links it) is checked through copies whose ExecStart names an existing binary."""
    units = []
    for name in ("mirror-chart-refresh.service", "mirror-chart-refresh.timer"):
        text = (REPO / "systemd" / name).read_text()
        if name.endswith(".service"):
            assert "ExecStart=/usr/local/bin/mirror chart refresh\n" in text
            existing = shutil.which("true") or "/bin/true"
            text = text.replace("ExecStart=/usr/local/bin/mirror ", f"ExecStart={existing} ")
        (tmp_path / name).write_text(text)
        units.append(tmp_path / name)
    done = subprocess.run(
        ["systemd-analyze", "verify", *map(str, units)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    problems = [
        line
        for line in done.stderr.splitlines()
        if "mirror-chart-refresh" in line and "Failed to read $container" not in line
    ]
    assert problems == []
    service = units[0].read_text()
    for line in (
        "Type=oneshot",
        "DynamicUser=yes",
        "ProtectSystem=strict",
        "ConfigurationDirectory=mirror",
    ):
        assert line in service.splitlines()
    timer = units[1].read_text().splitlines()
    assert "OnCalendar=hourly" in timer and "Persistent=true" in timer
    assert any(line.startswith("RandomizedDelaySec=") for line in timer)
