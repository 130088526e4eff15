"""A delta set through the real command line: pack a domain's first version whole, dry-run
the next (OUT left out), pack it as a delta split into parts, and `transfer verify` accepts
the set on the air-gapped side with the trusted key alone. Simulator archives, real store,
real signatures; the import of deltas is tested with the importer."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema

from mirror.cli.contract import document_schema
from mirror.config import settings_from_dict
from mirror.store.app import App
from mirror.transferset.format import MANIFEST, parse_manifest
from tests.fixtures.cli import mirror_cli, write_config
from tests.fixtures.s3 import transfer_config
from tests.fixtures.versions import add_sim_version

DOCS = "docs.example.com"
SITE: dict[str, Any] = {
    "pages": 300,
    "page_size": 32768,
    "changes_per_export": 150,
    "bundle_size": 12 << 20,
}


def test_pack_a_delta_set_that_verify_accepts(tmp_path: Path, key_pair: tuple[Path, Path]) -> None:
    store_dir = tmp_path / "store"
    store_dir.mkdir()
    document = transfer_config(store_dir, key_pair, max_size="1MiB")
    connected = write_config(tmp_path / "connected.toml", document)
    airgap = write_config(
        tmp_path / "airgap.toml",
        {
            "store": {"path": str(tmp_path / "unused")},
            "target": {"transfer_keys": [str(key_pair[1])]},
        },
    )
    app = App(settings_from_dict(document))
    try:
        add_sim_version(app, DOCS, "2026-11-20", export_number=0, **SITE)
    finally:
        app.close()
    usb = tmp_path / "usb"
    usb.mkdir()

    def mirror(*args: str) -> Any:
        return mirror_cli("--config", str(connected), *args)

    first = mirror("transfer", "pack", str(usb / "set-1"))
    assert first.returncode == 0, first.stderr
    assert f"{DOCS} 2026-11-20  full" in first.stdout

    app = App(settings_from_dict(document))
    try:
        add_sim_version(app, DOCS, "2026-11-21", export_number=1, **SITE)
    finally:
        app.close()

    missing = mirror("transfer", "pack")
    assert missing.returncode == 2
    assert missing.stderr.strip().splitlines()[0].startswith("mirror: error: missing argument OUT")

    planned = mirror("--json", "transfer", "pack", "--dry-run")
    assert planned.returncode == 0, planned.stderr
    plan = json.loads(planned.stdout)
    schema = document_schema("transfer pack")
    assert schema is not None
    jsonschema.Draft202012Validator(schema).validate(plan)
    (version,) = plan["versions"]
    assert version["carried"] == "delta" and version["base_version"] == "2026-11-20"
    assert (version["files_changed"], version["files_added"], version["files_removed"]) == (
        150,
        0,
        0,
    )
    assert os_listing(usb) == ["set-1"]
    human = mirror("transfer", "pack", "--dry-run")
    assert "delta" in human.stdout and "150 changed, 0 added, 0 removed" in human.stdout
    assert "nothing was written (--dry-run)" in human.stdout

    packed = mirror("--json", "transfer", "pack", str(usb / "set-2"))
    assert packed.returncode == 0, packed.stderr
    result = json.loads(packed.stdout)
    jsonschema.Draft202012Validator(schema).validate(result)
    (item,) = result["items"]
    assert item["delta"]["base_version"] == "2026-11-20" and item["parts"] >= 2
    assert result["versions"] == plan["versions"]
    manifest = parse_manifest((usb / "set-2" / MANIFEST).read_bytes())
    assert manifest.items[0].delta is not None
    assert manifest.items[0].delta.model_dump() == item["delta"]

    verified = mirror_cli("--config", str(airgap), "transfer", "verify", str(usb / "set-2"))
    assert verified.returncode == 0, verified.stderr
    assert "valid set 2" in verified.stdout

    whole = mirror("--json", "transfer", "pack", "--all", "--full", "--dry-run")
    assert [v["reason"] for v in json.loads(whole.stdout)["versions"]] == ["--full", "--full"]


def os_listing(path: Path) -> list[str]:
    return sorted(entry.name for entry in path.iterdir())
