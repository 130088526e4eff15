"""The air-gap workflow through the real command line, against SeaweedFS on loopback.

keys generate -> pack -> verify -> import (two sides, two configs) -> ack -> pack has nothing
left; push in one step; exit codes and JSON for scripts; no secret in any output.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mirror.config import TargetSettings, settings_from_dict
from mirror.store.app import App
from tests.fixtures.cli import mirror_cli, write_config
from tests.fixtures.s3 import TEST_CREDENTIALS, bucket_listing, transfer_config
from tests.fixtures.versions import add_version

pytestmark = pytest.mark.s3

DOCS = "docs.example.com"


def no_secret(*outputs: str) -> None:
    for output in outputs:
        assert TEST_CREDENTIALS["AWS_SECRET_ACCESS_KEY"] not in output
        assert "PRIVATE KEY" not in output


@pytest.fixture
def sides(tmp_path: Path, target_settings: TargetSettings) -> dict[str, Any]:
    """A connected side (store, signing key) and an air-gapped side (target, trusted key)."""
    keys = tmp_path / "keys"
    keys.mkdir()
    made = mirror_cli("keys", "generate", "--out", str(keys / "transfer"))
    assert made.returncode == 0, made.stderr
    assert "key id" in made.stdout
    no_secret(made.stdout, made.stderr)
    key_pair = (keys / "transfer.key", keys / "transfer.pub")
    receipt = mirror_cli("keys", "generate", "--out", str(keys / "receipt"))
    assert receipt.returncode == 0, receipt.stderr
    store_dir = tmp_path / "store"
    store_dir.mkdir()
    # The README's layout: each side signs with its own key and trusts the other's.
    connected = transfer_config(store_dir, key_pair, max_size="1MiB")
    connected["transfer"]["receipt_keys"] = [str(keys / "receipt.pub")]
    airgap = {
        "target": transfer_config(store_dir, key_pair, target_settings)["target"],
        "store": {"path": str(tmp_path / "unused-airgap-store")},
        "transfer": {"signing_key": str(keys / "receipt.key")},
    }
    full = transfer_config(store_dir, key_pair, target_settings, max_size="1MiB")
    return {
        "connected": write_config(tmp_path / "connected.toml", connected),
        "airgap": write_config(tmp_path / "airgap.toml", airgap),
        "airgap_doc": airgap,
        "push": write_config(tmp_path / "push.toml", full),
        "settings": settings_from_dict(full),
        "pub": key_pair[1],
    }


def test_keys_generate_refuses_to_overwrite(sides: dict[str, Any], tmp_path: Path) -> None:
    again = mirror_cli("keys", "generate", "--out", str(tmp_path / "keys" / "transfer"))
    assert again.returncode == 2
    assert "already exists" in again.stderr
    shown = mirror_cli("--json", "keys", "show", str(sides["pub"]))
    assert shown.returncode == 0 and json.loads(shown.stdout)["kind"] == "public"


def test_pack_verify_import_ack_by_hand(
    sides: dict[str, Any], tmp_path: Path, s3_client: Any, target_settings: TargetSettings
) -> None:
    app = App(sides["settings"])
    try:
        add_version(app, DOCS, "2026-11-20", payload_size=2 * 1024 * 1024)
        add_version(app, "api.example.com", "2026-11-20")
    finally:
        app.close()
    usb = tmp_path / "usb"
    usb.mkdir()
    set_dir = usb / "set-0001"

    packed = mirror_cli(
        "--config", str(sides["connected"]), "--json", "transfer", "pack", str(set_dir)
    )
    assert packed.returncode == 0, packed.stderr
    document = json.loads(packed.stdout)
    assert document["sequence"] == 1 and len(document["items"]) == 2
    assert document["part_count"] == 4

    verified = mirror_cli("--config", str(sides["airgap"]), "transfer", "verify", str(set_dir))
    assert verified.returncode == 0, verified.stderr
    assert "valid set 1" in verified.stdout

    imported = mirror_cli(
        "--config", str(sides["airgap"]), "--json", "transfer", "import", str(set_dir)
    )
    assert imported.returncode == 0, imported.stderr
    result = json.loads(imported.stdout)
    assert [i["status"] for i in result["items"]] == ["published", "published"]
    assert result["receipt"] == str(set_dir / "receipt.json")
    no_secret(imported.stdout, imported.stderr)
    keys = bucket_listing(s3_client, target_settings.bucket)
    assert "static-export/docs.example.com/index.json" in keys

    replay = mirror_cli("--config", str(sides["airgap"]), "transfer", "import", str(set_dir))
    assert replay.returncode == 5
    assert "already imported" in replay.stderr and len(replay.stderr.strip().splitlines()) == 1
    assert bucket_listing(s3_client, target_settings.bucket) == keys
    # what the Kubernetes import Job runs: the same finished set again is a success
    receipt_bytes = (set_dir / "receipt.json").read_bytes()
    skipped = mirror_cli(
        "--config",
        str(sides["airgap"]),
        "--json",
        "transfer",
        "import",
        str(set_dir),
        "--promote",
        "--skip-imported",
    )
    assert skipped.returncode == 0, skipped.stderr
    document = json.loads(skipped.stdout)
    assert document["already_imported"] is True and document["items"] == []
    assert document["promoted"] == [] and document["receipt"] == str(set_dir / "receipt.json")
    assert bucket_listing(s3_client, target_settings.bucket) == keys
    assert (set_dir / "receipt.json").read_bytes() == receipt_bytes
    # each import's end, recorded for monitoring (mirror serve shows it): the one write a
    # refused import makes
    record = s3_client.get_object(
        Bucket=target_settings.bucket, Key="static-export/_mirror/import-results.json"
    )
    results = json.loads(record["Body"].read())
    assert results["counts"] == {"imported": 1, "refused": 1, "already_imported": 1}
    assert (results["last_result"], results["last_sequence"]) == ("already_imported", 1)

    acked = mirror_cli(
        "--config", str(sides["connected"]), "transfer", "ack", str(set_dir / "receipt.json")
    )
    assert acked.returncode == 0, acked.stderr
    assert "delivered docs.example.com 2026-11-20" in acked.stdout

    nothing = mirror_cli("--config", str(sides["connected"]), "transfer", "pack", str(usb / "2"))
    assert nothing.returncode == 0 and "nothing to pack" in nothing.stdout
    assert not (usb / "2").exists()


def test_verify_names_the_bad_file_and_exits_5(sides: dict[str, Any], tmp_path: Path) -> None:
    app = App(sides["settings"])
    try:
        add_version(app, DOCS, "2026-11-20")
    finally:
        app.close()
    set_dir = tmp_path / "set"
    assert (
        mirror_cli("--config", str(sides["connected"]), "transfer", "pack", str(set_dir)).returncode
        == 0
    )
    part = next((set_dir / "blobs").iterdir())
    data = bytearray(part.read_bytes())
    data[10] ^= 0x01
    part.write_bytes(bytes(data))
    bad = mirror_cli("--config", str(sides["airgap"]), "transfer", "verify", str(set_dir))
    assert bad.returncode == 5
    assert f"blobs/{part.name}" in bad.stderr


def test_import_into_a_missing_bucket_exits_3(sides: dict[str, Any], tmp_path: Path) -> None:
    document = {**sides["airgap_doc"]}
    document["target"] = {**document["target"], "bucket": "nope-not-here"}
    config = write_config(tmp_path / "missing.toml", document)
    result = mirror_cli("--config", str(config), "transfer", "import", str(tmp_path / "no-set"))
    assert result.returncode == 3
    assert "nope-not-here" in result.stderr and "no-set" not in result.stderr


def settings_bucket(sides: dict[str, Any]) -> str:
    return str(sides["settings"].target.bucket)


def test_push_in_one_step(sides: dict[str, Any], s3_client: Any) -> None:
    app = App(sides["settings"])
    try:
        add_version(app, DOCS, "2026-11-20")
        tmp_dir = app.store.tmp_dir
    finally:
        app.close()
    pushed = mirror_cli("--config", str(sides["push"]), "--json", "transfer", "push", "--promote")
    assert pushed.returncode == 0, pushed.stderr
    document = json.loads(pushed.stdout)
    assert document["import"]["sequence"] == 1
    assert document["ack"]["marked"] == [{"domain": DOCS, "version": "2026-11-20"}]
    assert list(tmp_dir.iterdir()) == []
    keys = bucket_listing(s3_client, settings_bucket(sides))
    assert "static-export/docs.example.com/2026-11-20/bundle.tar.gz" in keys
    again = mirror_cli("--config", str(sides["push"]), "transfer", "push")
    assert again.returncode == 0 and "nothing to push" in again.stdout
