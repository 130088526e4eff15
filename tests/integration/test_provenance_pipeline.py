"""Only a working site crosses the gap, with its provenance: the whole pipeline through the real
command line (simulator, store, transfer set, SeaweedFS bucket, chart values, HTTP crawl)."""

from __future__ import annotations

import base64
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from mirror.config import TargetSettings
from mirror.sim import Simulator
from tests.fixtures.cli import mirror_cli, write_config
from tests.fixtures.s3 import bucket_listing, transfer_config

pytestmark = pytest.mark.s3

CUT = "docs.cut.test"
GOOD = "docs.good.test"


class Side:
    def __init__(self, config: Path, key: str) -> None:
        self.config = config
        self.env = {"MIRROR_API_KEY": key, "AWS_EC2_METADATA_DISABLED": "true"}

    def __call__(self, *args: str) -> subprocess.CompletedProcess[str]:
        return mirror_cli("--config", str(self.config), *args, env=self.env)

    def json(self, *args: str) -> dict[str, Any]:
        done = self("--json", *args)
        assert done.returncode == 0, done.stderr
        document: dict[str, Any] = json.loads(done.stdout)
        return document


@pytest.fixture
def side(
    sim: Simulator, tmp_path: Path, key_pair: tuple[Path, Path], target_settings: TargetSettings
) -> Side:
    document = transfer_config(tmp_path / "store", key_pair, target_settings)
    document["api"] = {
        "base_url": sim.url,
        "poll_interval": "0.05s",
        "max_poll_interval": "0.2s",
        "project_id": "proj_sim",
    }
    document["chart"] = {"values_path": str(tmp_path / "{domain}.values.yaml")}
    document["exports"] = [{"domain": CUT}, {"domain": GOOD}]
    return Side(write_config(tmp_path / "config.toml", document), sim.key)


def statement_of(s3_client: Any, bucket: str, key: str) -> dict[str, Any]:
    envelope = json.loads(s3_client.get_object(Bucket=bucket, Key=key)["Body"].read())
    return dict(json.loads(base64.b64decode(envelope["payload"])))


@pytest.mark.slow
def test_refused_accepted_packed_imported_and_the_reason_is_in_the_bucket(
    sim: Simulator,
    side: Side,
    tmp_path: Path,
    s3_client: Any,
    target_settings: TargetSettings,
) -> None:
    sim.faults.damaged_domains[CUT] = "truncated"
    refused = side("export", "run", CUT)
    assert refused.returncode == 5, refused.stderr
    assert "holds 13 pages but the vendor reported pageCount 40" in refused.stderr
    assert side.json("transfer", "pack", "--dry-run")["nothing"] is True  # never packed

    label = side.json("store", "list")["refused"][0]["version"]
    accepted = side.json("store", "accept", CUT, label, "--reason", "vendor counts redirects")
    packed = side.json("transfer", "pack", str(tmp_path / "set1"))
    assert [i["domain"] for i in packed["items"]] == [CUT]
    assert (tmp_path / "set1" / "provenance" / CUT / f"{accepted['version']}.intoto.json").is_file()
    imported = side("transfer", "import", str(tmp_path / "set1"), "--promote")
    assert imported.returncode == 0, imported.stderr

    key = f"{target_settings.prefix}/{CUT}/{accepted['version']}/provenance.intoto.json"
    assert key in bucket_listing(s3_client, target_settings.bucket)
    said = statement_of(s3_client, target_settings.bucket, key)
    assert said["_type"] == "https://in-toto.io/Statement/v1"
    assert said["subject"][0]["digest"]["sha256"] == accepted_sha(side, CUT)
    predicate = said["predicate"]
    assert predicate["acceptance"]["reason"] == "vendor counts redirects"
    assert predicate["vendor"]["page_count"] == 40
    assert predicate["vendor"]["project_id"] == "proj_sim"
    assert predicate["completeness"]["pages"] == 13

    values = tmp_path / f"{CUT}.values.yaml"
    assert side("chart", "values", CUT, "--out", str(values)).returncode == 0
    history = side.json("chart", "history", CUT)["history"]
    assert history[0]["site"] == (
        "13 pages of pageCount 40, 27 broken links, 0 missing assets; "
        "accepted: vendor counts redirects"
    )
    status = side("status")
    assert f"{CUT} {accepted['version']}: 13 pages of pageCount 40" in status.stdout
    proven = side("chart", "check", str(values), "--provenance")
    assert proven.returncode == 0, proven.stderr
    assert "accepted: vendor counts redirects" in proven.stdout
    # The accepted site is truncated: its index links to pages that are not there.
    crawled = side("--json", "chart", "check", str(values), "--site")
    assert crawled.returncode == 5, crawled.stderr
    document = json.loads(crawled.stdout)
    assert document["status"] == "site-broken" and document["exit_code"] == 5
    site = document["site"]
    assert site["pages"] == 13 and len(site["broken_links"]) == 27
    assert site["broken_links"][0]["source"] == "/"


def accepted_sha(side: Side, domain: str) -> str:
    (version,) = [v for v in side.json("store", "list")["versions"] if v["domain"] == domain]
    return str(version["sha256"])


def test_a_tampered_statement_is_refused_and_a_good_site_is_served_whole(
    sim: Simulator,
    side: Side,
    tmp_path: Path,
    s3_client: Any,
    target_settings: TargetSettings,
) -> None:
    stored = side.json("export", "run", GOOD)
    set_dir = tmp_path / "set1"
    side.json("transfer", "pack", str(set_dir))
    carried = set_dir / "provenance" / GOOD / f"{stored['version']}.intoto.json"
    original = carried.read_bytes()
    envelope = json.loads(original)
    body = base64.b64decode(envelope["payload"]).replace(b'"pages": 40', b'"pages": 41')
    envelope["payload"] = base64.b64encode(body).decode()
    carried.write_bytes(json.dumps(envelope).encode())
    before = bucket_listing(s3_client, target_settings.bucket)
    refused = side("transfer", "import", str(set_dir))
    assert refused.returncode == 5, refused.stderr
    assert "provenance" in refused.stderr and len(refused.stderr.strip().splitlines()) == 1
    assert bucket_listing(s3_client, target_settings.bucket) == before  # nothing published

    carried.write_bytes(original)
    imported = side("transfer", "import", str(set_dir), "--promote")
    assert imported.returncode == 0, imported.stderr
    values = tmp_path / f"{GOOD}.values.yaml"
    assert side("chart", "values", GOOD, "--out", str(values)).returncode == 0
    checked = side("--json", "chart", "check", str(values), "--provenance", "--site")
    assert checked.returncode == 0, checked.stderr
    document = json.loads(checked.stdout)
    assert document["provenance"]["verified"] is True
    assert document["provenance"]["summary"] == (
        "40 pages of pageCount 40, 0 broken links, 0 missing assets"
    )
    assert document["site"]["pages"] == 40
    assert document["site"]["failing_pages"] == [] and document["site"]["broken_links"] == []

    # The same statement, changed in the bucket: the check says so, and `status` with it.
    key = f"{target_settings.prefix}/{GOOD}/{stored['version']}/provenance.intoto.json".lstrip("/")
    s3_client.put_object(Bucket=target_settings.bucket, Key=key, Body=json.dumps(envelope).encode())
    tampered = side("--json", "chart", "check", str(values), "--provenance")
    assert tampered.returncode == 5, tampered.stderr
    document = json.loads(tampered.stdout)
    assert document["status"] == "provenance-failed" and document["exit_code"] == 5
    assert document["provenance"]["verified"] is False
