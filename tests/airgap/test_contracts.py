"""Contract tests: each storage Protocol of mirror.airgap, against the in-memory fake AND the
real server (SeaweedFS), so the fake the unit tests use behaves as the server was seen to.

One class per Protocol; every test runs twice (`memory`, `seaweedfs`). A test that fails
only on `memory` is a fake that lies; only on `seaweedfs`, a contract the code must not
rely on.
"""

from __future__ import annotations

import io
import os
from datetime import timedelta
from typing import Any, cast

import botocore.exceptions
import pytest

from mirror.airgap import layout
from mirror.airgap.chart.bucket import BucketStore
from mirror.airgap.chart.gc import GcStore, Listing
from mirror.airgap.chart.values import link_target
from mirror.airgap.provenance import StatementStore
from mirror.airgap.publish import Store
from mirror.airgap.s3.checksums import part_checksum
from mirror.airgap.s3.conditional import JsonStore, WriteConflict, read_modify_write
from mirror.airgap.s3.errors import DIGEST_CODES, error_code, http_status
from mirror.airgap.s3.multipart import (
    SHA256_META,
    MultipartTarget,
    Staging,
    UploadGone,
    upload_blob,
)
from mirror.airgap.s3.objectstore import ObjectStore
from mirror.airgap.s3.probe import PROBE_DIR, Probe, ProbeStore
from mirror.errors import IntegrityError, NotFound
from mirror.integrity import hash_bytes
from mirror.links import link_expiry
from mirror.serve.bucket import ServeBucket
from mirror.timestamps import utcnow
from tests.fixtures.memory import MemoryBucket


@pytest.fixture(params=["memory", pytest.param("seaweedfs", marks=pytest.mark.s3)])
def store(request: pytest.FixtureRequest) -> Any:
    """The fake, or an ObjectStore on a fresh bucket of the real server."""
    if request.param == "memory":
        return MemoryBucket()
    return request.getfixturevalue("object_store")


class TestJsonStore:
    """conditional.JsonStore: documents replaced whole, only on the ETag that was read."""

    def test_a_missing_document_reads_as_nothing(self, store: Any) -> None:
        assert store.read_json(store.key("d", "index.json")) == (None, None)

    def test_a_new_document_reads_back_with_its_etag(self, store: Any) -> None:
        key = store.key("d", "index.json")
        etag = store.write_json(key, {"a": [1, "é"]}, if_match=None)
        assert store.read_json(key) == ({"a": [1, "é"]}, etag)

    def test_creating_what_exists_is_a_conflict(self, store: Any) -> None:
        key = store.key("d", "index.json")
        store.write_json(key, {"a": 1}, if_match=None)
        with pytest.raises(WriteConflict, match="changed by someone else"):
            store.write_json(key, {"a": 2}, if_match=None)
        assert store.read_json(key)[0] == {"a": 1}

    def test_only_the_etag_read_replaces(self, store: Any) -> None:
        key = store.key("d", "index.json")
        first = store.write_json(key, {"a": 1}, if_match=None)
        second = store.write_json(key, {"a": 2}, if_match=first)
        assert second != first
        with pytest.raises(WriteConflict):
            store.write_json(key, {"a": 3}, if_match=first)
        assert store.read_json(key) == ({"a": 2}, second)

    def test_replacing_what_is_missing_is_a_conflict(self, store: Any) -> None:
        with pytest.raises(WriteConflict):
            store.write_json(store.key("d", "gone.json"), {"a": 1}, if_match='"0123"')

    def test_read_modify_write_keeps_both_changes(self, store: Any) -> None:
        key = store.key("d", "counter.json")
        for _ in range(3):
            read_modify_write(store, key, lambda doc: {"n": (doc or {"n": 0})["n"] + 1})
        assert store.read_json(key)[0] == {"n": 3}


class TestBucket:
    """layout.Bucket: key names under the prefix, typed documents."""

    def test_keys_live_under_the_prefix(self, store: Any) -> None:
        assert store.key("d.example", "2026-01-01/manifest.json") == (
            f"{store.prefix}/d.example/2026-01-01/manifest.json"
        )
        for unsafe in ("..", "a//b", ".", ""):
            with pytest.raises(ValueError, match="unsafe"):
                store.key("d", unsafe)

    def test_a_typed_document_round_trips(self, store: Any) -> None:
        def create(current: layout.Current | None) -> layout.Current:
            assert current is None
            return layout.Current(domain="d", current="2026-01-01")

        layout.update_document(store, layout.current_key(store, "d"), layout.Current, create)
        assert layout.read_current(store, "d") == layout.Current(domain="d", current="2026-01-01")
        assert layout.read_index(store, "d") is None


