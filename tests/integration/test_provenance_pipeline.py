"""Only a working site crosses the gap, with its provenance: the whole pipeline through the real
command line (simulator, store, transfer set, SeaweedFS bucket, chart values, HTTP crawl)."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import random
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from mirror.config import TargetSettings, settings_from_dict
from mirror.sim import Simulator
from mirror.store.app import App
from mirror.transferset.format import MANIFEST, parse_manifest
from mirror.transferset.keys import generate_keypair
from tests.fixtures.cli import mirror_cli, write_config
from tests.fixtures.docs import documented, run_verify
from tests.fixtures.s3 import READ_ONLY_CREDENTIALS, bucket_listing, gap_sides, transfer_config
from tests.fixtures.versions import add_sim_version, add_tree_version

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


ZIPPED = "docs.zipped.test"
SPLICED = "docs.spliced.test"
DOCS = "docs.example.com"
V1, V2 = "2026-11-20", "2026-11-21"
EXAMPLE = {  # what the README's recipe names, and what this test puts in its place
    "s3": "s3://docs-bundles/static-export/docs.example.com/2026-11-24",
    "endpoint": "https://minio.internal:9000",
    "credentials": "/etc/mirror/s3-credentials",
    "key": "/etc/mirror/transfer.pub",
}


def pages(seed: int, count: int, changed: int = 0) -> dict[str, bytes]:
    """`count` pages of random bytes (a delta must be smaller than the bundle), the first
    `changed` of them new."""
    rng = random.Random(seed)
    site = {f"p/{n:03}.html": rng.randbytes(8192) for n in range(count)}
    fresh = random.Random(seed + 1)
    site.update({f"p/{n:03}.html": fresh.randbytes(8192) for n in range(changed)})
    return {"index.html": b"<html>home</html>\n", **site}


def by_hand(
    tmp_path: Path, target: TargetSettings, key: Path, domain: str, version: str, name: str
) -> subprocess.CompletedProcess[str]:
    """The README's fetch and verify blocks, as written, in a directory of their own: aws-cli
    with the cluster's read-only keys, openssl and python3."""
    work = tmp_path / "by-hand" / f"{domain}-{version}"
    work.mkdir(parents=True)
    credentials = work.parent / "read-only-credentials"
    credentials.write_text(
        "[default]\n"
        f"aws_access_key_id = {READ_ONLY_CREDENTIALS['AWS_ACCESS_KEY_ID']}\n"
        f"aws_secret_access_key = {READ_ONLY_CREDENTIALS['AWS_SECRET_ACCESS_KEY']}\n"
    )
    script = documented("provenance-fetch") + documented("provenance-verify")
    actual = {
        "s3": f"s3://{target.bucket}/{target.prefix}/{domain}/{version}",
        "endpoint": target.endpoint_url,
        "credentials": str(credentials),
        "key": str(key),
    }
    for what, example in EXAMPLE.items():
        assert example in script, f"the README's recipe no longer names {example}"
        script = script.replace(example, actual[what])
    script = script.replace("bundle.tar.gz", name)
    bin_dir = str(Path(sys.executable).parent)  # aws-cli, from the dev lock
    env = {
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "HOME": str(work),
        "LANG": "C.UTF-8",
    }
    return subprocess.run(
        ["sh", "-e", "-c", script], cwd=work, env=env, capture_output=True, text=True, check=False
    )


def evidence_of_every_kind(airgap: Path, tmp_path: Path, key_pair: tuple[Path, Path]) -> None:
    """`mirror evidence` of a version imported whole and of one imported as a delta: its
    VERIFY.md passes as written; a record signed by a key the site does not trust is refused
    by `chart check --provenance` (exit 5, one line) and by `mirror evidence`."""
    for domain, version in ((ZIPPED, V1), (DOCS, V2)):
        out = tmp_path / "evidence" / f"{domain}-{version}"
        said = mirror_cli(
            "--config", str(airgap), "evidence", domain, version, "--out", str(out), "--with-object"
        )
        assert said.returncode == 0, said.stderr
        done = run_verify(out)
        assert done.returncode == 0, done.stdout + done.stderr
        assert done.stdout.count("Signature Verified Successfully") == 2, done.stdout
    stranger = generate_keypair(tmp_path / "stranger")
    document = tomllib.loads(airgap.read_text())
    document["target"]["receipt_keys"] = [str(stranger.public_path)]
    untrusting = write_config(tmp_path / "untrusting.toml", document)
    values = tmp_path / f"{DOCS}-{V2}.yaml"
    refused = mirror_cli("--config", str(untrusting), "chart", "check", str(values), "--provenance")
    assert refused.returncode == 5, refused.stderr
    (line,) = [line for line in refused.stderr.splitlines() if line.startswith("mirror:")]
    assert "which is not trusted here" in line, refused.stderr
    out = tmp_path / "evidence" / "refused"
    refused = mirror_cli("--config", str(untrusting), "evidence", DOCS, V2, "--out", str(out))
    assert refused.returncode == 5 and not out.exists(), refused.stderr


