"""Ack against a real index and a receipt from a real import (SeaweedFS on loopback)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from mirror.airgap.importer import import_set
from mirror.airgap.s3.objectstore import ObjectStore
from mirror.config import settings_from_dict
from mirror.errors import IntegrityError, NotFound
from mirror.outbound.ack import ack
from mirror.outbound.pack import Selection, pack
from mirror.store.app import App
from mirror.store.models import Bundle, Delivery, Transfer, Version
from mirror.transferset.format import RECEIPT
from mirror.transferset.keys import load_signing_key
from tests.fixtures.s3 import new_key_pair, transfer_config
from tests.fixtures.versions import add_version, delivered_labels, delivered_to

pytestmark = pytest.mark.s3

DOCS = "docs.example.com"
API = "api.example.com"


def test_ack_marks_the_listed_versions_delivered(
    target_app: App, object_store: ObjectStore, trusted: Any, tmp_path: Path, key_pair: Any
) -> None:
    add_version(target_app, DOCS, "2026-11-20")
    add_version(target_app, API, "2026-11-20")
    pack(target_app, tmp_path / "set")
    import_set(object_store, tmp_path / "set", trusted, receipt_key=load_signing_key(key_pair[0]))
    result = ack(target_app, tmp_path / "set" / RECEIPT)
    assert sorted(result.marked) == [(API, "2026-11-20"), (DOCS, "2026-11-20")]
    assert result.complete and result.signature.startswith("verified")
    assert all(when is not None for when in delivered_labels(target_app).values())
    with target_app.db.session() as session:
        published = {
            (d.published_sha256, d.published_size) for d in session.scalars(select(Delivery))
        }
        bundles = session.execute(
            select(Bundle.sha256, Bundle.size).join(Version, Version.bundle_sha256 == Bundle.sha256)
        ).all()
        assert published == {tuple(row) for row in bundles}  # the receipt's digests and sizes
        transfer = session.execute(select(Transfer)).scalar_one()
        assert transfer.acknowledged_at is not None
        assert transfer.receipt_signature == result.signature
    again = ack(target_app, tmp_path / "set" / RECEIPT)
    assert again.marked == [] and len(again.already) == 2
    assert pack(target_app, tmp_path / "next").nothing


def test_ack_checks_the_receipt(
    target_app: App, object_store: ObjectStore, trusted: Any, tmp_path: Path, key_pair: Any
) -> None:
    add_version(target_app, DOCS, "2026-11-20")
    pack(target_app, tmp_path / "set")
    import_set(object_store, tmp_path / "set", trusted, receipt_key=load_signing_key(key_pair[0]))
    receipt = tmp_path / "set" / RECEIPT
    assert ack(target_app, receipt).signature.startswith("verified")
    data = receipt.read_bytes()
    receipt.write_bytes(data.replace(b'"sequence":1', b'"sequence":2'))
    with pytest.raises(IntegrityError, match="signature does not match"):
        ack(target_app, receipt)
    document = json.loads(data)
    document["manifest_sha256"] = "e" * 64
    receipt.write_text(json.dumps(document))
    (tmp_path / "set" / "receipt.json.sig").unlink()
    with pytest.raises(
        NotFound, match="no transfer set with manifest eeeeeeeeeeeeeeee… was packed here"
    ):
        ack(target_app, receipt, accept_unsigned=True)
    receipt.write_text("{}")
    with pytest.raises(IntegrityError, match="not a mirror transfer receipt"):
        ack(target_app, receipt, accept_unsigned=True)


def test_a_version_carried_as_a_delta_is_acknowledged_by_its_tree(
    transfer_app: App, tmp_path: Path
) -> None:
    """The air-gapped side publishes a delta as a spliced archive (not the bundle): its
    receipt names that archive's sha256 and the tree, and the tree is what ack matches."""
    from mirror.transferset.format import parse_manifest
    from mirror.transferset.receipt import Receipt, ReceiptItem
    from tests.fixtures.versions import add_sim_version

    site = {"pages": 60, "page_size": 8192}
    add_sim_version(transfer_app, DOCS, "2026-11-20", export_number=0, **site)
    pack(transfer_app, tmp_path / "s1")
    add_sim_version(transfer_app, DOCS, "2026-11-21", export_number=1, **site)
    packed = pack(transfer_app, tmp_path / "s2")
    manifest = parse_manifest((tmp_path / "s2" / "manifest.json").read_bytes())
    (item,) = manifest.items
    assert item.delta is not None and item.delta.spliced and item.published_sha256 is None
    published = "a" * 64  # a spliced archive's sha256: the import learns it, the receipt says it

    def receipt_naming(tree_sha256: str, name: str) -> Path:
        receipt = Receipt(
            sequence=manifest.sequence,
            manifest_sha256=packed.manifest_sha256 or "",
            items=[
                ReceiptItem(
                    domain=DOCS,
                    version=item.version,
                    sha256=published,
                    object=f"static-export/{DOCS}/{item.version}/bundle.tar.gz",
                    status="published",
                    tree_sha256=tree_sha256,
                )
            ],
        )
        path = tmp_path / name
        path.write_bytes(receipt.to_bytes())
        return path

    wrong = ack(transfer_app, receipt_naming("e" * 64, "wrong.json"), accept_unsigned=True)
    assert wrong.marked == [] and not wrong.complete
    right = ack(
        transfer_app, receipt_naming(item.tree_sha256, "receipt.json"), accept_unsigned=True
    )
    assert right.marked == [(DOCS, "2026-11-21")] and right.complete
    assert delivered_labels(transfer_app)["2026-11-21"] is not None
    with transfer_app.db.session() as session:  # a receipt from before sizes: its digest kept
        delivery = session.scalars(select(Delivery).order_by(Delivery.version_id)).all()[-1]
        assert (delivery.published_sha256, delivery.published_size) == (published, None)