class TestReads:
    """rebuild.Store, chart.bucket.BucketStore, chart.gc.GcStore, serve.bucket.ServeBucket
    (which reads through HEAD, GET and LIST only): HEAD, GET, links, LIST, DELETE."""

    def test_head_of_a_missing_object_is_none(self, store: Any) -> None:
        assert store.head(store.key("nothing")) is None

    def test_head_reports_size_sha256_and_metadata(self, store: Any) -> None:
        key = store.key("d", "v", "manifest.json")
        store.put_immutable(key, b'{"x": 1}', identity={"bundle-sha256": "ab" * 32})
        facts = store.head(key)
        assert facts["size"] == 8
        assert facts["sha256"] == hash_bytes(b'{"x": 1}')
        assert facts["metadata"]["bundle-sha256"] == "ab" * 32
        assert facts["etag"].startswith('"')

    def test_a_stream_gives_the_bytes_and_a_missing_one_is_not_found(self, store: Any) -> None:
        key = store.key("blob")
        data = os.urandom(200_000)
        upload_blob(store, key, io.BytesIO(data), sha256=hash_bytes(data), size=len(data))
        assert b"".join(store.open_stream(key)) == data
        with pytest.raises(NotFound, match="does not exist"):
            b"".join(store.open_stream(store.key("missing")))

    def test_listing_is_sorted_and_bounded_by_the_prefix(self, store: Any) -> None:
        for name in ("b/2", "a/1", "b/1", "c"):
            store.put_immutable(store.key(name), b"{}", identity={})
        assert store.list_keys(store.key("b") + "/") == [store.key("b/1"), store.key("b/2")]
        assert store.list_keys() == sorted(store.key(n) for n in ("a/1", "b/1", "b/2", "c"))

    def test_deleting_is_idempotent(self, store: Any) -> None:
        key = store.key("x")
        store.put_immutable(key, b"{}", identity={})
        store.delete(key)
        store.delete(key)
        assert store.head(key) is None

    def test_a_presigned_link_names_the_version_and_its_expiry(self, store: Any) -> None:
        key = store.key("d.example", "2026-01-01.2", "bundle.zip")
        before = utcnow()
        url, expires_at = store.presign_get(key, 600)
        after = utcnow()
        target = link_target(url)
        assert (target.domain, target.version, target.filename) == (
            "d.example",
            "2026-01-01.2",
            "bundle.zip",
        )
        found = link_expiry(url)
        assert found is not None and abs((found - expires_at).total_seconds()) <= 2
        # 600 s from the moment it was signed, however long signing took (whole seconds)
        assert before + timedelta(seconds=599) <= expires_at <= after + timedelta(seconds=601)