@pytest.mark.slow
def test_the_readme_recipe_verifies_whole_and_delta_versions_in_the_bucket_and_a_tampered_one_fails(
    tmp_path: Path,
    key_pair: tuple[Path, Path],
    target_settings: TargetSettings,
    s3_client: Any,
) -> None:
    """A version imported whole (tar.gz, zip) and as each kind of delta: the pack's recipe
    replayed (a simulator site), spliced file by file (a recipe of mostly new bytes is not
    carried); a zip's next version goes whole (no delta is made of a zip: docs/delta.md).
    The bucket holds archives of the signed trees in other bytes; the recipe proves them,
    and `chart check --provenance` too."""
    sides = gap_sides(tmp_path, key_pair, target_settings, presign_ttl="2d")

    def run(config: Path, *args: str) -> dict[str, Any]:
        done = mirror_cli("--config", str(config), "--json", *args)
        assert done.returncode == 0, done.stderr
        return dict(json.loads(done.stdout))

    app = App(settings_from_dict(sides.connected_document))
    try:
        add_sim_version(app, DOCS, V1, export_number=0, site_size=1 << 20, change_share=0.02)
        add_tree_version(app, SPLICED, V1, pages(1, 40))
        add_tree_version(app, ZIPPED, V1, pages(2, 40), archive_format="zip")
        run(sides.connected, "transfer", "pack", str(sides.usb / "set-1"))
        whole = run(sides.airgap, "transfer", "import", str(sides.usb / "set-1"))
        add_sim_version(app, DOCS, V2, export_number=1, site_size=1 << 20, change_share=0.02)
        add_tree_version(app, SPLICED, V2, pages(1, 40, changed=8))
        add_tree_version(app, ZIPPED, V2, pages(2, 40, changed=2), archive_format="zip")
    finally:
        app.close()
    first = parse_manifest((sides.usb / "set-1" / MANIFEST).read_bytes())
    subjects = {item.domain: item.provenance.subject_sha256 for item in first.items}  # type: ignore[union-attr]
    assert {item["domain"]: item["sha256"] for item in whole["items"]} == subjects  # byte for byte
    run(sides.connected, "transfer", "pack", str(sides.usb / "set-2"))
    manifest = parse_manifest((sides.usb / "set-2" / MANIFEST).read_bytes())
    deltas = {item.domain: item.delta for item in manifest.items}
    assert deltas[ZIPPED] is None and deltas[DOCS] is not None and deltas[SPLICED] is not None
    assert deltas[DOCS].recipe is not None  # type: ignore[union-attr]
    assert deltas[SPLICED].spliced and deltas[SPLICED].recipe is None  # type: ignore[union-attr]
    imported = run(sides.airgap, "transfer", "import", str(sides.usb / "set-2"))
    published = {item["domain"]: item["sha256"] for item in imported["items"]}
    signed = {item.domain: item.provenance.subject_sha256 for item in manifest.items}  # type: ignore[union-attr]
    assert published.pop(ZIPPED) == signed[ZIPPED]  # whole: the subject itself
    assert all(published[domain] != signed[domain] for domain in published)  # other bytes

    key = key_pair[1]
    for domain, version, name in [
        (DOCS, V1, "bundle.tar.gz"),
        (ZIPPED, V1, "bundle.zip"),
        (DOCS, V2, "bundle.tar.gz"),
        (SPLICED, V2, "bundle.tar.gz"),
        (ZIPPED, V2, "bundle.zip"),
    ]:
        checked = by_hand(tmp_path, target_settings, key, domain, version, name)
        assert checked.returncode == 0, (domain, version, checked.stdout, checked.stderr)
        assert "Signature Verified Successfully" in checked.stdout
        assert f"{name}: tree OK" in checked.stdout
        values = tmp_path / f"{domain}-{version}.yaml"
        run(sides.airgap, "chart", "values", domain, "--pin", version, "--out", str(values))
        chained = run(sides.airgap, "chart", "check", str(values), "--provenance")
        assert chained["provenance"]["verified"] and chained["record"]["verified"]
    evidence_of_every_kind(sides.airgap, tmp_path, key_pair)

    # The delta's object replaced by another site, its manifest rewritten to match it: only
    # the signed tree tells.
    bucket, prefix = target_settings.bucket, target_settings.prefix
    other = s3_client.get_object(Bucket=bucket, Key=f"{prefix}/{DOCS}/{V1}/bundle.tar.gz")
    body = other["Body"].read()
    s3_client.put_object(Bucket=bucket, Key=f"{prefix}/{DOCS}/{V2}/bundle.tar.gz", Body=body)
    tampered = by_hand(tmp_path / "tampered", target_settings, key, DOCS, V2, "bundle.tar.gz")
    assert tampered.returncode != 0 and "Signature Verified Successfully" in tampered.stdout
    assert tampered.stderr.rstrip().endswith("FAILED"), tampered.stderr
    manifest_key = f"{prefix}/{DOCS}/{V2}/manifest.json"
    described = json.loads(s3_client.get_object(Bucket=bucket, Key=manifest_key)["Body"].read())
    described.update(sha256=hashlib.sha256(body).hexdigest(), size=len(body))
    s3_client.put_object(Bucket=bucket, Key=manifest_key, Body=json.dumps(described).encode())
    values = tmp_path / f"{DOCS}-{V2}.yaml"
    refused = mirror_cli(
        "--config", str(sides.airgap), "chart", "check", str(values), "--provenance"
    )
    assert refused.returncode == 5, refused.stderr
    assert "not the tree its provenance signs" in refused.stderr
