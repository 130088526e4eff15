"""Every version's SPDX inventory across the gap through the real command line: made by `transfer
pack` from the store's file listings, signed in the provenance, published by `transfer import`
beside the version, valid by the SPDX reference tools, handed out by `mirror evidence` and
checked by its VERIFY.md as written."""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from spdx_tools.spdx.model import ChecksumAlgorithm
from spdx_tools.spdx.parser.parse_anything import parse_file
from spdx_tools.spdx.validation.document_validator import validate_full_spdx_document

from mirror.config import TargetSettings, settings_from_dict
from mirror.store.app import App
from mirror.store.models import Version
from tests.fixtures.cli import mirror_cli
from tests.fixtures.docs import run_verify
from tests.fixtures.s3 import gap_sides
from tests.fixtures.versions import add_tree_version

pytestmark = pytest.mark.s3

DOCS = "docs.example.com"
OLD = "docs.stored-before.test"
V1 = "2026-11-21"
SITE = {"index.html": b"<h1>home</h1>\n", "guides/a.html": b"<p>a</p>\n" * 50}


def as_format_1(app: App, domain: str) -> Path:
    """Rewrite the domain's file listing as a store kept it before SHA-1s (format 1)."""
    with app.db.session() as session:
        version = session.query(Version).filter_by(domain=domain).one()
        sha256, tree = version.bundle_sha256, version.tree_sha256
    path = app.store.digests_path(sha256)
    with gzip.open(path, "rb") as listing:
        lines = listing.read().decode().splitlines()[1:]
    old = [
        " ".join([digest, size, name])
        for digest, size, _, name in (line.split(" ", 3) for line in lines)
    ]
    path.write_bytes(gzip.compress(f"mirror-file-digests 1 {tree}\n{chr(10).join(old)}\n".encode()))
    return path


def test_every_version_crosses_with_a_signed_valid_inventory_that_evidence_carries(
    tmp_path: Path, key_pair: tuple[Path, Path], target_settings: TargetSettings, s3_client: Any
) -> None:
    """A version stored before listings kept SHA-1s has its bundle read once at pack time
    (its listing kept again, in the new format); both get an inventory."""
    sides = gap_sides(tmp_path, key_pair, target_settings)
    app = App(settings_from_dict(sides.connected_document))
    try:
        add_tree_version(app, DOCS, V1, SITE)
        add_tree_version(app, OLD, V1, SITE)
        listing = as_format_1(app, OLD)
    finally:
        app.close()
    packed = mirror_cli("--config", str(sides.connected), "transfer", "pack", str(sides.usb / "s1"))
    assert packed.returncode == 0, packed.stderr
    with gzip.open(listing, "rb") as kept:
        assert kept.readline().startswith(b"mirror-file-digests 2 ")
    imported = mirror_cli(
        "--config", str(sides.airgap), "transfer", "import", str(sides.usb / "s1")
    )
    assert imported.returncode == 0, imported.stderr
    bucket, prefix = target_settings.bucket, target_settings.prefix
    inventories: dict[str, bytes] = {}
    for domain in (DOCS, OLD):
        key = f"{prefix}/{domain}/{V1}"
        inventory = s3_client.get_object(Bucket=bucket, Key=f"{key}/inventory.spdx.json")[
            "Body"
        ].read()
        envelope = s3_client.get_object(Bucket=bucket, Key=f"{key}/provenance.intoto.json")
        said = json.loads(base64.b64decode(json.loads(envelope["Body"].read())["payload"]))
        assert said["predicate"]["inventory"]["sha256"] == hashlib.sha256(inventory).hexdigest()
        inventories[domain] = inventory
        (tmp_path / f"{domain}.spdx.json").write_bytes(inventory)
        parsed = parse_file(str(tmp_path / f"{domain}.spdx.json"))
        assert validate_full_spdx_document(parsed) == []
        assert {
            f.name: [c.value for c in f.checksums if c.algorithm == ChecksumAlgorithm.SHA256]
            for f in parsed.files
        } == {f"./{path}": [hashlib.sha256(data).hexdigest()] for path, data in SITE.items()}
        out = tmp_path / "evidence" / domain
        done = mirror_cli(
            "--config",
            str(sides.airgap),
            "evidence",
            domain,
            V1,
            "--out",
            str(out),
            "--with-object",
        )
        assert done.returncode == 0, done.stderr
        assert (out / "inventory.spdx.json").read_bytes() == inventory
        verified = run_verify(out)
        assert verified.returncode == 0, verified.stdout + verified.stderr
        said = "the inventory is the one the provenance signs (none if it signs none): OK"
        assert said in verified.stdout, verified.stdout
        assert "the inventory's package is the signed bundle: OK" in verified.stdout
    values = tmp_path / "values.yaml"
    pinned = mirror_cli(
        "--config", str(sides.airgap), "chart", "values", DOCS, "--pin", V1, "--out", str(values)
    )
    assert pinned.returncode == 0, pinned.stderr
    checked = mirror_cli(
        "--config", str(sides.airgap), "--json", "chart", "check", str(values), "--provenance"
    )
    assert checked.returncode == 0, checked.stderr
    said = json.loads(checked.stdout)["provenance"]
    assert said["inventory_sha256"] == hashlib.sha256(inventories[DOCS]).hexdigest()
