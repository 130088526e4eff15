"""An old single-site store upgraded (migration 0006) and then given `[[sites]]` (issue 22):
what happens to the chain the one air-gapped installation has been importing.

Real parts: a real index (SQLite), real signed sets, a real import into SeaweedFS.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mirror.airgap.importer import import_set
from mirror.airgap.s3.objectstore import ObjectStore
from mirror.config import settings_from_dict
from mirror.errors import ConfigError
from mirror.outbound.ack import ack
from mirror.outbound.pack import Selection, pack
from mirror.store.app import App
from mirror.transferset.format import RECEIPT
from mirror.transferset.keys import load_signing_key
from tests.fixtures.s3 import new_key_pair, transfer_config
from tests.fixtures.versions import add_version

pytestmark = pytest.mark.s3

DOCS = "docs.example.com"


def _single_site_history(
    tmp_path: Path, key_pair: Any, trusted: Any, object_store: ObjectStore
) -> tuple[dict[str, Any], Path]:
    """Two sets packed, imported and acknowledged with no `[[sites]]`; the settings document
    and the receipt public key."""
    (tmp_path / "receipt").mkdir()
    receipt_private, receipt_public = new_key_pair(tmp_path / "receipt")
    document = transfer_config(tmp_path / "store", key_pair)
    document["transfer"]["receipt_keys"] = [str(receipt_public)]
    app = App(settings_from_dict(document))
    try:
        for n, label in enumerate(("2026-11-20", "2026-11-21"), start=1):
            add_version(app, DOCS, label)
            packed = pack(app, tmp_path / f"set-{n}", Selection())
            assert packed.sequence == n and packed.site == "default"
            receipt_key = load_signing_key(receipt_private)
            import_set(object_store, tmp_path / f"set-{n}", trusted, receipt_key=receipt_key)
            assert ack(app, tmp_path / f"set-{n}" / RECEIPT).complete
        add_version(app, DOCS, "2026-11-22")
    finally:
        app.close()
    return document, receipt_public


def test_naming_the_old_site_default_continues_its_chain(
    tmp_path: Path, key_pair: Any, trusted: Any, object_store: ObjectStore
) -> None:
    """`[[sites]] name = "default"` keeps the chain the installation imported: set 3 follows
    set 2, imports, and carries only what that site has not acknowledged."""
    document, receipt_public = _single_site_history(tmp_path, key_pair, trusted, object_store)
    document["sites"] = [
        {"name": "default", "trusted_keys": [str(receipt_public)]},
        {"name": "enclave", "trusted_keys": [str(receipt_public)]},
    ]
    app = App(settings_from_dict(document))
    try:
        packed = pack(app, tmp_path / "set-3", Selection(site="default"))
        assert packed.sequence == 3
        assert [item.ref.label for item in packed.items] == ["2026-11-22"]
        imported = import_set(object_store, tmp_path / "set-3", trusted)
        assert imported.sequence == 3
    finally:
        app.close()


def test_sites_that_leave_the_old_chain_behind_are_refused_at_pack_naming_default(
    tmp_path: Path, key_pair: Any, trusted: Any, object_store: ObjectStore
) -> None:
    """Without a site named `default` the old chain would start again at 1 and be refused
    only after the disk crossed; the pack refuses first and names the remedy, which
    test_naming_the_old_site_default_continues_its_chain runs."""
    document, receipt_public = _single_site_history(tmp_path, key_pair, trusted, object_store)
    document["sites"] = [{"name": "prod", "trusted_keys": [str(receipt_public)]}]
    app = App(settings_from_dict(document))
    try:
        with pytest.raises(
            ConfigError, match=r"sets up to 2 .* site 'default', which no \[\[sites\]\]"
        ) as refused:
            pack(app, tmp_path / "set-prod-1", Selection(site="prod"))
        assert 'name = "default"' in str(refused.value.hint)
        assert not (tmp_path / "set-prod-1").exists()
    finally:
        app.close()