def test_a_receipt_acknowledges_the_site_whose_key_signed_it_and_no_other(
    tmp_path: Path, key_pair: Any, trusted: Any, object_store: ObjectStore
) -> None:
    """Each site's receipts are trusted by its own key; another site's key or an unknown one
    is refused by name and marks nothing."""
    keys = {}
    for name in ("staging", "prod", "stranger"):
        (tmp_path / name).mkdir()
        keys[name] = new_key_pair(tmp_path / name)
    document = transfer_config(tmp_path / "store", key_pair)
    document["sites"] = [
        {"name": name, "trusted_keys": [str(keys[name][1])]} for name in ("staging", "prod")
    ]
    app = App(settings_from_dict(document))
    try:
        add_version(app, DOCS, "2026-11-20")
        packed = pack(app, tmp_path / "set", Selection(site="staging"))
        assert packed.site == "staging" and packed.sequence == 1
        receipt_key = load_signing_key(keys["staging"][0])
        import_set(object_store, tmp_path / "set", trusted, receipt_key=receipt_key)
        data = (tmp_path / "set" / RECEIPT).read_bytes()
        for signer, refusal in (
            ("prod", r"signed by key \S+ of site prod, but set 1 was packed for site staging"),
            ("stranger", r"signed by key \S+, which is not trusted here"),
        ):
            forged = tmp_path / signer / RECEIPT
            forged.write_bytes(data)
            signature = load_signing_key(keys[signer][0]).signature_document(data)
            forged.with_name("receipt.json.sig").write_bytes(signature)
            with pytest.raises(IntegrityError, match=refusal):
                ack(app, forged)
        assert delivered_to(app, "staging") == set() == delivered_to(app, "prod")
        result = ack(app, tmp_path / "set" / RECEIPT)
        assert result.site == "staging" and result.marked == [(DOCS, "2026-11-20")]
        assert delivered_to(app, "staging") == {(DOCS, "2026-11-20")}
        assert delivered_to(app, "prod") == set()
        assert [v.ref.label for v in pack(app, tmp_path / "p", Selection(site="prod")).items] == [
            "2026-11-20"
        ]
    finally:
        app.close()
