"""An in-memory bucket: every storage Protocol of mirror.airgap, for fast unit tests.

`MemoryBucket` implements, in one object as the S3 object store does:
- `conditional.JsonStore` and `layout.Bucket`: JSON documents with ETags, If-Match and
  If-None-Match (a lost race is WriteConflict);
- `rebuild.Store`, `chart.bucket.BucketStore`, `chart.gc.GcStore`: HEAD, streaming GET,
  presigned links, sorted listing, idempotent DELETE;
- `multipart.MultipartTarget`: uploads in parts completed create-once, aborts, the open
  uploads under the prefix;
- `probe.ProbeStore`: `client`, the few calls of boto3's S3 client the write probe makes
  (`MemoryClient`: PUT with a checksum and conditions, DELETE by key or VersionId, the
  versions under a prefix, the bucket's Date, multipart begin, list and abort).

`MemoryBucket(versioned=True)` keeps every version as a versioned S3 bucket does: each
write a new version with its VersionId, a delete by key a delete marker (the versions
stay), a delete by VersionId that version or marker gone for good.

It is held to the real server's behaviour by tests/airgap/test_contracts.py, which runs one
suite per Protocol against this fake and against SeaweedFS: a behaviour a test relies on
here is one the server was seen to have. It checks no credential and loses no byte; what
it cannot show (a server's checksums, its refusals, the network) stays with the server's
tests.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from email.utils import format_datetime
from typing import Any
from urllib.parse import quote

import botocore.exceptions

from mirror.airgap.conditional import WriteConflict
from mirror.airgap.multipart import (
    SHA256_META,
    OpenUpload,
    Outcome,
    Part,
    UploadGone,
    same_object,
)
from mirror.airgap.s3checksums import PartChecksum, crc32_base64, md5_base64, md5_hex
from mirror.errors import IntegrityError, NotFound, OperationFailed
from mirror.integrity import hash_bytes
from mirror.timestamps import utcnow

CHUNK = 64 * 1024
ENDPOINT = "https://memory.invalid"


@dataclass
class StoredObject:
    data: bytes
    metadata: dict[str, str]
    content_type: str
    etag: str
    last_modified: datetime = field(default_factory=utcnow)
    version_id: str | None = None


@dataclass(frozen=True)
class KeptVersion:
    """One version a versioned bucket keeps at a key: an object, or (None) a delete marker."""

    version_id: str
    stored: StoredObject | None


@dataclass
class _Upload:
    key: str
    metadata: dict[str, str]
    content_type: str
    initiated: datetime
    parts: dict[int, bytes] = field(default_factory=dict)


class MemoryBucket:
    """One bucket under one prefix, in memory (module docstring). `objects` is by key."""

    def __init__(
        self,
        bucket: str = "memory",
        prefix: str = "static-export",
        *,
        part_size: int = 1024,
        versioned: bool = False,
    ) -> None:
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.part_size = part_size
        self.workers = 2
        self.versioned = versioned
        self.objects: dict[str, StoredObject] = {}
        self.versions: dict[str, list[KeptVersion]] = {}  # oldest first, when versioned
        self.uploads: dict[str, _Upload] = {}
        self.part_checksum: PartChecksum = "crc32"
        self.emulate_conditional = False
        self.where = f"{ENDPOINT}/{bucket}"
        self.client = MemoryClient(self)
        self._lock = threading.Lock()

    # ---- layout.Bucket, conditional.JsonStore --------------------------------------------

    def key(self, *parts: str) -> str:
        segments = [segment for part in parts for segment in part.split("/")]
        if any(segment in ("", ".", "..") for segment in segments):
            raise ValueError(f"unsafe object key segment in {parts!r}")
        return "/".join([self.prefix, *segments] if self.prefix else segments)

    def read_json(self, key: str) -> tuple[dict[str, Any] | None, str | None]:
        stored = self.objects.get(key)
        if stored is None:
            return None, None
        document = json.loads(stored.data)
        if not isinstance(document, dict):
            raise IntegrityError(f"{self.bucket}/{key} is not a JSON object")
        return document, stored.etag

    def write_json(self, key: str, document: dict[str, Any], *, if_match: str | None) -> str:
        body = (json.dumps(document, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode()
        with self._lock:
            current = self.objects.get(key)
            if (current is None) != (if_match is None) or (
                current is not None and current.etag != if_match
            ):
                raise WriteConflict(f"{self.bucket}/{key} was changed by someone else; run again")
            return self._store(key, body, {}, "application/json").etag

    def _store(
        self, key: str, data: bytes, metadata: Mapping[str, str], content_type: str, parts: int = 0
    ) -> StoredObject:
        etag = md5_hex(data) if not parts else f"{md5_hex(data)}-{parts}"
        version = uuid.uuid4().hex if self.versioned else None
        stored = StoredObject(data, dict(metadata), content_type, f'"{etag}"', version_id=version)
        self.objects[key] = stored
        if version is not None:
            self.versions.setdefault(key, []).append(KeptVersion(version, stored))
        return stored

    def _remove(self, key: str, version_id: str | None) -> KeptVersion | None:
        """DELETE (under the lock): by key, the object, or on a versioned bucket a new delete
        marker (returned); by VersionId, that version or marker (returned, None if none)."""
        kept = self.versions.get(key, [])
        if not self.versioned or version_id is None:
            self.objects.pop(key, None)
            if not self.versioned:
                return None
            marker = KeptVersion(uuid.uuid4().hex, None)
            kept.append(marker)
            self.versions[key] = kept
            return marker
        gone = next((version for version in kept if version.version_id == version_id), None)
        if gone is not None:
            kept.remove(gone)
            latest = kept[-1].stored if kept else None
            if latest is None:
                self.objects.pop(key, None)
            else:
                self.objects[key] = latest
        if not kept:
            self.versions.pop(key, None)
        return gone

    # ---- reads, links, listing, removal ----------------------------------------------------

    def head(self, key: str) -> dict[str, Any] | None:
        stored = self.objects.get(key)
        if stored is None:
            return None
        metadata = {name.lower(): value for name, value in stored.metadata.items()}
        return {
            "size": len(stored.data),
            "etag": stored.etag,
            "sha256": metadata.get(SHA256_META),
            "metadata": metadata,
            "last_modified": stored.last_modified,
            "content_type": stored.content_type,
        }

    def open_stream(self, key: str) -> Iterator[bytes]:
        stored = self.objects.get(key)
        if stored is None:
            raise NotFound(f"{self.bucket}/{key} does not exist")
        for start in range(0, len(stored.data), CHUNK):
            yield stored.data[start : start + CHUNK]

    def presign_get(self, key: str, ttl: float) -> tuple[str, datetime]:
        seconds = max(1, int(ttl))
        signed = utcnow().replace(microsecond=0)
        stamp = signed.strftime("%Y%m%dT%H%M%SZ")
        url = (
            f"{ENDPOINT}/{self.bucket}/{quote(key, safe='/')}"
            f"?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Date={stamp}&X-Amz-Expires={seconds}"
        )
        return url, signed + timedelta(seconds=seconds)

    def list_keys(self, prefix: str = "") -> list[str]:
        return sorted(key for key in list(self.objects) if key.startswith(prefix))

    def delete(self, key: str) -> None:
        with self._lock:
            self._remove(key, None)

    # ---- immutable objects and multipart.MultipartTarget -----------------------------------

    def existing(
        self, key: str, identity: Mapping[str, str], *, size: int | None = None
    ) -> dict[str, Any] | None:
        return same_object(self.head(key), identity, size, where=f"{self.bucket}/{key}")

    def put_immutable(
        self,
        key: str,
        data: bytes,
        *,
        identity: Mapping[str, str],
        content_type: str = "application/json",
    ) -> Outcome:
        with self._lock:
            if self.existing(key, identity) is not None:
                return "exists"
            self._store(key, data, {SHA256_META: hash_bytes(data), **identity}, content_type)
            return "created"

    def start_upload(self, key: str, *, identity: Mapping[str, str], content_type: str) -> str:
        upload_id = uuid.uuid4().hex
        with self._lock:
            self.uploads[upload_id] = _Upload(key, dict(identity), content_type, utcnow())
        return upload_id

    def upload_part(self, key: str, upload_id: str, number: int, data: bytearray) -> Part:
        with self._lock:
            upload = self._upload(key, upload_id, "upload part")
            upload.parts[number] = bytes(data)
        return {"ETag": f'"{md5_hex(data)}"', "PartNumber": number}

    def complete_upload(
        self, key: str, upload_id: str, parts: list[Part], *, identity: Mapping[str, str], size: int
    ) -> Outcome:
        with self._lock:
            upload = self._upload(key, upload_id, "PUT")
            numbers = [int(part["PartNumber"]) for part in parts]
            if numbers != sorted(set(numbers)) or not set(numbers) <= set(upload.parts):
                raise OperationFailed(f"S3 PUT of {self.bucket}/{key} failed with InvalidPart")
            if self.existing(key, identity, size=size) is not None:
                return "exists"
            data = b"".join(upload.parts[number] for number in numbers)
            self._store(key, data, upload.metadata, upload.content_type, parts=len(numbers))
            del self.uploads[upload_id]
            return "created"

    def _upload(self, key: str, upload_id: str, action: str) -> _Upload:
        upload = self.uploads.get(upload_id)
        if upload is None or upload.key != key:
            raise UploadGone(f"S3 {action} of {self.bucket}/{key} failed with NoSuchUpload")
        return upload

    def abort_upload(self, key: str, upload_id: str) -> bool:
        with self._lock:
            self.uploads.pop(upload_id, None)
        return True

    def open_uploads(self) -> list[OpenUpload]:
        prefix = f"{self.prefix}/" if self.prefix else ""
        with self._lock:
            return [
                OpenUpload(upload.key, upload_id, upload.initiated)
                for upload_id, upload in self.uploads.items()
                if upload.key.startswith(prefix)
            ]


class MemoryClient:
    """The calls of boto3's S3 client that `mirror.airgap.probe` makes, on a MemoryBucket,
    answered as SeaweedFS answers them (tests/airgap/test_contracts.py, TestProbeStore):
    keyword arguments in (boto3's names, capitals and all), the answer's fields out, a
    refusal a botocore ClientError."""

    def __init__(self, bucket: MemoryBucket) -> None:
        self._bucket = bucket

    def put_object(self, *, Bucket: str, Key: str, Body: bytes, **extra: Any) -> dict[str, Any]:
        if not isinstance(Body, bytes | bytearray):
            raise TypeError(f"Body must be bytes, not {type(Body).__name__}")  # as boto3 checks
        data = bytes(Body)
        sent = {name: extra[name] for name in ("ContentMD5", "ChecksumCRC32") if name in extra}
        if sent and sent != {name: _checksum(name, data) for name in sent}:
            raise _refusal("PutObject", "BadDigest", 400)
        bucket = self._bucket
        with bucket._lock:
            current = bucket.objects.get(Key)
            if extra.get("IfNoneMatch") == "*" and current is not None:
                raise _refusal("PutObject", "PreconditionFailed", 412)
            if "IfMatch" in extra and (current is None or current.etag != extra["IfMatch"]):
                raise _refusal("PutObject", "PreconditionFailed", 412)
            stored = bucket._store(Key, data, {}, "application/octet-stream")
        answer: dict[str, Any] = {"ETag": stored.etag}
        if stored.version_id is not None:
            answer["VersionId"] = stored.version_id
        return answer

    def delete_object(
        self, *, Bucket: str, Key: str, VersionId: str | None = None
    ) -> dict[str, Any]:
        with self._bucket._lock:
            gone = self._bucket._remove(Key, VersionId)
        if gone is None:
            return {}
        answer: dict[str, Any] = {"VersionId": gone.version_id}
        if gone.stored is None:
            answer["DeleteMarker"] = True
        return answer

    def list_object_versions(self, *, Bucket: str, Prefix: str = "") -> dict[str, Any]:
        versions: list[dict[str, Any]] = []
        markers: list[dict[str, Any]] = []
        with self._bucket._lock:
            for key in sorted(self._bucket.versions):
                if key.startswith(Prefix):
                    kept = self._bucket.versions[key]
                    for place, version in enumerate(reversed(kept)):
                        entry = {"Key": key, "VersionId": version.version_id, "IsLatest": not place}
                        (versions if version.stored is not None else markers).append(entry)
            if not self._bucket.versioned:
                versions = [
                    {"Key": key, "VersionId": "null", "IsLatest": True}
                    for key in self._bucket.list_keys(Prefix)
                ]
        return {"Versions": versions, "DeleteMarkers": markers}

    def head_bucket(self, *, Bucket: str) -> dict[str, Any]:
        date = format_datetime(utcnow(), usegmt=True)
        return {"ResponseMetadata": {"HTTPStatusCode": 200, "HTTPHeaders": {"date": date}}}

    def create_multipart_upload(self, *, Bucket: str, Key: str) -> dict[str, Any]:
        upload = self._bucket.start_upload(Key, identity={}, content_type="binary/octet-stream")
        return {"UploadId": upload}

    def list_multipart_uploads(self, *, Bucket: str, Prefix: str = "") -> dict[str, Any]:
        listed = [u for u in self._bucket.open_uploads() if u.key.startswith(Prefix)]
        return {"Uploads": [{"Key": u.key, "UploadId": u.upload_id} for u in listed]}

    def abort_multipart_upload(self, *, Bucket: str, Key: str, UploadId: str) -> dict[str, Any]:
        self._bucket.abort_upload(Key, UploadId)
        return {}


def _checksum(name: str, data: bytes) -> str:
    return crc32_base64(data) if name == "ChecksumCRC32" else md5_base64(data)


def _refusal(operation: str, code: str, status: int) -> botocore.exceptions.ClientError:
    answer: Any = {
        "Error": {"Code": code, "Message": code},
        "ResponseMetadata": {"HTTPStatusCode": status},
    }
    return botocore.exceptions.ClientError(answer, operation)
