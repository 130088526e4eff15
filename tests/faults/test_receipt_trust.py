"""Issue 18 class 7 and issue 17 item 6: receipts prove what they say only when a trusted
receipt key signed them, and `transfer push` works with the README's key layout.

Both hosts are set up as the README's "Two hosts, two key pairs" table says: the connected
host signs sets with transfer.key and trusts the air-gapped host's receipt.pub; the
air-gapped host trusts transfer.pub and signs receipts with receipt.key. Real keys, a real
store, a real S3 server, the real command line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from mirror.config import TargetSettings, settings_from_dict
from mirror.store.app import App
from mirror.store.models import Transfer
from mirror.transferset.keys import generate_keypair, load_signing_key
from tests.fixtures.cli import mirror_cli, write_config
from tests.fixtures.s3 import transfer_config
from tests.fixtures.versions import add_version, delivered_labels

pytestmark = pytest.mark.s3

DOCS = "docs.example.com"


def one_error_line(stderr: str) -> str:
    lines = [line for line in stderr.strip().splitlines() if line.startswith("mirror: error:")]
    assert len(lines) == 1, stderr
    return lines[0]


@pytest.fixture
def hosts(tmp_path: Path, target_settings: TargetSettings) -> dict[str, Any]:
    """The README's two hosts: configs, key files and the connected side's settings."""
    keys = tmp_path / "etc-mirror"
    transfer = generate_keypair(keys / "transfer")
    receipt = generate_keypair(keys / "receipt")
    store_dir = tmp_path / "store"
    store_dir.mkdir()
    pair = (transfer.private_path, transfer.public_path)
    connected = transfer_config(store_dir, pair, target_settings)
    connected["transfer"]["receipt_keys"] = [str(receipt.public_path)]  # trusted for `ack`
    airgap = {
        "target": transfer_config(store_dir, pair, target_settings)["target"],
        "transfer": {"signing_key": str(receipt.private_path)},
        "store": {"path": str(tmp_path / "unused")},
    }
    unsigned_airgap = {key: value for key, value in airgap.items() if key != "transfer"}
    return {
        "connected": write_config(tmp_path / "connected.toml", connected),
        "airgap": write_config(tmp_path / "airgap.toml", airgap),
        "airgap_unsigned": write_config(tmp_path / "airgap-unsigned.toml", unsigned_airgap),
        "settings": settings_from_dict(connected),
        "receipt_key": receipt,
    }


def _delivered(hosts: dict[str, Any]) -> dict[str, Any]:
    app = App(hosts["settings"])
    try:
        return delivered_labels(app)
    finally:
        app.close()


def _receipt_signature(hosts: dict[str, Any]) -> str | None:
    app = App(hosts["settings"])
    try:
        with app.db.session() as session:
            return session.execute(select(Transfer)).scalar_one().receipt_signature
    finally:
        app.close()


def _packed_and_imported(hosts: dict[str, Any], tmp_path: Path, airgap: str) -> Path:
    app = App(hosts["settings"])
    try:
        add_version(app, DOCS, "2026-11-20")
    finally:
        app.close()
    set_dir = tmp_path / "usb" / "set-0001"
    set_dir.parent.mkdir()
    packed = mirror_cli("--config", str(hosts["connected"]), "transfer", "pack", str(set_dir))
    assert packed.returncode == 0, packed.stderr
    imported = mirror_cli("--config", str(hosts[airgap]), "transfer", "import", str(set_dir))
    assert imported.returncode == 0, imported.stderr
    return set_dir / "receipt.json"


@pytest.mark.fault(
    "18.7 transfer ack of a receipt with no signature",
    "exit 5, nothing delivered; --accept-unsigned: warned and recorded",
)
def test_an_unsigned_receipt_marks_nothing_unless_accepted_explicitly(
    hosts: dict[str, Any], tmp_path: Path, fault_got: list[str]
) -> None:
    receipt = _packed_and_imported(hosts, tmp_path, "airgap_unsigned")
    assert not receipt.with_name("receipt.json.sig").exists()
    refused = mirror_cli("--config", str(hosts["connected"]), "transfer", "ack", str(receipt))
    fault_got.append(f"exit {refused.returncode}")
    assert refused.returncode == 5, refused.stdout
    line = one_error_line(refused.stderr)
    assert "is not signed" in line and "--accept-unsigned" in line
    assert _delivered(hosts) == {"2026-11-20": None}

    accepted = mirror_cli(
        "--config",
        str(hosts["connected"]),
        "--json",
        "transfer",
        "ack",
        str(receipt),
        "--accept-unsigned",
    )
    assert accepted.returncode == 0, accepted.stderr
    document = json.loads(accepted.stdout)
    assert document["signature"] == "unsigned, accepted by --accept-unsigned"
    assert "without proof" in accepted.stderr  # the warning, logged
    assert _delivered(hosts)["2026-11-20"] is not None
    assert _receipt_signature(hosts) == "unsigned, accepted by --accept-unsigned"
    fault_got.append("--accept-unsigned: exit 0, logged, recorded")


@pytest.mark.fault(
    "18.7 transfer ack of a receipt signed by a key nobody trusts",
    "exit 5 naming the key id, nothing delivered",
)
def test_a_receipt_signed_by_an_untrusted_key_marks_nothing(
    hosts: dict[str, Any], tmp_path: Path, fault_got: list[str]
) -> None:
    receipt = _packed_and_imported(hosts, tmp_path, "airgap")
    stranger = generate_keypair(tmp_path / "stranger" / "key")
    receipt.with_name("receipt.json.sig").write_bytes(
        load_signing_key(stranger.private_path).signature_document(receipt.read_bytes())
    )
    refused = mirror_cli("--config", str(hosts["connected"]), "transfer", "ack", str(receipt))
    fault_got.append(f"exit {refused.returncode}")
    assert refused.returncode == 5, refused.stdout
    line = one_error_line(refused.stderr)
    assert f"signed by key {stranger.key_id}, which is not trusted here" in line
    assert _delivered(hosts) == {"2026-11-20": None}


def test_a_receipt_signed_by_the_trusted_receipt_key_is_believed_and_recorded(
    hosts: dict[str, Any], tmp_path: Path
) -> None:
    receipt = _packed_and_imported(hosts, tmp_path, "airgap")
    acked = mirror_cli("--config", str(hosts["connected"]), "transfer", "ack", str(receipt))
    assert acked.returncode == 0, acked.stderr
    key_id = hosts["receipt_key"].key_id
    assert f"receipt verified (key {key_id})" in acked.stdout
    assert _delivered(hosts)["2026-11-20"] is not None
    assert _receipt_signature(hosts) == f"verified (key {key_id})"


@pytest.mark.fault(
    "17.6 transfer push with the README's key layout (receipt_keys = [receipt.pub])",
    "exit 0: imported with its own key, receipt verified, delivered",
)
def test_push_trusts_its_own_signing_key_with_the_readme_layout(
    hosts: dict[str, Any], fault_got: list[str]
) -> None:
    app = App(hosts["settings"])
    try:
        add_version(app, DOCS, "2026-11-20")
    finally:
        app.close()
    pushed = mirror_cli("--config", str(hosts["connected"]), "--json", "transfer", "push")
    fault_got.append(f"exit {pushed.returncode}")
    assert pushed.returncode == 0, pushed.stderr
    document = json.loads(pushed.stdout)
    assert [i["status"] for i in document["import"]["items"]] == ["published"]
    assert document["ack"]["signature"].startswith("verified (key ")
    assert _delivered(hosts)["2026-11-20"] is not None
