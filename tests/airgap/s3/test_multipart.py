"""Staged uploads: invisible until the whole batch matched, aborted together, bounded parts in
flight, an existing object never read again, open uploads swept. The rules run on the
in-memory MultipartTarget (held to the server by tests/airgap/test_contracts.py); what
only a server shows (objects appearing, memory and parts in flight over real HTTP) runs on
SeaweedFS."""

from __future__ import annotations

import hashlib
import io
import os
import tracemalloc
from datetime import datetime, timedelta
from typing import Any

import pytest

from mirror.airgap.s3 import multipart
from mirror.airgap.s3.multipart import (
    MAX_PARTS,
    ORPHAN_GRACE,
    MultipartTarget,
    StagedUpload,
    Staging,
    upload_blob,
)
from mirror.airgap.s3.objectstore import ObjectStore
from mirror.errors import IntegrityError, OperationFailed
from mirror.integrity import Digest
from tests.fixtures.memory import MemoryBucket

MiB = 1024 * 1024


def blob(size: int) -> tuple[bytes, str]:
    data = os.urandom(size)
    return data, hashlib.sha256(data).hexdigest()


def open_uploads(store: MultipartTarget) -> list[str]:
    return sorted(upload.key for upload in store.open_uploads())


def bucket_listing(store: MemoryBucket | ObjectStore) -> dict[str, str]:
    """{key: etag} of every object under the prefix, for "nothing changed" checks."""
    listing = {key: store.head(key) for key in store.list_keys()}
    return {key: facts["etag"] for key, facts in listing.items() if facts is not None}


@pytest.fixture
def server(object_store: ObjectStore) -> ObjectStore:
    return ObjectStore(object_store.client, object_store.bucket, part_size=5 * MiB, workers=2)


@pytest.fixture
def store() -> MemoryBucket:
    return MemoryBucket(part_size=5 * MiB)


@pytest.fixture(params=["memory", pytest.param("seaweedfs", marks=pytest.mark.s3)])
def either(request: pytest.FixtureRequest) -> Any:
    """The in-memory bucket or SeaweedFS, both with 5 MiB parts."""
    return request.getfixturevalue("store" if request.param == "memory" else "server")


@pytest.mark.s3
def test_staged_objects_appear_only_when_the_batch_completes(server: ObjectStore) -> None:
    first, first_sha = blob(11 * MiB)
    second, second_sha = blob(3000)
    a, b, empty = server.key("a", "bundle.zip"), server.key("b", "bundle.zip"), server.key("e")
    with Staging(server) as staging:
        staging.stage(a, io.BytesIO(first), sha256=first_sha, size=len(first))
        staging.stage(b, io.BytesIO(second), sha256=second_sha, size=len(second))
        staging.stage(empty, io.BytesIO(b""), sha256=hashlib.sha256().hexdigest(), size=0)
        assert bucket_listing(server) == {}
        assert open_uploads(server) == [a, b]
        assert staging.complete() == {a: "created", b: "created", empty: "created"}
    assert sorted(bucket_listing(server)) == sorted([a, b, empty])
    assert open_uploads(server) == []
    body = server.client.get_object(Bucket=server.bucket, Key=a)["Body"].read()
    assert body == first
    head = server.head(a)
    assert head is not None and head["sha256"] == first_sha


@pytest.mark.parametrize("size", [3000, 11 * MiB], ids=["small", "multipart"])
def test_a_mismatch_in_the_second_object_aborts_the_first(store: MemoryBucket, size: int) -> None:
    good, good_sha = blob(11 * MiB)
    bad, bad_sha = blob(size)
    tampered = bad[:-1] + bytes([bad[-1] ^ 1])
    with pytest.raises(IntegrityError, match="nothing was published"), Staging(store) as staging:
        staging.stage(store.key("good"), io.BytesIO(good), sha256=good_sha, size=len(good))
        staging.stage(store.key("bad"), io.BytesIO(tampered), sha256=bad_sha, size=size)
        staging.complete()
    assert bucket_listing(store) == {}
    assert open_uploads(store) == []
    assert [u.state for u in staging.uploads] == ["aborted", "aborted"]


