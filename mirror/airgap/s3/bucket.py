"""One bucket under one prefix on an S3 API: key names, reads, links, listing, removal.

The part of the object store that never creates anything (mirror.airgap.s3.objectstore adds
the writes). `chart` reads, presigns and deletes through it.

Promises:
- Every key the tool uses goes through `key()`, which refuses empty, `.` and `..`
  segments, so no document can name an object outside the prefix.
- A missing object is None (`head`, `read_json`) or NotFound (`open_stream`), never an
  exception of the S3 library; every other refusal is one MirrorError line naming the
  bucket and key (mirror.airgap.s3.errors), never a credential.
- Every body is read bounded as a whole, not only per socket read: a GET by the client's
  deadline (mirror.airgap.s3.client), then each next piece within `target.deadline`, else
  a TemporaryFailure naming the bucket and key (mirror.airgap.s3.paced), so a store that
  trickles a byte under every read timeout holds no reader for ever.
- A JSON document is refused (IntegrityError) when it is larger than MAX_JSON_BYTES, not
  a JSON object, or not the bytes the server reports storing (its MD5 ETag), so a bit
  flipped on the way back is never parsed, changed and written back whole.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import botocore.exceptions

from mirror.airgap.s3.checksums import read_back_intact
from mirror.airgap.s3.client import body_bounds
from mirror.airgap.s3.errors import (
    MISSING_BUCKET_CODES,
    MISSING_KEY_CODES,
    error_code,
    http_status,
    s3_failure,
)
from mirror.airgap.s3.multipart import SHA256_META
from mirror.airgap.s3.paced import BODY_CUT, Paced, body_cut, close_stream
from mirror.errors import ConfigError, IntegrityError, MirrorError, NotFound
from mirror.integrity import CHUNK_SIZE
from mirror.logs import redacted_url
from mirror.timestamps import utcnow

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client
else:
    S3Client = Any

MAX_JSON_BYTES = 16 * 1024 * 1024
S3_ERRORS = (botocore.exceptions.ClientError, botocore.exceptions.BotoCoreError)


class S3Bucket:
    """One bucket under one prefix, read through a boto3 client (module docstring)."""

    def __init__(
        self,
        client: S3Client,
        bucket: str,
        prefix: str = "static-export",
        *,
        presign_client: S3Client | None = None,
    ) -> None:
        if not bucket:
            raise ConfigError("target.bucket is not set", hint="name the object store's bucket")
        self.client = client
        self.presign_client = presign_client or client
        self.bucket = bucket
        self.prefix = prefix.strip("/")

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

    def error(self, exc: Exception, action: str, key: str | None = None) -> MirrorError:
        """The one-line MirrorError for a failed S3 call (no credential, no server prose)."""
        thing = f"{self.bucket}/{key}" if key else f"bucket {self.bucket}"
        return s3_failure(exc, action, thing=thing, where=self.where)

    @contextlib.contextmanager
    def call(self, action: str, key: str | None = None) -> Iterator[None]:
        try:
            yield
        except S3_ERRORS as exc:
            raise self.error(exc, action, key) from None

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
            raise self.error(exc, "access check") from None
        except botocore.exceptions.BotoCoreError as exc:
            raise self.error(exc, "access check") from None

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
                    raise self.error(exc, "HEAD", key) from None
                return None
            raise self.error(exc, "HEAD", key) from None
        except botocore.exceptions.BotoCoreError as exc:
            raise self.error(exc, "HEAD", key) from None
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
            raise self.error(exc, "GET", key) from None
        except botocore.exceptions.BotoCoreError as exc:
            raise self.error(exc, "GET", key) from None

    def read_json(self, key: str) -> tuple[dict[str, Any] | None, str | None]:
        """(document, etag), or (None, None) when the object does not exist."""
        answer = self._get(key)
        if answer is None:
            return None, None
        data = bytearray()
        pieces = self._paced(self._chunks(answer, key), key, [answer["Body"]])
        try:
            for chunk in pieces:
                data += chunk
                if len(data) > MAX_JSON_BYTES:
                    break
        finally:
            close_stream(pieces)
        if len(data) > MAX_JSON_BYTES:
            raise IntegrityError(f"{self.bucket}/{key} is larger than {MAX_JSON_BYTES} bytes")
        if not read_back_intact(bytes(data), answer):
            raise IntegrityError(
                f"{self.bucket}/{key} was damaged on the way from the server (its bytes do not "
                "match the MD5 ETag the server reports); nothing was written",
                hint="run again; if it recurs, check the network path to the object store",
            )
        try:
            document = json.loads(data)
        except (ValueError, RecursionError):
            raise IntegrityError(f"{self.bucket}/{key} is not valid JSON") from None
        if not isinstance(document, dict):
            raise IntegrityError(f"{self.bucket}/{key} is not a JSON object")
        return document, str(answer.get("ETag", "")) or None

    def open_stream(self, key: str) -> Iterator[bytes]:
        """The object's bytes in CHUNK_SIZE pieces, asked for at the first; NotFound when it
        does not exist. Bounded as a whole (module docstring): the GET by its deadline, then
        each next piece by `target.deadline`."""
        bodies: list[Any] = []
        return self._paced(self._streamed(key, bodies), key, bodies, opening=True)

    def _streamed(self, key: str, bodies: list[Any]) -> Iterator[bytes]:
        answer = self._get(key)
        if answer is None:
            raise NotFound(f"{self.bucket}/{key} does not exist")
        bodies.append(answer["Body"])
        yield from self._chunks(answer, key)

    def _chunks(self, answer: dict[str, Any], key: str) -> Iterator[bytes]:
        """The body of a GET `answer` in CHUNK_SIZE pieces; closed when done or given up."""
        body = answer["Body"]
        try:
            with self.call("GET", key):
                try:
                    yield from body.iter_chunks(CHUNK_SIZE)
                except BODY_CUT as exc:
                    raise body_cut(exc, f"{self.bucket}/{key}") from None
        finally:
            body.close()

    def _paced(
        self, pieces: Iterator[bytes], key: str, bodies: list[Any], *, opening: bool = False
    ) -> Iterator[bytes]:
        """`pieces` given up when the next has not come within the client's deadline
        (mirror.airgap.s3.paced), `bodies` then shut down; the first piece, when `opening`,
        after the GET's own bound, so its DeadlineExceeded (naming the GET) comes first."""
        bounds = body_bounds(self.client)
        if bounds is None:  # a client this tool did not bound (none it makes)
            return pieces
        deadline, read_timeout = bounds
        first = read_timeout + 1.0 if opening else 0.0

        def abort() -> None:
            for body in list(bodies):
                _shut_down(body)

        return Paced(pieces, deadline, f"{self.bucket}/{key}", first=first, abort=abort)

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

    def delete(self, key: str) -> None:
        """Remove `key`. Removing a key that is not there is not an error (as in S3), so a
        deletion interrupted and run again simply finishes."""
        with self.call("DELETE", key):
            self.client.delete_object(Bucket=self.bucket, Key=key)


def _shut_down(body: Any) -> None:
    """Wake a thread blocked reading `body` (a botocore StreamingBody over urllib3): its
    socket shut down for reading, from any thread (urllib3's `HTTPResponse.shutdown`)."""
    raw = getattr(body, "_raw_stream", None)
    shutdown = getattr(raw, "shutdown", None)
    if shutdown is not None:
        with contextlib.suppress(ValueError, RuntimeError, OSError):
            shutdown()
