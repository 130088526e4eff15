"""A disk carried to the wrong installation (issue 22, hostile trial): a set packed for site a
imported into the bucket of site b, whose installation does not name itself (`target.site`
empty, the documented default). Real index, real signed sets, a real import into SeaweedFS.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mirror.airgap.importer import import_set
from mirror.airgap.layout import read_index
from mirror.airgap.s3.objectstore import ObjectStore
from mirror.config import settings_from_dict
from mirror.errors import IntegrityError
from mirror.outbound.pack import Selection, pack
from mirror.store.app import App
from tests.fixtures.s3 import transfer_config
from tests.fixtures.versions import add_version

pytestmark = pytest.mark.s3

DOCS = "docs.example.com"


def test_a_set_of_another_named_site_is_refused_by_a_bucket_that_follows_one_site(
    tmp_path: Path, key_pair: Any, trusted: Any, object_store: ObjectStore
) -> None:
    document = transfer_config(tmp_path / "store", key_pair)
    document["sites"] = [{"name": name, "trusted_keys": [str(key_pair[1])]} for name in ("a", "b")]
    app = App(settings_from_dict(document))
    try:
        add_version(app, DOCS, "2026-11-20")
        pack(app, tmp_path / "b-1", Selection(site="b"))
        for n, label in enumerate(("2026-11-20", "2026-11-21", "2026-11-22"), start=1):
            if n > 1:
                add_version(app, DOCS, label)
            assert pack(app, tmp_path / f"a-{n}", Selection(site="a")).sequence == n
    finally:
        app.close()
    import_set(object_store, tmp_path / "b-1", trusted)  # site b's installation, unnamed
    with pytest.raises(IntegrityError, match=r"site a.*site b") as refused:
        import_set(object_store, tmp_path / "a-3", trusted)
    assert "2026-11-22" not in _versions(object_store)
    assert "transfer pack --site b OUT" in str(refused.value.hint)
    app = App(settings_from_dict(document))  # the remedy: b's own next set
    try:
        assert pack(app, tmp_path / "b-2", Selection(site="b")).sequence == 2
    finally:
        app.close()
    assert import_set(object_store, tmp_path / "b-2", trusted).sequence == 2
    assert "2026-11-22" in _versions(object_store)


def _versions(store: ObjectStore) -> set[str]:
    index = read_index(store, DOCS)
    return {entry.version for entry in index.versions} if index else set()
