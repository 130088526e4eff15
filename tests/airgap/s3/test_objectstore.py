"""ObjectStore against a real S3 API server (SeaweedFS) on loopback."""

from __future__ import annotations

import hashlib
import io
import os
from typing import Any

import pytest

from mirror.airgap.s3.multipart import upload_blob
from mirror.airgap.s3.objectstore import ObjectStore, make_s3_client
from mirror.config import TargetSettings
from mirror.errors import AuthError, IntegrityError, NotFound, TemporaryFailure
from tests.fixtures.s3 import TEST_CREDENTIALS, bucket_listing, client_as

pytestmark = pytest.mark.s3


def blob(size: int) -> tuple[bytes, str]:
    data = os.urandom(size)
    return data, hashlib.sha256(data).hexdigest()


def test_key_joins_prefix_and_refuses_unsafe_segments(object_store: ObjectStore) -> None:
    assert object_store.key("docs.example.com", "index.json") == (
        "static-export/docs.example.com/index.json"
    )
    assert ObjectStore(object_store.client, "b", "").key("a", "b") == "a/b"
    for bad in ("..", "a/../b", "", "./x"):
        with pytest.raises(ValueError):
            object_store.key("docs.example.com", bad)


def test_check_access_names_a_missing_bucket(s3_client: Any) -> None:
    store = ObjectStore(s3_client, "no-such-bucket-here")
    with pytest.raises(NotFound, match=r"bucket no-such-bucket-here .*does not exist") as info:
        store.check_access()
    assert info.value.exit_code == 3


@pytest.mark.parametrize(
    "credentials",
    [
        {**TEST_CREDENTIALS, "AWS_ACCESS_KEY_ID": "nobody-knows-me"},
        {**TEST_CREDENTIALS, "AWS_SECRET_ACCESS_KEY": "a-wrong-secret"},
    ],
    ids=["unknown key", "wrong secret"],
)
def test_refused_credentials_are_one_line_without_the_secret(
    s3_endpoint: str, bucket: str, credentials: dict[str, str]
) -> None:
    store = ObjectStore(client_as(s3_endpoint, credentials), bucket)
    with pytest.raises(AuthError) as info:
        store.check_access()
    message = str(info.value)
    assert info.value.exit_code == 4
    assert "S3 refused the credentials" in message and "\n" not in message
    assert "a-wrong-secret" not in message and credentials["AWS_SECRET_ACCESS_KEY"] not in message
    with pytest.raises(AuthError):
        store.read_json(store.key("x.json"))


def test_the_read_only_identity_cannot_write(s3_read_only_client: Any, bucket: str) -> None:
    data, digest = blob(1000)
    store = ObjectStore(s3_read_only_client, bucket)
    with pytest.raises(AuthError, match="AccessDenied"):
        upload_blob(store, store.key("x"), io.BytesIO(data), sha256=digest, size=1000)


def test_unreachable_endpoint_is_temporary() -> None:
    client = make_s3_client(TargetSettings(endpoint_url="http://127.0.0.1:9"), max_attempts=1)
    with pytest.raises(TemporaryFailure, match="cannot reach the object store"):
        ObjectStore(client, "b-bucket").check_access()


def test_small_blob_is_written_once_with_sha256_metadata(object_store: ObjectStore) -> None:
    data, digest = blob(1000)
    key = object_store.key("d.example.com", "v1", "bundle.zip")
    assert upload_blob(object_store, key, io.BytesIO(data), sha256=digest, size=1000) == "created"
    facts = object_store.head(key)
    assert facts is not None and facts["sha256"] == digest and facts["size"] == 1000
    assert b"".join(object_store.open_stream(key)) == data
    assert upload_blob(object_store, key, io.BytesIO(data), sha256=digest, size=1000) == "exists"
    other, other_digest = blob(1000)
    with pytest.raises(IntegrityError, match="already exists with different content"):
        upload_blob(object_store, key, io.BytesIO(other), sha256=other_digest, size=1000)
    assert b"".join(object_store.open_stream(key)) == data