class TestMultipartTarget:
    """multipart.MultipartTarget: parts, create-once completion, aborts, open uploads."""

    def _identity(self, data: bytes) -> dict[str, str]:
        return {SHA256_META: hash_bytes(data)}

    def _two_parts(self, store: Any) -> tuple[bytes, bytes]:
        return os.urandom(store.part_size), os.urandom(1000)

    def test_parts_complete_into_one_object(self, store: Any) -> None:
        key = store.key("d", "v", "bundle.zip")
        first, last = self._two_parts(store)
        identity = self._identity(first + last)
        upload = store.start_upload(key, identity=identity, content_type="application/zip")
        parts = [
            store.upload_part(key, upload, 1, bytearray(first)),
            store.upload_part(key, upload, 2, bytearray(last)),
        ]
        size = len(first) + len(last)
        outcome = store.complete_upload(key, upload, parts, identity=identity, size=size)
        assert outcome == "created"
        facts = store.existing(key, identity, size=size)
        assert facts is not None and facts["content_type"] == "application/zip"
        assert b"".join(store.open_stream(key)) == first + last
        assert [u.key for u in store.open_uploads()] == []

    def test_completing_onto_the_same_object_is_exists_and_another_is_refused(
        self, store: Any
    ) -> None:
        key = store.key("o")
        data = b"same bytes"
        upload_blob(store, key, io.BytesIO(data), sha256=hash_bytes(data), size=len(data))
        same, other = self._identity(data), {SHA256_META: "0" * 64}
        for identity in (same, other):
            upload = store.start_upload(key, identity=identity, content_type="x/y")
            parts = [store.upload_part(key, upload, 1, bytearray(data))]
            size = len(data)
            if identity == same:
                outcome = store.complete_upload(key, upload, parts, identity=same, size=size)
                assert outcome == "exists"
            else:
                with pytest.raises(IntegrityError, match="never overwritten"):
                    store.complete_upload(key, upload, parts, identity=other, size=size)
            store.abort_upload(key, upload)
        assert b"".join(store.open_stream(key)) == data

    def test_an_aborted_upload_is_gone(self, store: Any) -> None:
        key = store.key("aborted")
        identity = self._identity(b"abc")
        upload = store.start_upload(key, identity=identity, content_type="x/y")
        part = store.upload_part(key, upload, 1, bytearray(b"abc"))
        listed = store.open_uploads()
        assert [(u.key, u.upload_id) for u in listed] == [(key, upload)]
        assert abs((listed[0].initiated - utcnow()).total_seconds()) < 120
        assert store.abort_upload(key, upload) is True
        assert store.open_uploads() == []
        with pytest.raises(UploadGone):
            store.upload_part(key, upload, 2, bytearray(b"def"))
        with pytest.raises(UploadGone):
            store.complete_upload(key, upload, [part], identity=identity, size=3)
        assert store.head(key) is None

    def test_existing_compares_identity_and_size(self, store: Any) -> None:
        key = store.key("m")
        assert store.existing(key, {"bundle-sha256": "ab"}) is None
        assert store.put_immutable(key, b"{}", identity={"bundle-sha256": "ab"}) == "created"
        assert store.put_immutable(key, b"{ }", identity={"bundle-sha256": "ab"}) == "exists"
        assert store.existing(key, {"bundle-sha256": "ab"}, size=2) is not None
        with pytest.raises(IntegrityError, match="bundle-sha256 differs"):
            store.existing(key, {"bundle-sha256": "cd"})
        with pytest.raises(IntegrityError, match="size differs"):
            store.existing(key, {"bundle-sha256": "ab"}, size=3)

    def test_staging_a_mismatch_leaves_no_object_and_no_upload(self, store: Any) -> None:
        good, bad = os.urandom(3000), os.urandom(3000)
        with pytest.raises(IntegrityError, match="hashes to"), Staging(store) as staging:
            staging.stage(store.key("good"), io.BytesIO(good), sha256=hash_bytes(good), size=3000)
            staging.stage(store.key("bad"), io.BytesIO(bad), sha256=hash_bytes(good), size=3000)
            staging.complete()
        assert store.head(store.key("good")) is None and store.head(store.key("bad")) is None
        assert store.open_uploads() == []


@pytest.fixture(
    params=[
        "memory",
        "memory, versioned",
        pytest.param("seaweedfs", marks=pytest.mark.s3),
        pytest.param("seaweedfs, versioned", marks=pytest.mark.s3),
    ]
)
def probed(request: pytest.FixtureRequest) -> Any:
    """A store for the write probe: the fake or the real server, keeping versions or not."""
    versioned = request.param.endswith("versioned")
    if request.param.startswith("memory"):
        return MemoryBucket(versioned=versioned)
    return request.getfixturevalue("versioned_object_store" if versioned else "object_store")


def kept(store: Any, prefix: str) -> list[tuple[str, bool]]:
    """(key, is a delete marker) of every version the bucket keeps under `prefix`."""
    listed = store.client.list_object_versions(Bucket=store.bucket, Prefix=prefix)
    return sorted(
        [(entry["Key"], False) for entry in listed.get("Versions", [])]
        + [(entry["Key"], True) for entry in listed.get("DeleteMarkers", [])]
    )


def versioned(store: Any) -> bool:
    if isinstance(store, MemoryBucket):
        return store.versioned
    answer = store.client.get_bucket_versioning(Bucket=store.bucket)
    return bool(answer.get("Status") == "Enabled")


