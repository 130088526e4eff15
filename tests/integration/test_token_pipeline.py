"""Keys that never leave a token, through the real command line (issue 40): a transfer set
signed in one SoftHSM2 token imports on a side whose receipts are signed in another, and the
connected side believes the receipt; the version's verification record, signed in the
token too, passes `mirror evidence`'s VERIFY.md. The transfer key is one `mirror keys
generate` made in its token, the receipt key one OpenSC's pkcs11-tool made in its own; each
side's settings
name its key by a pkcs11: URI whose PIN is in a file, and the other side trusts the public
half `mirror keys` wrote."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mirror.config import TargetSettings, settings_from_dict
from mirror.store.app import App
from tests.fixtures.cli import mirror_cli, write_config
from tests.fixtures.docs import run_verify
from tests.fixtures.s3 import bucket_listing, transfer_config
from tests.fixtures.tokens import SoftHSM
from tests.fixtures.versions import add_version

pytestmark = pytest.mark.s3

DOCS = "docs.example.com"


def test_a_set_signed_in_a_token_imports_where_receipts_are_signed_in_one(
    softhsm: SoftHSM, tmp_path: Path, target_settings: TargetSettings, s3_client: object
) -> None:
    keys = tmp_path / "keys"
    transfer_uri = softhsm.uri("transfer")
    made = run(softhsm, "keys", "generate", "--out", transfer_uri,
               "--public", str(keys / "transfer.pub"))  # fmt: skip
    softhsm.add_token("airgap")
    softhsm.tool("--keypairgen", "--key-type", "EC:edwards25519", "--label", "receipt",
                 token="airgap")  # fmt: skip
    receipt_uri = softhsm.uri("receipt", token="airgap")
    receipt = run(softhsm, "keys", "show", receipt_uri, "--public", str(keys / "receipt.pub"))

    connected = transfer_config(tmp_path / "store", (transfer_uri, keys / "transfer.pub"))
    connected["transfer"]["receipt_keys"] = [str(keys / "receipt.pub")]
    airgap = {
        "target": transfer_config(
            tmp_path / "store", (transfer_uri, keys / "transfer.pub"), target_settings
        )["target"],
        "store": {"path": str(tmp_path / "unused-airgap-store")},
        "transfer": {"signing_key": receipt_uri},
    }
    airgap["target"]["receipt_keys"] = [str(keys / "receipt.pub")]  # its records
    connected_config = write_config(tmp_path / "connected.toml", connected)
    airgap_config = write_config(tmp_path / "airgap.toml", airgap)
    app = App(settings_from_dict(connected))
    try:
        add_version(app, DOCS, "2026-11-20", payload_size=256 * 1024)
    finally:
        app.close()

    (tmp_path / "usb").mkdir()
    set_dir = tmp_path / "usb" / "set-0001"
    packed = run(softhsm, "--config", str(connected_config), "transfer", "pack", str(set_dir))
    assert packed["sequence"] == 1
    assert json.loads((set_dir / "manifest.json.sig").read_text())["key_id"] == made["key_id"]
    imported = run(softhsm, "--config", str(airgap_config), "transfer", "import", str(set_dir))
    assert [item["status"] for item in imported["items"]] == ["published"]
    assert imported["receipt_signed_by"] == receipt["key_id"]
    assert f"static-export/{DOCS}/index.json" in bucket_listing(s3_client, target_settings.bucket)
    acked = run(softhsm, "--config", str(connected_config), "transfer", "ack",
                str(set_dir / "receipt.json"))  # fmt: skip
    assert acked["marked"] == [{"domain": DOCS, "version": "2026-11-20"}]
    evidence = tmp_path / "evidence"
    said = run(softhsm, "--config", str(airgap_config), "evidence", DOCS, "2026-11-20",
               "--out", str(evidence), "--with-object")  # fmt: skip
    assert said["receipt_key_id"] == receipt["key_id"]  # the record, signed in the token
    checked = run_verify(evidence)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert not [p for p in tmp_path.rglob("*") if p.suffix == ".key" or "PRIVATE" in _head(p)]


def run(hsm: SoftHSM, *args: str) -> dict[str, object]:
    """`mirror --json ARGS` with the tokens' SOFTHSM2_CONF: its document; neither the PIN
    nor a private key in what it prints."""
    done = mirror_cli("--json", *args, env=hsm.env)
    assert done.returncode == 0, done.stderr
    assert hsm.pin not in done.stdout + done.stderr
    assert "PRIVATE KEY" not in done.stdout + done.stderr
    document: dict[str, object] = json.loads(done.stdout)
    return document


def _head(path: Path) -> str:
    """The start of a file outside the token's own store, as text (a PEM key would show)."""
    if not path.is_file() or "softhsm" in path.parts:
        return ""
    return path.read_bytes()[:4096].decode("latin-1")