def test_leaving_the_block_without_completing_aborts(store: MemoryBucket) -> None:
    data, sha = blob(6 * MiB)
    with Staging(store) as staging:
        staging.stage(store.key("x"), io.BytesIO(data), sha256=sha, size=len(data))
        assert open_uploads(store) == [store.key("x")]
    assert open_uploads(store) == []
    assert bucket_listing(store) == {}


@pytest.mark.s3
def test_parts_in_flight_are_bounded_across_the_batch(server: ObjectStore) -> None:
    """workers=2: at most 2 parts (being read or sent) in memory, and they do overlap."""
    objects = [blob(26 * MiB), blob(16 * MiB)]
    with Staging(server) as staging:
        for number, (data, sha) in enumerate(objects):
            staging.stage(server.key(f"o{number}"), io.BytesIO(data), sha256=sha, size=len(data))
        staging.complete()
    assert staging.peak_parts_in_flight == 2
    for number, (data, _) in enumerate(objects):
        got = server.client.get_object(Bucket=server.bucket, Key=server.key(f"o{number}"))
        assert got["Body"].read() == data


class Unreadable:
    def read(self, size: int = -1, /) -> bytes:
        raise AssertionError("an object already in the bucket must not be read again")


def test_an_object_already_there_is_not_read_or_uploaded_again(store: MemoryBucket) -> None:
    data, sha = blob(6 * MiB)
    key = store.key("x")
    assert upload_blob(store, key, io.BytesIO(data), sha256=sha, size=len(data)) == "created"
    etag = bucket_listing(store)[key]
    with Staging(store) as staging:
        upload = staging.stage(key, Unreadable(), sha256=sha, size=len(data))
        assert upload.state == "exists"
        assert staging.complete() == {key: "exists"}
    assert bucket_listing(store) == {key: etag}
    assert open_uploads(store) == []


@pytest.mark.s3
@pytest.mark.parametrize("learnt", [False, True], ids=["known", "learnt"])
def test_memory_is_parts_in_flight_times_part_size(server: ObjectStore, learnt: bool) -> None:
    """A 40 MiB object with 5 MiB parts and two senders: Python allocates at most two parts
    (and a read chunk and the HTTP machinery, under 3 MiB) at once, however large the object,
    whether its digest was known or is learnt."""
    data, sha = blob(40 * MiB)
    source = io.BytesIO(data)
    how: dict[str, Any] = {"identity": TREE} if learnt else {"sha256": sha, "size": len(data)}
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        with Staging(server) as staging:
            staging.stage(server.key("big"), source, **how)
            staging.complete()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak <= 2 * 5 * MiB + 3 * MiB, f"peak {peak / MiB:.1f} MiB"
    assert server.head(server.key("big")) is not None


def _orphan(store: MemoryBucket, key: str) -> tuple[str, datetime]:
    """A multipart upload left open, as an import SIGKILLed while staging leaves it; its id
    and when the store says it began (the tests' clocks are set from it)."""
    upload_id = store.start_upload(key, identity={}, content_type="x/y")
    store.upload_part(key, upload_id, 1, bytearray(b"half" * 1000))
    (initiated,) = [u.initiated for u in store.open_uploads() if u.upload_id == upload_id]
    return upload_id, initiated


def test_stale_uploads_under_the_prefix_are_swept_whatever_their_key(store: MemoryBucket) -> None:
    """An import killed while staging leaves uploads of keys no later set may carry."""
    data, sha = blob(6 * MiB)
    _, initiated = _orphan(store, store.key("old-a"))
    _orphan(store, store.key("old-b"))
    outside = "not-ours/x"
    store.start_upload(outside, identity={}, content_type="x/y")
    later = initiated + ORPHAN_GRACE + timedelta(minutes=1)
    with Staging(store, now=lambda: later) as staging:
        staging.stage(store.key("new"), io.BytesIO(data), sha256=sha, size=len(data))
        staging.complete()
    assert open_uploads(store) == []
    assert [u.key for u in store.uploads.values()] == [outside]  # only the prefix is ours


