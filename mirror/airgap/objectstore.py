"""The air-gapped side's object store (any S3 API: AWS, MinIO, Ceph, moto).

Promises:
- Bundles and per-version manifests are written once and never overwritten:
  `If-None-Match: *` where the server honours it, and a HEAD first in every
  case, so a server that ignores the header still cannot be made to replace a
  blob by a re-run. The same key with the same identity metadata is "already
  there"; anything else is an IntegrityError (exit 5).
- Pointers (`index.json`, `current.json`, the import state) are replaced whole
  with `If-Match` on the ETag that was read; losing a race is a
  TemporaryFailure (exit 75) and never a lost update.
- Uploads stream in parts with bounded memory; a blob whose bytes do not hash
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
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal, Protocol

import boto3
import botocore.config
import botocore.exceptions

from mirror.airgap.conditional import WriteConflict
from mirror.config import TargetSettings
from mirror.errors import (
    AuthError,
    ConfigError,
    IntegrityError,
    MirrorError,
    NotFound,
    OperationFailed,
    TemporaryFailure,
)
from mirror.fsutil import CHUNK_SIZE
from mirror.logs import register_secret

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client
else:
    S3Client = Any

log = logging.getLogger(__name__)

PART_SIZE = 8 * 1024 * 1024
MAX_PARTS = 10_000
MAX_JSON_BYTES = 16 * 1024 * 1024
UPLOAD_WORKERS = 4
SHA256_META = "sha256"

Outcome = Literal["created", "exists"]

_AUTH_CODES = frozenset(
    {
        "403",
        "AccessDenied",
        "InvalidAccessKeyId",
        "SignatureDoesNotMatch",
        "InvalidToken",
        "ExpiredToken",
        "TokenRefreshRequired",
        "AuthorizationHeaderMalformed",
        "InvalidSecurity",
        "AllAccessDisabled",
    }
)
_MISSING_BUCKET_CODES = frozenset({"NoSuchBucket"})
_MISSING_KEY_CODES = frozenset({"NoSuchKey", "404", "NotFound"})
_CONFLICT_CODES = frozenset({"PreconditionFailed", "412", "ConditionalRequestConflict", "409"})
_UNSUPPORTED_CODES = frozenset({"NotImplemented", "501"})
_TEMPORARY_CODES = frozenset(
    {"SlowDown", "ServiceUnavailable", "InternalError", "RequestTimeout", "Throttling", "503"}
)


class Reader(Protocol):
    """Anything with `read(n)`; a short read means the end of the stream."""

    def read(self, size: int = -1, /) -> bytes: ...


def make_s3_client(target: TargetSettings, *, max_attempts: int = 5) -> S3Client:
    """A boto3 S3 client for `target`: endpoint, region, addressing style, CA bundle, retries.

    Credentials come from boto3's usual chain (environment, profile, role); they
    are registered as secrets so no log line can carry them. Request checksums
    are only sent where the API requires them, which keeps MinIO and Ceph
    releases without the newer trailing-checksum encoding working; uploads
    carry Content-MD5 instead.
    """
    config = botocore.config.Config(
        region_name=target.region or None,
        signature_version="s3v4",
        s3={"addressing_style": target.addressing_style},
        retries={"max_attempts": max_attempts, "mode": "standard"},
        connect_timeout=10,
        read_timeout=120,
        request_checksum_calculation="when_required",
        response_checksum_validation="when_required",
    )
    session = boto3.session.Session()
    credentials = session.get_credentials()
    if credentials is not None:
        frozen = credentials.get_frozen_credentials()
        for secret in (frozen.access_key, frozen.secret_key, frozen.token):
            register_secret(secret)
    verify: str | bool = target.ca_bundle or True
    return session.client(
        "s3",
        endpoint_url=target.endpoint_url or None,
        verify=verify,
        config=config,
    )


def _code(exc: botocore.exceptions.ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", "") or "")


def _status(exc: botocore.exceptions.ClientError) -> int:
    return int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)


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
    ) -> None:
        if not bucket:
            raise ConfigError("target.bucket is not set", hint="name the object store's bucket")
        self.client = client
        self.presign_client = presign_client or client
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.part_size = max(5 * 1024 * 1024, part_size)
        self.workers = max(1, workers)
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
        )

    # ---- names and errors -------------------------------------------------------------------

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
        return f"bucket {self.bucket}" + (f" at {endpoint}" if endpoint else "")

    def _error(self, exc: Exception, action: str, key: str | None = None) -> MirrorError:
        """The one-line MirrorError for a failed S3 call (no credential, no server prose)."""
        thing = f"{self.bucket}/{key}" if key else f"bucket {self.bucket}"
        if isinstance(exc, botocore.exceptions.ClientError):
            code, status = _code(exc), _status(exc)
            if code in _MISSING_BUCKET_CODES:
                return NotFound(
                    f"{self.where} does not exist", hint="create it or fix target.bucket"
                )
            if code in _AUTH_CODES or status == 403:
                return AuthError(
                    f"S3 refused the credentials for {self.where} ({code or status})",
                    hint="check the S3 credentials (environment, profile or role) "
                    "and the bucket policy",
                )
            if code in _TEMPORARY_CODES or status >= 500:
                return TemporaryFailure(
                    f"S3 {action} of {thing} failed with {code or status}; try again later"
                )
            return OperationFailed(f"S3 {action} of {thing} failed with {code or status}")
        if isinstance(exc, botocore.exceptions.NoCredentialsError):
            return AuthError(
                "no S3 credentials found",
                hint="set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, AWS_PROFILE or a role",
            )
        if isinstance(exc, botocore.exceptions.SSLError):
            return ConfigError(
                f"TLS verification failed for the object store ({self.where})",
                hint="set target.ca_bundle to the internal CA file",
            )
        if isinstance(
            exc,
            botocore.exceptions.EndpointConnectionError
            | botocore.exceptions.ConnectionClosedError
            | botocore.exceptions.ReadTimeoutError
            | botocore.exceptions.ConnectTimeoutError,
        ):
            return TemporaryFailure(
                f"cannot reach the object store for {self.where}",
                hint="check target.endpoint_url and the network",
            )
        if isinstance(exc, botocore.exceptions.BotoCoreError):
            return OperationFailed(f"S3 {action} of {thing} failed: {type(exc).__name__}")
        raise exc

    @contextlib.contextmanager
    def _call(self, action: str, key: str | None = None) -> Iterator[None]:
        try:
            yield
        except (botocore.exceptions.ClientError, botocore.exceptions.BotoCoreError) as exc:
            raise self._error(exc, action, key) from None

    # ---- reading ----------------------------------------------------------------------------

    def check_access(self) -> None:
        """Prove the bucket exists and the credentials are accepted, before any other work."""
        try:
            self.client.head_bucket(Bucket=self.bucket)
        except botocore.exceptions.ClientError as exc:
            if _status(exc) == 404 or _code(exc) in _MISSING_BUCKET_CODES:
                raise NotFound(
                    f"{self.where} does not exist", hint="create it or fix target.bucket"
                ) from None
            raise self._error(exc, "access check") from None
        except botocore.exceptions.BotoCoreError as exc:
            raise self._error(exc, "access check") from None

    def head(self, key: str) -> dict[str, Any] | None:
        """The object's facts, or None when it does not exist.

        Keys: `size` (int), `etag` (str, quoted as the server sent it), `sha256`
        (from metadata, or None), `metadata` (dict), `last_modified` (datetime),
        `content_type` (str).
        """
        try:
            answer = self.client.head_object(Bucket=self.bucket, Key=key)
        except botocore.exceptions.ClientError as exc:
            if _code(exc) in _MISSING_KEY_CODES or _status(exc) == 404:
                if _code(exc) in _MISSING_BUCKET_CODES:
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

    def read_json(self, key: str) -> tuple[dict[str, Any] | None, str | None]:
        """(document, etag), or (None, None) when the object does not exist."""
        try:
            answer = self.client.get_object(Bucket=self.bucket, Key=key)
        except botocore.exceptions.ClientError as exc:
            if _code(exc) in _MISSING_KEY_CODES:
                return None, None
            raise self._error(exc, "GET", key) from None
        except botocore.exceptions.BotoCoreError as exc:
            raise self._error(exc, "GET", key) from None
        body = answer["Body"]
        try:
            with self._call("GET", key):
                data = body.read(MAX_JSON_BYTES + 1)
        finally:
            body.close()
        if len(data) > MAX_JSON_BYTES:
            raise IntegrityError(f"{self.bucket}/{key} is larger than {MAX_JSON_BYTES} bytes")
        try:
            document = json.loads(data)
        except (ValueError, RecursionError):
            raise IntegrityError(f"{self.bucket}/{key} is not valid JSON") from None
        if not isinstance(document, dict):
            raise IntegrityError(f"{self.bucket}/{key} is not a JSON object")
        return document, str(answer.get("ETag", "")) or None

    def open_stream(self, key: str) -> Iterator[bytes]:
        """The object's bytes in CHUNK_SIZE pieces; NotFound when it does not exist."""
        try:
            answer = self.client.get_object(Bucket=self.bucket, Key=key)
        except botocore.exceptions.ClientError as exc:
            if _code(exc) == "NoSuchKey":
                raise NotFound(f"{self.bucket}/{key} does not exist") from None
            raise self._error(exc, "GET", key) from None
        except botocore.exceptions.BotoCoreError as exc:
            raise self._error(exc, "GET", key) from None
        body = answer["Body"]
        try:
            with self._call("GET", key):
                yield from body.iter_chunks(CHUNK_SIZE)
        finally:
            body.close()

    def presign_get(self, key: str, ttl: float) -> tuple[str, datetime]:
        """A presigned GET link for `key` valid `ttl` seconds, and when it expires."""
        seconds = max(1, int(ttl))
        expires_at = datetime.now(UTC) + timedelta(seconds=seconds)
        with self._call("presign", key):
            url = self.presign_client.generate_presigned_url(
                "get_object", Params={"Bucket": self.bucket, "Key": key}, ExpiresIn=seconds
            )
        return url, expires_at

    def list_keys(self, prefix: str = "") -> list[str]:
        """Every key under `prefix` (a full key prefix), sorted."""
        keys: list[str] = []
        paginator = self.client.get_paginator("list_objects_v2")
        with self._call("LIST", prefix or None):
            for page in paginator.paginate(Bucket=self.bucket, Prefix=prefix):
                keys.extend(item["Key"] for item in page.get("Contents", []))
        return sorted(keys)

    # ---- pointers ---------------------------------------------------------------------------

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
                ContentMD5=_md5(body),
                **extra,
            )
        except botocore.exceptions.ClientError as exc:
            if _code(exc) in _CONFLICT_CODES or _status(exc) == 412:
                raise conflict from None
            if if_match is not None and _code(exc) in _MISSING_KEY_CODES:
                raise conflict from None
            if extra and self._unsupported(exc):
                return self.write_json(key, document, if_match=if_match)
            raise self._error(exc, "PUT", key) from None
        except botocore.exceptions.BotoCoreError as exc:
            raise self._error(exc, "PUT", key) from None
        self._note_conditional(bool(extra))
        return str(answer.get("ETag", ""))

    # ---- immutable objects ------------------------------------------------------------------

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
        if self._existing(key, identity) is not None:
            return "exists"
        return self._put_once(key, data, identity, metadata, content_type)

    def _put_once(
        self,
        key: str,
        data: bytes,
        identity: Mapping[str, str],
        metadata: Mapping[str, str],
        content_type: str,
        size: int | None = None,
    ) -> Outcome:
        """One conditional PutObject of bytes in memory (see `_create_once` for the rules)."""

        def put(extra: dict[str, Any]) -> None:
            self.client.put_object(
                Bucket=self.bucket,
                Key=key,
                Body=data,
                ContentType=content_type,
                ContentMD5=_md5(data),
                Metadata=dict(metadata),
                **extra,
            )

        return self._create_once(key, identity, put, size=size)

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

        The bytes are hashed as they are read; when they do not hash to `sha256`
        (or the length differs) the upload is aborted and IntegrityError raised,
        so the object never appears. Memory stays at (workers + 1) parts.
        """
        identity = {SHA256_META: sha256}
        if self._existing(key, identity, size=size) is not None:
            return "exists"
        part_size = max(self.part_size, -(-size // MAX_PARTS))
        if size <= part_size:
            data = _read_exact(source, size + 1)
            _check_whole(
                key,
                data_hash=hashlib.sha256(data).hexdigest(),
                got=len(data),
                sha256=sha256,
                size=size,
            )
            outcome = self._put_once(key, data, identity, identity, content_type, size=size)
            if on_progress is not None:
                on_progress(size)
            return outcome
        return self._multipart(key, source, sha256, size, part_size, content_type, on_progress)

    def _multipart(
        self,
        key: str,
        source: Reader,
        sha256: str,
        size: int,
        part_size: int,
        content_type: str,
        on_progress: Callable[[int], None] | None,
    ) -> Outcome:
        with self._call("create multipart upload", key):
            upload_id = self.client.create_multipart_upload(
                Bucket=self.bucket,
                Key=key,
                ContentType=content_type,
                Metadata={SHA256_META: sha256},
            )["UploadId"]
        completed = False
        try:
            parts = self._upload_parts(key, upload_id, source, sha256, size, part_size, on_progress)
            identity = {SHA256_META: sha256}

            def complete(extra: dict[str, Any]) -> None:
                self.client.complete_multipart_upload(
                    Bucket=self.bucket,
                    Key=key,
                    UploadId=upload_id,
                    MultipartUpload={"Parts": parts},  # type: ignore[typeddict-item]
                    **extra,
                )

            outcome = self._create_once(key, identity, complete, size=size)
            completed = outcome == "created"
            return outcome
        finally:
            if not completed:
                with contextlib.suppress(
                    botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError
                ):
                    self.client.abort_multipart_upload(
                        Bucket=self.bucket, Key=key, UploadId=upload_id
                    )

    def _upload_parts(
        self,
        key: str,
        upload_id: str,
        source: Reader,
        sha256: str,
        size: int,
        part_size: int,
        on_progress: Callable[[int], None] | None,
    ) -> list[dict[str, Any]]:
        digest = hashlib.sha256()
        total = 0
        slots = threading.BoundedSemaphore(self.workers + 1)
        futures: list[Future[dict[str, Any]]] = []

        def send(number: int, chunk: bytes) -> dict[str, Any]:
            try:
                with self._call("upload part", key):
                    answer = self.client.upload_part(
                        Bucket=self.bucket,
                        Key=key,
                        UploadId=upload_id,
                        PartNumber=number,
                        Body=chunk,
                        ContentMD5=_md5(chunk),
                    )
                if on_progress is not None:
                    on_progress(len(chunk))
                return {"ETag": answer["ETag"], "PartNumber": number}
            finally:
                slots.release()

        hashing: Future[None] | None = None
        with (
            ThreadPoolExecutor(self.workers, thread_name_prefix="s3-part") as pool,
            ThreadPoolExecutor(1, thread_name_prefix="s3-sha256") as hasher,
        ):
            try:
                number = 0
                while True:
                    slots.acquire()
                    chunk = _read_exact(source, min(part_size, size + 1 - total))
                    if not chunk:
                        slots.release()
                        break
                    if hashing is not None:
                        hashing.result()
                    hashing = hasher.submit(digest.update, chunk)
                    total += len(chunk)
                    if total > size:
                        slots.release()
                        break
                    number += 1
                    futures.append(pool.submit(send, number, chunk))
                    del chunk
                    for done in [f for f in futures if f.done()]:
                        done.result()
                if hashing is not None:
                    hashing.result()
                _check_whole(key, data_hash=digest.hexdigest(), got=total, sha256=sha256, size=size)
                return [future.result() for future in futures]
            except BaseException:
                for future in futures:
                    future.cancel()
                raise

    def _existing(
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

    def _create_once(
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
            if _code(exc) in _CONFLICT_CODES or _status(exc) == 412:
                if self._existing(key, identity, size=size) is not None:
                    return "exists"
                raise TemporaryFailure(
                    f"{self.bucket}/{key} is being written by someone else; run again"
                ) from None
            if extra and self._unsupported(exc):
                if self._existing(key, identity, size=size) is not None:
                    return "exists"
                return self._create_once(key, identity, write, size=size)
            raise self._error(exc, "PUT", key) from None
        except botocore.exceptions.BotoCoreError as exc:
            raise self._error(exc, "PUT", key) from None
        self._note_conditional(bool(extra))
        return "created"

    def _unsupported(self, exc: botocore.exceptions.ClientError) -> bool:
        """True (and remembered) when the server refuses conditional headers as unsupported."""
        if _code(exc) in _UNSUPPORTED_CODES or _status(exc) == 501:
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


def _md5(data: bytes) -> str:
    return base64.b64encode(hashlib.md5(data, usedforsecurity=False).digest()).decode()


def _read_exact(source: Reader, size: int) -> bytes:
    """Up to `size` bytes, reading until the stream ends (readers may return short reads)."""
    pieces: list[bytes] = []
    remaining = size
    while remaining > 0:
        piece = source.read(min(remaining, CHUNK_SIZE))
        if not piece:
            break
        pieces.append(piece)
        remaining -= len(piece)
    return b"".join(pieces)


def _check_whole(key: str, *, data_hash: str, got: int, sha256: str, size: int) -> None:
    if got > size:
        raise IntegrityError(
            f"{key}: the source holds more than the expected {size} bytes; nothing was published"
        )
    if got < size:
        raise IntegrityError(
            f"{key}: the source holds {got} bytes, expected {size}; nothing was published"
        )
    if data_hash != sha256:
        raise IntegrityError(
            f"{key}: the source hashes to {data_hash[:16]}…, expected {sha256[:16]}…; "
            "nothing was published"
        )