def test_multipart_blob_streams_in_parts(object_store: ObjectStore) -> None:
    store = ObjectStore(object_store.client, object_store.bucket, part_size=5 * 1024**2, workers=2)
    data, digest = blob(12 * 1024**2 + 7)
    key = store.key("d.example.com", "v1", "bundle.tar.gz")
    seen: list[int] = []
    outcome = upload_blob(
        store, key, io.BytesIO(data), sha256=digest, size=len(data), on_progress=seen.append
    )
    assert outcome == "created"
    assert sum(seen) == len(data) and len(seen) == 3
    facts = store.head(key)
    assert facts is not None and facts["etag"].endswith('-3"') and facts["sha256"] == digest
    assert hashlib.sha256(b"".join(store.open_stream(key))).hexdigest() == digest


@pytest.mark.parametrize(
    "mangle",
    [
        pytest.param(lambda d: d[:-1] + bytes([d[-1] ^ 1]), id="flipped-last-byte"),
        pytest.param(lambda d: d + b"x", id="padded"),
        pytest.param(lambda d: d[:-10], id="short"),
    ],
)
@pytest.mark.parametrize("size", [3000, 11 * 1024**2], ids=["single", "multipart"])
def test_wrong_bytes_never_become_visible(
    object_store: ObjectStore, s3_client: Any, mangle: Any, size: int
) -> None:
    store = ObjectStore(object_store.client, object_store.bucket, part_size=5 * 1024**2)
    data, digest = blob(size)
    key = store.key("d.example.com", "v1", "bundle.zip")
    with pytest.raises(IntegrityError, match="nothing was published"):
        upload_blob(store, key, io.BytesIO(mangle(data)), sha256=digest, size=size)
    assert store.head(key) is None
    assert bucket_listing(s3_client, store.bucket) == {}
    uploads = s3_client.list_multipart_uploads(Bucket=store.bucket).get("Uploads", [])
    assert uploads == []


class FailingReader:
    """Gives `good` bytes, then fails like a disk that went away."""

    def __init__(self, data: bytes, good: int) -> None:
        self.stream = io.BytesIO(data)
        self.good = good

    def read(self, size: int = -1, /) -> bytes:
        if self.stream.tell() >= self.good:
            raise OSError(5, "Input/output error")
        return self.stream.read(min(size, self.good - self.stream.tell()))


def test_a_failing_source_aborts_the_multipart_upload(
    object_store: ObjectStore, s3_client: Any
) -> None:
    store = ObjectStore(object_store.client, object_store.bucket, part_size=5 * 1024**2)
    data, digest = blob(11 * 1024**2)
    key = store.key("d.example.com", "v1", "bundle.zip")
    with pytest.raises(OSError):
        upload_blob(store, key, FailingReader(data, 6 * 1024**2), sha256=digest, size=len(data))
    assert store.head(key) is None
    assert s3_client.list_multipart_uploads(Bucket=store.bucket).get("Uploads", []) == []


def test_put_immutable_compares_identity(object_store: ObjectStore) -> None:
    key = object_store.key("d.example.com", "v1", "manifest.json")
    first = object_store.put_immutable(key, b'{"a": 1}', identity={"bundle-sha256": "ab" * 32})
    again = object_store.put_immutable(key, b'{"a": 2}', identity={"bundle-sha256": "ab" * 32})
    assert (first, again) == ("created", "exists")
    with pytest.raises(IntegrityError):
        object_store.put_immutable(key, b"{}", identity={"bundle-sha256": "cd" * 32})
    assert object_store.read_json(key)[0] == {"a": 1}


def test_write_json_is_conditional(object_store: ObjectStore) -> None:
    key = object_store.key("d.example.com", "index.json")
    assert object_store.read_json(key) == (None, None)
    etag = object_store.write_json(key, {"n": 1}, if_match=None)
    with pytest.raises(TemporaryFailure, match="changed by someone else"):
        object_store.write_json(key, {"n": 2}, if_match=None)
    document, read_etag = object_store.read_json(key)
    assert document == {"n": 1} and read_etag == etag
    second = object_store.write_json(key, {"n": 2}, if_match=etag)
    with pytest.raises(TemporaryFailure):
        object_store.write_json(key, {"n": 3}, if_match=etag)
    assert object_store.read_json(key) == ({"n": 2}, second)
    assert object_store.conditional_writes is True


