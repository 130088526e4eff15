"""Read-modify-write on bucket JSON on a real S3 server (SeaweedFS), real concurrent writers."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from mirror.airgap import layout
from mirror.airgap.chart import listed_versions
from mirror.airgap.s3.conditional import ATTEMPTS, WriteConflict, read_modify_write
from mirror.airgap.s3.objectstore import ObjectStore
from mirror.config import TargetSettings
from mirror.errors import IntegrityError, TemporaryFailure

pytestmark = pytest.mark.s3

Document = dict[str, Any]


def append(item: str) -> Any:
    def change(document: Document | None) -> Document:
        items = list((document or {}).get("items", []))
        return {"items": [*items, item]}

    return change


def other_store(s3_client: Any, target_settings: TargetSettings) -> ObjectStore:
    return ObjectStore(s3_client, target_settings.bucket, target_settings.prefix)


def test_a_change_made_between_read_and_write_is_kept(
    object_store: ObjectStore, s3_client: Any, target_settings: TargetSettings
) -> None:
    key = object_store.key("d.example", "index.json")
    other = other_store(s3_client, target_settings)
    read_modify_write(object_store, key, append("first"))
    interfered: list[int] = []

    def change(document: Document | None) -> Document:
        if not interfered:  # the other writer lands after our read, before our write
            interfered.append(1)
            read_modify_write(other, key, append("theirs"))
        return append("ours")(document)

    assert read_modify_write(object_store, key, change) == {"items": ["first", "theirs", "ours"]}
    assert object_store.read_json(key)[0] == {"items": ["first", "theirs", "ours"]}


def test_threads_writing_at_once_lose_no_update(
    object_store: ObjectStore, s3_client: Any, target_settings: TargetSettings
) -> None:
    key = object_store.key("d.example", "counter.json")
    stores = [other_store(s3_client, target_settings) for _ in range(3)]
    start = threading.Barrier(len(stores))
    failures: list[BaseException] = []

    def writer(number: int, store: ObjectStore) -> None:
        start.wait()
        for round_ in range(4):
            try:
                read_modify_write(store, key, append(f"{number}.{round_}"), attempts=50)
            except BaseException as exc:  # pragma: no cover - reported below
                failures.append(exc)

    threads = [threading.Thread(target=writer, args=(n, s)) for n, s in enumerate(stores)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert failures == []
    document, _ = object_store.read_json(key)
    assert document is not None
    assert sorted(document["items"]) == sorted(f"{n}.{r}" for n in range(3) for r in range(4))


def test_a_writer_that_always_interferes_ends_in_a_temporary_failure(
    object_store: ObjectStore, s3_client: Any, target_settings: TargetSettings
) -> None:
    key = object_store.key("d.example", "busy.json")
    other = other_store(s3_client, target_settings)
    calls: list[int] = []

    def change(document: Document | None) -> Document:
        calls.append(1)
        read_modify_write(other, key, append("theirs"))
        return append("ours")(document)

    with pytest.raises(WriteConflict, match="changed by someone else") as lost:
        read_modify_write(object_store, key, change)
    assert isinstance(lost.value, TemporaryFailure) and lost.value.exit_code == 75
    assert len(calls) == ATTEMPTS
    document, _ = object_store.read_json(key)
    assert document == {"items": ["theirs"] * ATTEMPTS}


def test_no_change_writes_nothing(object_store: ObjectStore) -> None:
    key = object_store.key("d.example", "same.json")
    read_modify_write(object_store, key, append("x"))
    _, etag = object_store.read_json(key)
    assert read_modify_write(object_store, key, lambda document: None) == {"items": ["x"]}
    assert object_store.read_json(key)[1] == etag


def test_typed_update_and_a_malformed_document_in_the_bucket(object_store: ObjectStore) -> None:
    key = layout.index_key(object_store, "d.example")
    entry = layout.IndexEntry(
        version="1", sha256="a" * 64, size=1, object="o", manifest="m", imported_at="t"
    )
    written = layout.update_document(
        object_store,
        key,
        layout.Index,
        lambda index: layout.Index(domain="d.example", versions=[entry]),
    )
    assert written is not None and layout.read_index(object_store, "d.example") == written
    assert listed_versions(object_store, "d.example") == ["1"]
    object_store.client.put_object(
        Bucket=object_store.bucket, Key=key, Body=b'{"format": 1, "domain": "d", "versions": [1]}'
    )
    with pytest.raises(IntegrityError, match=f"{object_store.bucket}/{key} is not a valid Index"):
        listed_versions(object_store, "d.example")
