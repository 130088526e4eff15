"""The tool as it ships: the wheel and the offline artefact are built (`mirror bundle-self
--local`, nothing fetched), installed by the artefact's own install.sh into a scratch root,
and the whole pipeline is run with the INSTALLED `mirror` from a directory outside the
source tree, in an environment that cannot see it: the vendor simulator (`mirror sim
serve`), export, pack, verify, import --promote, chart values/check/history, a second and
third export carried as deltas, and chart gc, against the test S3 server.

A subpackage left out of the wheel fails here (the source tree's tests would not notice)."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.artefact import Installed, clean_env
from tests.fixtures.cli import REPO

DOMAIN = "docs.acme.test"


def test_every_package_of_the_source_tree_is_installed(
    installed: Installed, tmp_path: Path
) -> None:
    """Each package directory of mirror/ and migrations/ (as mirror.migrations) is in the
    installed tool, which imports from its own site-packages, never from the source tree."""
    wanted = {
        ".".join(p.parent.relative_to(REPO).parts) for p in (REPO / "mirror").rglob("__init__.py")
    }
    wanted |= {
        ".".join(("mirror", *p.parent.relative_to(REPO).parts))
        for p in (REPO / "migrations").rglob("__init__.py")
    }
    probe = (
        "import importlib, json, sys; names = json.loads(sys.argv[1]); "
        "print(json.dumps({n: importlib.import_module(n).__file__ for n in names}))"
    )
    done = subprocess.run(
        [str(installed.python), "-c", probe, json.dumps(sorted(wanted))],
        cwd=tmp_path,
        env=clean_env(tmp_path),
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    places = json.loads(done.stdout)
    assert set(places) == wanted and "mirror.airgap.chart" in wanted
    assert not any(str(REPO) in place for place in places.values()), places


class Operator:
    """Runs the installed `mirror` from a working directory outside the source tree."""

    def __init__(self, installed: Installed, cwd: Path, config: Path) -> None:
        self.command = str(installed.mirror)
        self.cwd = cwd
        self.env = clean_env(cwd / "home", MIRROR_CONFIG=str(config))
        (cwd / "home").mkdir()

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [self.command, *args],
            cwd=self.cwd,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
        assert done.returncode == 0, f"mirror {' '.join(args)}: {done.stdout}{done.stderr}"
        return done

    def json(self, *args: str) -> Any:
        return json.loads(self.run("--json", *args).stdout)


@pytest.fixture
def simulator(installed: Installed, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """`mirror sim serve --port 0` from the installed tool: (its URL, its admin key)."""
    key = "mint_installed_" + os.urandom(8).hex()
    argv = [str(installed.mirror), "sim", "serve", "--port", "0", "--key", key]
    argv += ["--queue-seconds", "0.1", "--run-seconds", "0.3", "--pages", "40"]
    argv += ["--changes-per-export", "3"]
    process = subprocess.Popen(
        argv,
        cwd=tmp_path,
        env=clean_env(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert process.stdout is not None
        first = process.stdout.readline()
        assert first.startswith("simulator listening on "), first
        yield first.split()[-1], key
    finally:
        process.terminate()
        process.wait(60)


def write_config(work: Path, api_url: str, s3_endpoint: str, bucket: str) -> Path:
    config = work / "config.toml"
    config.write_text(
        f"""[api]
base_url = "{api_url}"
key_file = "{work / "admin-api-key"}"
poll_interval = "0.1s"
max_poll_interval = "0.5s"

[store]
path = "{work / "store"}"

[[exports]]
domain = "{DOMAIN}"

[transfer]
signing_key = "{work / "keys" / "transfer.key"}"
receipt_keys = ["{work / "keys" / "transfer.pub"}"]
source_id = "installed-test"

[target]
endpoint_url = "{s3_endpoint}"
bucket = "{bucket}"
region = "us-east-1"
transfer_keys = ["{work / "keys" / "transfer.pub"}"]
work_dir = "{work / "rebuild"}"
presign_ttl = "2d"
"""
    )
    return config


@pytest.mark.slow
def test_the_installed_tool_runs_the_whole_pipeline(
    installed: Installed,
    simulator: tuple[str, str],
    s3_endpoint: str,
    bucket: str,
    tmp_path: Path,
) -> None:
    api_url, key = simulator
    work = tmp_path / "operator"
    (work / "rebuild").mkdir(parents=True)
    (work / "usb").mkdir()
    (work / "admin-api-key").write_text(key)
    (work / "admin-api-key").chmod(0o600)
    mirror = Operator(installed, work, write_config(work, api_url, s3_endpoint, bucket))
    mirror.run("keys", "generate", "--out", str(work / "keys" / "transfer"))

    labels = []
    for number in (1, 2, 3):
        exported = mirror.json("export", "run", DOMAIN)
        assert exported["state"] == "stored", exported
        labels.append(exported["version"])
        carried = _carry(mirror, work / "usb" / f"set-{number}")
        assert carried == ("delta" if number > 1 else "full"), (number, carried)
        values = work / f"values-{number}.yaml"
        rendered = mirror.json("chart", "values", DOMAIN, "--out", str(values))
        assert rendered["version"] == exported["version"]
        checked = mirror.json("chart", "check", str(values))
        assert checked["status"] == "ok" and checked["version"] == exported["version"], checked
        assert checked["actual_sha256"] == checked["expected_sha256"] == rendered["sha256"]

    history = mirror.json("chart", "history", DOMAIN)
    assert history["current"] == labels[-1]
    assert [entry["version"] for entry in history["history"]][:3] == labels[::-1]

    collected = mirror.json("chart", "gc", "--keep", "1")
    (domain,) = collected["domains"]
    assert [removed["version"] for removed in domain["removed"]] == [labels[0]]
    assert {kept["version"] for kept in domain["kept"]} == set(labels[1:])
    assert list((work / "rebuild").iterdir()) == []


def _carry(mirror: Operator, set_dir: Path) -> str:
    """Pack, verify, import --promote and ack one set; how its version travelled."""
    packed = mirror.json("transfer", "pack", str(set_dir))
    (item,) = packed["items"]
    verified = mirror.json("transfer", "verify", str(set_dir))
    assert verified["valid"] is True
    imported = mirror.json("transfer", "import", str(set_dir), "--promote")
    assert [i["status"] for i in imported["items"]] == ["published"], imported
    assert imported["promoted"] == [{"domain": DOMAIN, "version": item["version"]}]
    mirror.run("transfer", "ack", str(set_dir / "receipt.json"))
    return "delta" if item.get("delta") else "full"