def test_write_json_without_server_support_falls_back_to_head(object_store: ObjectStore) -> None:
    """Where the server lacks conditional headers, HEAD-then-PUT still refuses stale writes."""
    object_store.conditional_writes = False
    key = object_store.key("d.example.com", "current.json")
    etag = object_store.write_json(key, {"n": 1}, if_match=None)
    with pytest.raises(TemporaryFailure):
        object_store.write_json(key, {"n": 2}, if_match=None)
    with pytest.raises(TemporaryFailure):
        object_store.write_json(key, {"n": 2}, if_match='"stale"')
    object_store.write_json(key, {"n": 2}, if_match=etag)
    data, digest = blob(100)
    bkey = object_store.key("d.example.com", "v", "bundle.zip")
    assert upload_blob(object_store, bkey, io.BytesIO(data), sha256=digest, size=100) == "created"
    assert upload_blob(object_store, bkey, io.BytesIO(data), sha256=digest, size=100) == "exists"


def test_read_json_refuses_non_json(object_store: ObjectStore, s3_client: Any) -> None:
    key = object_store.key("broken.json")
    s3_client.put_object(Bucket=object_store.bucket, Key=key, Body=b"not json")
    with pytest.raises(IntegrityError, match="not valid JSON"):
        object_store.read_json(key)


def test_presign_get_serves_the_object(object_store: ObjectStore) -> None:
    import urllib.request

    key = object_store.key("d.example.com", "v1", "bundle.zip")
    data, digest = blob(500)
    upload_blob(object_store, key, io.BytesIO(data), sha256=digest, size=500)
    url, expires_at = object_store.presign_get(key, 600)
    with urllib.request.urlopen(url) as answer:
        assert answer.read() == data
    assert expires_at.tzinfo is not None


def test_presign_endpoint_url_signs_for_the_pods_host_name(
    target_settings: TargetSettings,
) -> None:
    """The store is reached as 127.0.0.1, the pods know it as localhost: the link names
    localhost, and it serves the object where that name resolves."""
    import urllib.parse
    import urllib.request

    port = urllib.parse.urlsplit(target_settings.endpoint_url).port
    assert "127.0.0.1" in target_settings.endpoint_url
    pods_name = f"http://localhost:{port}"
    target = target_settings.model_copy(update={"presign_endpoint_url": pods_name})
    store = ObjectStore.from_settings(target)
    key = store.key("d.example.com", "v1", "bundle.zip")
    data, digest = blob(700)
    upload_blob(store, key, io.BytesIO(data), sha256=digest, size=700)
    url, _ = store.presign_get(key, 600)
    assert url.startswith(f"{pods_name}/{target.bucket}/")
    with urllib.request.urlopen(url) as answer:
        assert answer.read() == data
    plain, _ = ObjectStore.from_settings(target_settings).presign_get(key, 600)
    assert urllib.parse.urlsplit(plain).hostname == "127.0.0.1"


def test_missing_object_stream_is_not_found(object_store: ObjectStore) -> None:
    with pytest.raises(NotFound):
        list(object_store.open_stream(object_store.key("nope")))
    assert object_store.head(object_store.key("nope")) is None


def test_client_honours_settings() -> None:
    target = TargetSettings(
        endpoint_url="https://s3.internal.example:9000", addressing_style="virtual"
    )
    client = make_s3_client(target)
    assert client.meta.config.s3 is not None
    assert client.meta.config.s3["addressing_style"] == "virtual"
    assert client.meta.region_name == "us-east-1"
    url = client.generate_presigned_url("get_object", Params={"Bucket": "bkt", "Key": "k"})
    assert "//bkt." in url
