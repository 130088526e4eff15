"""A disk carried to the wrong installation (issue 22, hostile trial): a set packed for site a
imported into the bucket of site b, whose installation does not name itself (`target.site`
empty, the documented default). Real index, real signed sets, a real import into SeaweedFS.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mirror.airgap.importer import import_set
from mirror.airgap.objectstore import ObjectStore
from mirror.config import settings_from_dict
from mirror.errors import IntegrityError
from mirror.outbound.pack import Selection, pack
from mirror.store.app import App
from tests.fixtures.s3 import transfer_config
from tests.fixtures.versions import add_version

pytestmark = pytest.mark.s3

DOCS = "docs.example.com"


@pytest.mark.xfail(
    strict=True,
    reason="hostile trial (issue 22): the bucket's import state does not remember which named "
    "site's chain it follows, so without target.site a later set of another site (a gap "
    "further on) is imported with a gap note, its versions published into the wrong "
    "installation, and the site's own next set is then refused as a rollback",
)
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
    with pytest.raises(IntegrityError, match=r"site a.*site b"):
        import_set(object_store, tmp_path / "a-3", trusted)
