"""The air-gapped side's object store (any S3 API: AWS, MinIO, Ceph, moto).

Promises:
- Bundles and per-version manifests are written once and never overwritten:
  `If-None-Match: *` where the server honours it, and a HEAD first in every
  case, so a server that ignores the header still cannot be made to replace a
  blob by a re-run. The same key with the same identity metadata is "already
  there"; anything else is an IntegrityError (exit 5).
- Pointers (`index.json`, `current.json`, the import state) are replaced whole
  with `If-Match` on the ETag that was read; losing a race is a WriteConflict
  (a TemporaryFailure, exit 75) and never a lost update. Callers change them
  through `conditional.read_modify_write`, which reads again and retries.
- Uploads stream in parts with bounded memory (mirror.airgap.multipart: staged
  uploads, completed only once their bytes matched); a blob whose bytes do not hash
  to the promised sha256 is aborted before it becomes visible.
- Messages name the bucket and key, never a credential.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import logging
import threading
from collections.abc import Callable, Iterator, Mapping
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import botocore.exceptions

from mirror.airgap.conditional import WriteConflict
from mirror.airgap.multipart import (
    SHA256_META,
    Outcome,
    PartChecksum,
    Reader,
    Staging,
    check_part_answer,
    is_plain_md5,
)
from mirror.airgap.s3client import make_s3_client
from mirror.airgap.s3errors import (
    CONFLICT_CODES,
    MISSING_BUCKET_CODES,
    MISSING_KEY_CODES,
    UNSUPPORTED_CODES,
    error_code,
    http_status,
    s3_failure,
)
from mirror.config import TargetSettings
from mirror.errors import (
    ConfigError,
    IntegrityError,
    MirrorError,
    NotFound,
    TemporaryFailure,
)
from mirror.integrity import CHUNK_SIZE
from mirror.logs import redacted_url
from mirror.timestamps import utcnow

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client
else:
    S3Client = Any

log = logging.getLogger(__name__)

# Upload memory is UPLOAD_WORKERS parts (being read, hashed or sent): 16 MiB. 8 MiB parts
# (aws-cli's size) cost an import about 3 MiB of peak RSS more than S3's smallest, 5 MiB, and
# make it about a quarter faster against SeaweedFS (fewer requests for the server to
# assemble; bench/RESULTS.md). A blob of more than 10,000 parts (78 GiB) gets larger parts.
# Two parts in flight keep both cores busy: one is read and hashed while the other is sent.
PART_SIZE = 8 * 1024 * 1024
MAX_JSON_BYTES = 16 * 1024 * 1024
UPLOAD_WORKERS = 2


class ObjectStore:
    """One bucket under one prefix; every key the tool writes goes through `key()`."""

    def __init__(
        self,
        client: S3Client,
        bucket: str,
        prefix: str = "static-export",
        *,
        part_size: int = PART_SIZE,
        workers: int = UPLOAD_WORKERS,
        presign_client: S3Client | None = None,
        part_checksum: PartChecksum = "crc32",
        emulate_conditional: bool = False,
    ) -> None:
        if not bucket:
            raise ConfigError("target.bucket is not set", hint="name the object store's bucket")
        self.client = client
        self.presign_client = presign_client or client
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.part_size = max(5 * 1024 * 1024, part_size)
        self.workers = max(1, workers)
        self.part_checksum: PartChecksum = part_checksum
        self.emulate_conditional = emulate_conditional
        self.conditional_writes: bool | None = None
        self._lock = threading.Lock()

    @classmethod
    def from_settings(cls, target: TargetSettings, client: S3Client | None = None) -> ObjectStore:
        """With `target.presign_endpoint_url`, links are presigned for that address (the
        host name the pods use): SigV4 signs the host, so it cannot be swapped afterwards."""
        presign_client = None
        if target.presign_endpoint_url:
            other = target.model_copy(update={"endpoint_url": target.presign_endpoint_url})
            presign_client = make_s3_client(other)
        return cls(
            client or make_s3_client(target),
            target.bucket,
            target.prefix,
            presign_client=presign_client,
            part_checksum=target.part_checksum,
            emulate_conditional=target.conditional_writes == "emulate",
        )

    def key(self, *parts: str) -> str:
        """`prefix/part1/part2...`; refuses empty, `.` and `..` segments."""
        segments: list[str] = []
        for part in parts:
            for segment in part.split("/"):
                if segment in ("", ".", ".."):
                    raise ValueError(f"unsafe object key segment in {part!r}")
                segments.append(segment)
        return "/".join([self.prefix, *segments] if self.prefix else segments)

    @property
    def where(self) -> str:
        endpoint = getattr(getattr(self.client, "meta", None), "endpoint_url", "") or ""
        return f"bucket {self.bucket}" + (f" at {redacted_url(endpoint)}" if endpoint else "")

    def _error(self, exc: Exception, action: str, key: str | None = None) -> MirrorError:
        """The one-line MirrorError for a failed S3 call (no credential, no server prose)."""
        thing = f"{self.bucket}/{key}" if key else f"bucket {self.bucket}"
        return s3_failure(exc, action, thing=thing, where=self.where)

    @contextlib.contextmanager
    def call(self, action: str, key: str | None = None) -> Iterator[None]:
        try:
            yield
        except (botocore.exceptions.ClientError, botocore.exceptions.BotoCoreError) as exc:
            raise self._error(exc, action, key) from None

    def check_access(self) -> None:
        """Prove the bucket exists and the credentials are accepted, before any other work."""
        try:
            self.client.head_bucket(Bucket=self.bucket)
        except botocore.exceptions.ClientError as exc:
            if http_status(exc) == 404 or error_code(exc) in MISSING_BUCKET_CODES:
                raise NotFound(
                    f"{self.where} does not exist", hint="create it or fix target.bucket"
                ) from None
            if http_status(exc) == 403:
                self._explain_refusal()
            raise self._error(exc, "access check") from None
        except botocore.exceptions.BotoCoreError as exc:
            raise self._error(exc, "access check") from None

    def _explain_refusal(self) -> None:
        """A HEAD refusal has no body to say why; a one-key listing does (a skewed clock
        and refused credentials both answer 403)."""
        with self.call("access check"):
            self.client.list_objects_v2(Bucket=self.bucket, MaxKeys=1)

    def head(self, key: str) -> dict[str, Any] | None:
        """The object's facts, or None when it does not exist.

        Keys: `size` (int), `etag` (str, quoted as the server sent it), `sha256`
        (from metadata, or None), `metadata` (dict), `last_modified` (datetime),
        `content_type` (str).
        """
        try:
            answer = self.client.head_object(Bucket=self.bucket, Key=key)
        except botocore.exceptions.ClientError as exc:
            if error_code(exc) in MISSING_KEY_CODES or http_status(exc) == 404:
                if error_code(exc) in MISSING_BUCKET_CODES:
                    raise self._error(exc, "HEAD", key) from None
                return None
            raise self._error(exc, "HEAD", key) from None
        except botocore.exceptions.BotoCoreError as exc:
            raise self._error(exc, "HEAD", key) from None
        metadata = {k.lower(): v for k, v in (answer.get("Metadata") or {}).items()}
        return {
            "size": int(answer.get("ContentLength", 0)),
            "etag": answer.get("ETag", ""),
            "sha256": metadata.get(SHA256_META),
            "metadata": metadata,
            "last_modified": answer.get("LastModified"),
            "content_type": answer.get("ContentType", ""),
        }

    def _get(self, key: str) -> dict[str, Any] | None:
        """The GET answer (its Body still to read), or None when the object does not exist."""
        try:
            return dict(self.client.get_object(Bucket=self.bucket, Key=key))
        except botocore.exceptions.ClientError as exc:
            if error_code(exc) in MISSING_KEY_CODES:
                return None
            raise self._error(exc, "GET", key) from None
        except botocore.exceptions.BotoCoreError as exc:
            raise self._error(exc, "GET", key) from None

    def read_json(self, key: str) -> tuple[dict[str, Any] | None, str | None]:
        """(document, etag), or (None, None) when the object does not exist."""
        answer = self._get(key)
        if answer is None:
            return None, None
        body = answer["Body"]
        try:
            with self.call("GET", key):
                data = body.read(MAX_JSON_BYTES + 1)
        finally:
            body.close()
        if len(data) > MAX_JSON_BYTES:
            raise IntegrityError(f"{self.bucket}/{key} is larger than {MAX_JSON_BYTES} bytes")
        self._check_read_back(key, data, answer)
        try:
            document = json.loads(data)
        except (ValueError, RecursionError):
            raise IntegrityError(f"{self.bucket}/{key} is not valid JSON") from None
        if not isinstance(document, dict):
            raise IntegrityError(f"{self.bucket}/{key} is not a JSON object")
        return document, str(answer.get("ETag", "")) or None

    def _check_read_back(self, key: str, data: bytes, answer: dict[str, Any]) -> None:
        """Refuse a document whose bytes are not the ones the server reports storing: every
        JSON document is written in one PutObject, so its ETag is the MD5 of its bytes (unless
        encrypted). A bit flipped on the way back would otherwise be parsed, changed and
        written back whole with If-Match, making the damage permanent."""
        etag = str(answer.get("ETag", "")).strip('"')
        if not is_plain_md5(etag) or answer.get("ServerSideEncryption"):
            return
        if hashlib.md5(data, usedforsecurity=False).hexdigest() != etag:
            raise IntegrityError(
                f"{self.bucket}/{key} was damaged on the way from the server (its bytes do not "
                "match the MD5 ETag the server reports); nothing was written",
                hint="run again; if it recurs, check the network path to the object store",
            )

    def open_stream(self, key: str) -> Iterator[bytes]:
        """The object's bytes in CHUNK_SIZE pieces; NotFound when it does not exist."""
        answer = self._get(key)
        if answer is None:
            raise NotFound(f"{self.bucket}/{key} does not exist")
        body = answer["Body"]
        try:
            with self.call("GET", key):
                yield from body.iter_chunks(CHUNK_SIZE)
        finally:
            body.close()

    def presign_get(self, key: str, ttl: float) -> tuple[str, datetime]:
        """A presigned GET link for `key` valid `ttl` seconds, and when it expires."""
        seconds = max(1, int(ttl))
        expires_at = utcnow() + timedelta(seconds=seconds)
        with self.call("presign", key):
            url = self.presign_client.generate_presigned_url(
                "get_object", Params={"Bucket": self.bucket, "Key": key}, ExpiresIn=seconds
            )
        return url, expires_at

    def list_keys(self, prefix: str = "") -> list[str]:
        """Every key under `prefix` (a full key prefix), sorted."""
        keys: list[str] = []
        paginator = self.client.get_paginator("list_objects_v2")
        with self.call("LIST", prefix or None):
            for page in paginator.paginate(Bucket=self.bucket, Prefix=prefix):
                keys.extend(item["Key"] for item in page.get("Contents", []))
        return sorted(keys)

    def write_json(self, key: str, document: dict[str, Any], *, if_match: str | None) -> str:
        """Replace `key` with `document` only if it still has ETag `if_match`; returns the new ETag.

        `if_match=None` means the key must not exist yet. Losing the race raises
        TemporaryFailure "... changed by someone else; run again".
        """
        body = (json.dumps(document, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode()
        conflict = WriteConflict(f"{self.bucket}/{key} was changed by someone else; run again")
        if self.conditional_writes is False:
            current = self.head(key)
            if (if_match is None) != (current is None) or (
                current is not None and current["etag"] != if_match
            ):
                raise conflict
        extra: dict[str, Any] = {}
        if self.conditional_writes is not False:
            extra = {"IfNoneMatch": "*"} if if_match is None else {"IfMatch": if_match}
        try:
            answer = self.client.put_object(
                Bucket=self.bucket,
                Key=key,
                Body=body,
                ContentType="application/json",
                ContentMD5=md5_base64(body),
                **extra,
            )
        except botocore.exceptions.ClientError as exc:
            if error_code(exc) in CONFLICT_CODES or http_status(exc) == 412:
                raise conflict from None
            if if_match is not None and error_code(exc) in MISSING_KEY_CODES:
                raise conflict from None
            if extra and self._unsupported(exc):
                return self.write_json(key, document, if_match=if_match)
            raise self._error(exc, "PUT", key) from None
        except botocore.exceptions.BotoCoreError as exc:
            raise self._error(exc, "PUT", key) from None
        self._note_conditional(bool(extra))
        return str(answer.get("ETag", ""))

    def put_immutable(
        self,
        key: str,
        data: bytes,
        *,
        identity: Mapping[str, str],
        content_type: str = "application/json",
    ) -> Outcome:
        """Write a small object once; `identity` (metadata) decides "already there" vs conflict."""
        metadata = {**identity}
        metadata.setdefault(SHA256_META, hashlib.sha256(data).hexdigest())
        if self.existing(key, identity) is not None:
            return "exists"
        return self.put_once(key, data, identity, content_type, metadata=metadata)

    def put_once(
        self,
        key: str,
        data: bytes,
        identity: Mapping[str, str],
        content_type: str,
        *,
        metadata: Mapping[str, str] | None = None,
        size: int | None = None,
    ) -> Outcome:
        """One conditional PutObject of bytes in memory (see `create_once` for the rules)."""
        metadata = metadata or identity

        def put(extra: dict[str, Any]) -> None:
            checksum = md5_base64(data)
            answer = self.client.put_object(
                Bucket=self.bucket,
                Key=key,
                Body=data,
                ContentType=content_type,
                ContentMD5=checksum,
                Metadata=dict(metadata),
                **extra,
            )
            try:
                check_part_answer(key, 1, {"ContentMD5": checksum}, dict(answer))
            except IntegrityError:
                self.delete(key)
                raise

        return self.create_once(key, identity, put, size=size)

    def upload_blob(
        self,
        key: str,
        source: Reader,
        *,
        sha256: str,
        size: int,
        content_type: str = "application/octet-stream",
        on_progress: Callable[[int], None] | None = None,
    ) -> Outcome:
        """Stream `size` bytes from `source` to `key` once, with `sha256` in its metadata.

        One staged upload (mirror.airgap.multipart) completed at once: the bytes
        are hashed as they are read; when they do not hash to `sha256` (or the
        length differs) the upload is aborted and IntegrityError raised, so the
        object never appears. Memory stays at `workers` parts.
        """
        with Staging(self) as staging:
            staging.stage(
                key,
                source,
                sha256=sha256,
                size=size,
                content_type=content_type,
                on_progress=on_progress,
            )
            return staging.complete()[key]

    def existing(
        self, key: str, identity: Mapping[str, str], *, size: int | None = None
    ) -> dict[str, Any] | None:
        """The object at `key` when it is the same one; IntegrityError when it is another."""
        facts = self.head(key)
        if facts is None:
            return None
        metadata = facts["metadata"]
        differs = [name for name, value in identity.items() if metadata.get(name) != value]
        if differs or (size is not None and facts["size"] != size):
            raise IntegrityError(
                f"{self.bucket}/{key} already exists with different content "
                f"({', '.join(differs) or 'size'} differs); objects are never overwritten",
                hint="remove it by hand only if you are sure it is wrong",
            )
        return facts

    def create_once(
        self,
        key: str,
        identity: Mapping[str, str],
        write: Callable[[dict[str, Any]], None],
        *,
        size: int | None = None,
    ) -> Outcome:
        extra: dict[str, Any] = {} if self.conditional_writes is False else {"IfNoneMatch": "*"}
        try:
            write(extra)
        except botocore.exceptions.ClientError as exc:
            if error_code(exc) in CONFLICT_CODES or http_status(exc) == 412:
                if self.existing(key, identity, size=size) is not None:
                    return "exists"
                raise TemporaryFailure(
                    f"{self.bucket}/{key} is being written by someone else; run again"
                ) from None
            if extra and self._unsupported(exc):
                if self.existing(key, identity, size=size) is not None:
                    return "exists"
                return self.create_once(key, identity, write, size=size)
            raise self._error(exc, "PUT", key) from None
        except botocore.exceptions.BotoCoreError as exc:
            raise self._error(exc, "PUT", key) from None
        self._note_conditional(bool(extra))
        return "created"

    def _unsupported(self, exc: botocore.exceptions.ClientError) -> bool:
        """True (and remembered) when the server refuses conditional headers as unsupported
        and `target.conditional_writes = "emulate"` allows HEAD before PUT instead."""
        if error_code(exc) in UNSUPPORTED_CODES or http_status(exc) == 501:
            if not self.emulate_conditional:
                raise without_conditional_writes(self.where, "refuses") from None
            with self._lock:
                self.conditional_writes = False
            log.warning(
                "the object store does not support conditional writes; using HEAD before PUT",
                extra={"bucket": self.bucket},
            )
            return True
        return False

    def _note_conditional(self, used: bool) -> None:
        if used and self.conditional_writes is None:
            with self._lock:
                self.conditional_writes = True

    def delete(self, key: str) -> None:
        """Remove `key`. Removing a key that is not there is not an error (as in S3), so a
        deletion interrupted and run again simply finishes."""
        with self.call("DELETE", key):
            self.client.delete_object(Bucket=self.bucket, Key=key)


def without_conditional_writes(where: str, how: str) -> ConfigError:
    """The refusal of a server that does not honour If-None-Match / If-Match."""
    return ConfigError(
        f"the object store ({where}) {how} conditional writes (If-None-Match, If-Match), "
        "so two writers could overwrite each other",
        hint='set target.conditional_writes = "emulate" to check with HEAD before each '
        "write instead (safe against re-runs, not against two imports at the same moment)",
    )


def md5_base64(data: bytes) -> str:
    return base64.b64encode(hashlib.md5(data, usedforsecurity=False).digest()).decode()