def test_a_young_upload_of_a_published_key_is_swept_at_once(store: MemoryBucket) -> None:
    """The usual case: the import was killed, the operator ran it again at once and it
    published the key; the killed run's upload can never be completed."""
    data, sha = blob(6 * MiB)
    key = store.key("x")
    _, initiated = _orphan(store, key)
    with Staging(store, now=lambda: initiated + timedelta(seconds=5)) as staging:
        staging.stage(key, io.BytesIO(data), sha256=sha, size=len(data))
        staging.complete()
    assert open_uploads(store) == []
    _orphan(store, key)
    with Staging(store, now=lambda: initiated + timedelta(seconds=5)):
        pass
    assert open_uploads(store) == []


def test_a_young_upload_of_an_unpublished_key_is_left_alone(store: MemoryBucket) -> None:
    """A concurrent import may be staging it right now."""
    data, sha = blob(6 * MiB)
    live, initiated = _orphan(store, store.key("x"))
    with Staging(store, now=lambda: initiated + timedelta(minutes=5)) as staging:
        staging.stage(store.key("y"), io.BytesIO(data), sha256=sha, size=len(data))
        staging.complete()
    assert [upload.upload_id for upload in store.open_uploads()] == [live]


def test_two_imports_of_the_same_key_both_succeed(store: MemoryBucket) -> None:
    """The second to finish finds its upload swept by the first: the object is there."""
    data, sha = blob(6 * MiB)
    key = store.key("x")
    with Staging(store) as slow:
        slow.stage(key, io.BytesIO(data), sha256=sha, size=len(data))
        with Staging(store) as fast:
            fast.stage(key, io.BytesIO(data), sha256=sha, size=len(data))
            assert fast.complete() == {key: "created"}
        assert slow.complete() == {key: "exists"}
    assert open_uploads(store) == []


# ---- learnt uploads: the sha256 and size are learnt as the source is read ------------------

TREE = {"tree-sha256": "ab" * 32}


class FailsAfter(io.BytesIO):
    """A stream that breaks (OSError) once `after` bytes were read, as a splice meeting a
    damaged base does."""

    def __init__(self, data: bytes, after: int) -> None:
        super().__init__(data)
        self.after = after

    def read(self, size: int | None = -1, /) -> bytes:
        if self.tell() >= self.after:
            raise OSError("the base archive cannot be read")
        return super().read(size)


def test_a_learnt_object_of_many_parts_completes_with_its_digest(either: Any) -> None:
    data, sha = blob(11 * MiB)
    key = either.key("spliced", "bundle.tar.gz")
    with Staging(either) as staging:
        upload = staging.stage(key, io.BytesIO(data), identity=TREE, content_type="x/y")
        assert upload.state == "staged" and upload.digest == Digest(sha, len(data))
        assert open_uploads(either) == [key] and bucket_listing(either) == {}
        assert staging.complete() == {key: "created"}
    assert b"".join(either.open_stream(key)) == data
    head = either.existing(key, TREE, size=len(data))
    assert head is not None and head["etag"].endswith('-3"') and head["content_type"] == "x/y"
    assert open_uploads(either) == []


def test_a_known_upload_has_its_digest_and_one_already_there_has_none(store: MemoryBucket) -> None:
    data, sha = blob(3000)
    with Staging(store) as staging:
        known = staging.stage(store.key("k"), io.BytesIO(data), sha256=sha, size=len(data))
        staging.complete()
    assert known.digest == Digest(sha, len(data))
    with Staging(store) as staging:
        again = staging.stage(store.key("k"), Unreadable(), sha256=sha, size=len(data))
    assert again.state == "exists" and again.digest is None


def test_an_empty_learnt_object_is_created_without_a_multipart_upload(either: Any) -> None:
    key = either.key("empty")
    with Staging(either) as staging:
        upload = staging.stage(key, io.BytesIO(b""), identity=TREE)
        assert open_uploads(either) == []
        assert staging.complete() == {key: "created"}
    assert upload.digest == Digest(hashlib.sha256().hexdigest(), 0)
    head = either.existing(key, TREE, size=0)
    assert head is not None and head["sha256"] == upload.digest.sha256
    assert open_uploads(either) == []


