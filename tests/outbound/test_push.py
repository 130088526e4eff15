"""Push: pack, import into a real S3 server (SeaweedFS), acknowledge; nothing left behind."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import select

from mirror.airgap.s3.objectstore import ObjectStore
from mirror.errors import IntegrityError, NotFound
from mirror.outbound.push import push
from mirror.store.app import App
from mirror.store.models import Transfer
from tests.fixtures.versions import add_version

pytestmark = pytest.mark.s3

DOCS = "docs.example.com"
API = "api.example.com"


def test_push_packs_imports_and_acknowledges_without_a_copy(
    target_app: App, object_store: ObjectStore
) -> None:
    add_version(target_app, DOCS, "2026-11-20")
    result = push(target_app, object_store)
    assert result.imported is not None and result.acknowledged is not None
    assert [i.status for i in result.imported.items] == ["published"]
    assert result.acknowledged.marked == [(DOCS, "2026-11-20")]
    assert list(target_app.store.tmp_dir.iterdir()) == []
    assert push(target_app, object_store).imported is None
    add_version(target_app, DOCS, "2026-11-21")
    second = push(target_app, object_store)
    assert second.imported is not None and second.imported.sequence == 2
    index, _ = object_store.read_json(object_store.key(DOCS, "index.json"))
    assert index is not None
    assert [v["version"] for v in index["versions"]] == ["2026-11-20", "2026-11-21"]


def test_a_failed_push_leaves_no_copy_and_packs_again_next_time(
    target_app: App, object_store: ObjectStore
) -> None:
    add_version(target_app, DOCS, "2026-11-20")
    key = object_store.key(DOCS, "2026-11-20", "bundle.tar.gz")
    object_store.client.put_object(
        Bucket=object_store.bucket, Key=key, Body=b"squatter", Metadata={"sha256": "0" * 64}
    )
    with pytest.raises(IntegrityError):
        push(target_app, object_store)
    assert list(target_app.store.tmp_dir.iterdir()) == []
    with target_app.db.session() as session:
        assert session.execute(select(Transfer)).first() is None
    object_store.client.delete_object(Bucket=object_store.bucket, Key=key)
    result = push(target_app, object_store)
    assert result.imported is not None and result.imported.sequence == 1


def test_push_to_a_missing_bucket_packs_nothing(target_app: App, s3_client: Any) -> None:
    add_version(target_app, DOCS, "2026-11-20")
    with pytest.raises(NotFound):
        push(target_app, ObjectStore(s3_client, "no-bucket-for-push"))
    with target_app.db.session() as session:
        assert session.execute(select(Transfer)).first() is None
    assert list(target_app.store.tmp_dir.iterdir()) == []