class TestProbeStore:
    """probe.ProbeStore: the S3 calls the write probe makes, and that it leaves nothing."""

    def test_a_put_names_its_version_only_where_versions_are_kept(self, probed: Any) -> None:
        key = probed.key("p", "a")
        answer = probed.client.put_object(Bucket=probed.bucket, Key=key, Body=b"a")
        assert ("VersionId" in answer) is versioned(probed)
        assert kept(probed, key) == [(key, False)]

    def test_a_delete_by_key_keeps_versions_under_a_marker_a_delete_by_id_keeps_nothing(
        self, probed: Any
    ) -> None:
        key, client, bucket = probed.key("p", "b"), probed.client, probed.bucket
        ids = [
            client.put_object(Bucket=bucket, Key=key, Body=b).get("VersionId") for b in (b"x", b"y")
        ]
        hidden = client.delete_object(Bucket=bucket, Key=key)
        if not versioned(probed):
            assert ids == [None, None] and "DeleteMarker" not in hidden
            assert kept(probed, key) == []
            return
        assert hidden["DeleteMarker"] is True
        assert kept(probed, key) == [(key, False), (key, False), (key, True)]
        for version in [*ids, hidden["VersionId"]]:
            client.delete_object(Bucket=bucket, Key=key, VersionId=version)
        assert kept(probed, key) == []
        gone = client.delete_object(Bucket=bucket, Key=probed.key("p", "never"))
        assert gone["DeleteMarker"] is True  # a delete by key of nothing makes a marker too

    def test_a_wrong_checksum_or_a_failed_condition_is_refused_and_writes_nothing(
        self, probed: Any
    ) -> None:
        key, client, bucket = probed.key("p", "c"), probed.client, probed.bucket
        for checksum in (part_checksum("crc32", b"other"), part_checksum("md5", b"other")):
            with pytest.raises(botocore.exceptions.ClientError) as refused:
                client.put_object(Bucket=bucket, Key=key, Body=b"body", **checksum)
            assert error_code(refused.value) in DIGEST_CODES
        etag = client.put_object(Bucket=bucket, Key=key, Body=b"body")["ETag"]
        for condition in ({"IfNoneMatch": "*"}, {"IfMatch": '"0000000000000000"'}):
            with pytest.raises(botocore.exceptions.ClientError) as refused:
                client.put_object(Bucket=bucket, Key=key, Body=b"new", **condition)
            assert http_status(refused.value) == 412
        client.put_object(Bucket=bucket, Key=key, Body=b"new", IfMatch=etag)
        assert len(kept(probed, key)) == (2 if versioned(probed) else 1)

    def test_the_probe_removes_exactly_what_it_wrote(self, probed: Any) -> None:
        """The import's check, and every check of `target check` but the presigned GET
        (the fake's links lead nowhere): no version, no delete marker, no upload left, and
        another object under the probes' folder untouched."""
        neighbour = probed.key(PROBE_DIR, "kept")
        probed.client.put_object(Bucket=probed.bucket, Key=neighbour, Body=b"kept")
        probe = Probe(probed)
        assert probe.checksum_protection() == "enforced"
        assert probe.conditional_writes() == "honoured"
        assert abs(probe.clock_skew()) < 120
        probe.multipart()
        assert probe.written  # what is there because of the probe, until cleaned
        probe.clean()
        assert kept(probed, probed.key(PROBE_DIR)) == [(neighbour, False)]
        listed = probed.client.list_multipart_uploads(Bucket=probed.bucket, Prefix=probe.key)
        assert listed.get("Uploads", []) == []


def test_the_fake_and_the_store_implement_every_protocol() -> None:
    """mypy checks the assignment (`mypy --strict tests/airgap/test_contracts.py`): the fake
    and the S3 store are each every storage Protocol of mirror.airgap. Here, at run time,
    every Protocol member exists on both."""
    stores: list[MemoryBucket | ObjectStore] = [MemoryBucket(), ObjectStore(cast(Any, None), "b")]
    as_protocols: list[
        tuple[
            JsonStore,
            layout.Bucket,
            Store,
            BucketStore,
            GcStore,
            MultipartTarget,
            ServeBucket,
            ProbeStore,
        ]
    ] = [(store, store, store, store, store, store, store, store) for store in stores]
    protocols = (JsonStore, layout.Bucket, Store, BucketStore, GcStore, MultipartTarget)
    for protocol in (*protocols, ServeBucket, StatementStore, Listing, ProbeStore):
        names = [name for name in vars(protocol) if not name.startswith("_")]
        names += list(getattr(protocol, "__annotations__", {}))
        for store in stores:
            missing = [name for name in names if not hasattr(store, name)]
            assert missing == [], f"{type(store).__name__} lacks {protocol.__name__}: {missing}"
    assert len(as_protocols) == 2