def test_a_learnt_object_already_there_is_not_read_again(either: Any) -> None:
    data, _ = blob(6 * MiB)
    key = either.key("x")
    with Staging(either) as staging:
        staging.stage(key, io.BytesIO(data), identity=TREE)
        staging.complete()
    etag = bucket_listing(either)[key]
    progress: list[int] = []
    with Staging(either) as staging:
        upload = staging.stage(key, Unreadable(), identity=TREE, on_progress=progress.append)
        assert (upload.state, upload.digest) == ("exists", None)
        assert staging.complete() == {key: "exists"}
    assert progress == [len(data)]
    assert bucket_listing(either) == {key: etag}
    assert open_uploads(either) == []


def test_a_learnt_object_onto_another_identity_is_refused(either: Any) -> None:
    key = either.key("x")
    assert either.put_immutable(key, b"other", identity={"tree-sha256": "cd" * 32}) == "created"
    etag = bucket_listing(either)[key]
    with pytest.raises(IntegrityError, match="tree-sha256 differs"), Staging(either) as staging:
        staging.stage(key, Unreadable(), identity=TREE)
    assert bucket_listing(either) == {key: etag}
    assert open_uploads(either) == []


def test_a_learnt_source_failing_midway_leaves_no_object_and_no_upload(either: Any) -> None:
    data, _ = blob(12 * MiB)
    key = either.key("broken")
    with pytest.raises(OSError, match="cannot be read"), Staging(either) as staging:
        staging.stage(key, FailsAfter(data, 7 * MiB), identity=TREE)
    (upload,) = staging.uploads
    assert upload.upload_id and upload.state == "aborted" and upload.digest is None
    assert bucket_listing(either) == {}
    assert open_uploads(either) == []


def test_a_learnt_source_of_too_many_parts_is_refused_unless_its_size_was_hinted() -> None:
    """S3 takes MAX_PARTS parts; the part size of a learnt upload comes from `size_hint`."""
    store = MemoryBucket(part_size=16)
    data = os.urandom(16 * MAX_PARTS + 1)
    key = store.key("huge")
    refused = pytest.raises(OperationFailed, match="more than 10000 parts of 16 bytes")
    with refused, Staging(store) as staging:
        staging.stage(key, io.BytesIO(data), identity=TREE)
    assert staging.uploads[0].state == "aborted"
    assert bucket_listing(store) == {} and open_uploads(store) == []
    with Staging(store) as staging:
        upload = staging.stage(key, io.BytesIO(data), identity=TREE, size_hint=len(data))
        staging.complete()
    assert upload.part_size == 17
    assert b"".join(store.open_stream(key)) == data


@pytest.mark.s3
def test_the_server_is_left_no_upload_when_too_many_parts_are_refused(
    server: ObjectStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(multipart, "MAX_PARTS", 2)
    data, sha = blob(11 * MiB)
    key = server.key("huge")
    with pytest.raises(OperationFailed, match="more than 2 parts"), Staging(server) as staging:
        staging.stage(key, io.BytesIO(data), identity=TREE)
    assert bucket_listing(server) == {} and open_uploads(server) == []
    with Staging(server) as staging:
        upload = staging.stage(key, io.BytesIO(data), identity=TREE, size_hint=len(data))
        assert staging.complete() == {key: "created"}
    assert upload.digest == Digest(sha, len(data))
    assert b"".join(server.open_stream(key)) == data


def test_two_learnt_imports_of_the_same_key_both_succeed(store: MemoryBucket) -> None:
    """The slower one finds its upload swept: the same identity is there, so "exists"."""
    data, _ = blob(6 * MiB)
    key = store.key("x")
    with Staging(store) as slow:
        slow.stage(key, io.BytesIO(data), identity=TREE)
        with Staging(store) as fast:
            fast.stage(key, io.BytesIO(data), identity=TREE)
            assert fast.complete() == {key: "created"}
        assert slow.complete() == {key: "exists"}
    assert open_uploads(store) == []


@pytest.mark.parametrize(
    "how",
    [{"sha256": "0" * 64}, {"size": 3}, {}],
    ids=["sha256-alone", "size-alone", "learnt-without-identity"],
)
def test_an_upload_is_either_known_or_learnt_with_an_identity(how: dict[str, Any]) -> None:
    store = MemoryBucket()
    with pytest.raises(ValueError, match=r"sha256 and size|identity"):
        StagedUpload(store, multipart.PartSenders(1), store.key("x"), **how)
