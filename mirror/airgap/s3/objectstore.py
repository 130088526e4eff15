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
- Uploads stream in parts with bounded memory (mirror.airgap.s3.multipart: staged
  uploads, completed only once their bytes matched); a blob whose bytes do not hash
  to the promised sha256 is aborted before it becomes visible.
- Messages name the bucket and key, never a credential.

Reads, links, listing and removal are mirror.airgap.s3.bucket's (`S3Bucket`), the calls of
a multipart upload mirror.airgap.s3.uploads' (`MultipartCalls`, which this extends with every
conditional write); the checksums the server verifies are mirror.airgap.s3.checksums'.
`ObjectStore` is the S3 `MultipartTarget` of mirror.airgap.s3.multipart's staging.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import botocore.exceptions

from mirror.airgap.s3.checksums import (
    PartChecksum,
    check_part_answer,
    md5_base64,
)
from mirror.airgap.s3.client import make_s3_client
from mirror.airgap.s3.conditional import WriteConflict
from mirror.airgap.s3.errors import (
    CONFLICT_CODES,
    MISSING_KEY_CODES,
    UNSUPPORTED_CODES,
    error_code,
    http_status,
)
from mirror.airgap.s3.multipart import (
    SHA256_META,
    Outcome,
    Part,
    same_object,
)
from mirror.airgap.s3.uploads import MultipartCalls
from mirror.config import TargetSettings
from mirror.errors import ConfigError, IntegrityError, TemporaryFailure
from mirror.integrity import hash_bytes

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client
else:
    S3Client = Any

__all__ = ["ObjectStore", "make_s3_client", "without_conditional_writes"]

log = logging.getLogger(__name__)

# Upload memory is UPLOAD_WORKERS parts (being read, hashed or sent): 16 MiB. 8 MiB parts
# (aws-cli's size) cost an import about 3 MiB of peak RSS more than S3's smallest, 5 MiB, and
# make it about a quarter faster against SeaweedFS (fewer requests for the server to
# assemble; bench/RESULTS.md). A blob of more than 10,000 parts (78 GiB) gets larger parts.
# Two parts in flight keep both cores busy: one is read and hashed while the other is sent.
PART_SIZE = 8 * 1024 * 1024
UPLOAD_WORKERS = 2

Write = Callable[[dict[str, Any]], None]


class ObjectStore(MultipartCalls):
    """One bucket under one prefix, read and written; every key goes through `key()`."""

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
        super().__init__(client, bucket, prefix, presign_client=presign_client)
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

    # ---- pointers: replaced whole, conditionally -------------------------------------------

    def write_json(self, key: str, document: dict[str, Any], *, if_match: str | None) -> str:
        """Replace `key` with `document` only if it still has ETag `if_match`; returns the new ETag.

        `if_match=None` means the key must not exist yet. Losing the race raises
        WriteConflict "... changed by someone else; run again".
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
            raise self.error(exc, "PUT", key) from None
        except botocore.exceptions.BotoCoreError as exc:
            raise self.error(exc, "PUT", key) from None
        self._note_conditional(bool(extra))
        return str(answer.get("ETag", ""))

    # ---- immutable objects: written once ---------------------------------------------------

    def put_immutable(
        self,
        key: str,
        data: bytes,
        *,
        identity: Mapping[str, str],
        content_type: str = "application/json",
    ) -> Outcome:
        """Write a small object once; `identity` (metadata) decides "already there" vs conflict."""
        metadata = {SHA256_META: hash_bytes(data), **identity}
        if self.existing(key, identity) is not None:
            return "exists"

        def put(extra: dict[str, Any]) -> None:
            checksum = md5_base64(data)
            answer = self.client.put_object(
                Bucket=self.bucket,
                Key=key,
                Body=data,
                ContentType=content_type,
                ContentMD5=checksum,
                Metadata=metadata,
                **extra,
            )
            try:
                check_part_answer(key, 1, {"ContentMD5": checksum}, dict(answer))
            except IntegrityError:
                self.delete(key)
                raise

        return self.create_once(key, identity, put)

    def existing(
        self, key: str, identity: Mapping[str, str], *, size: int | None = None
    ) -> dict[str, Any] | None:
        """The object at `key` when it is the same one; IntegrityError when it is another."""
        return same_object(self.head(key), identity, size, where=f"{self.bucket}/{key}")

    def create_once(
        self, key: str, identity: Mapping[str, str], write: Write, *, size: int | None = None
    ) -> Outcome:
        """Run `write` (a PutObject or a completion) with If-None-Match: * (or, emulating,
        after a HEAD); the same object already there is "exists", another one IntegrityError."""
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
            raise self.error(exc, "PUT", key) from None
        except botocore.exceptions.BotoCoreError as exc:
            raise self.error(exc, "PUT", key) from None
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

    # ---- completing the MultipartTarget of mirror.airgap.s3.multipart ----------------------

    def complete_upload(
        self, key: str, upload_id: str, parts: list[Part], *, identity: Mapping[str, str], size: int
    ) -> Outcome:
        listed = [{k: v for k, v in part.items() if k != "ContentMD5"} for part in parts]

        def complete(extra: dict[str, Any]) -> None:
            with self._uploading("PUT", key, only_gone=True):
                self.client.complete_multipart_upload(
                    Bucket=self.bucket,
                    Key=key,
                    UploadId=upload_id,
                    MultipartUpload={"Parts": listed},  # type: ignore[typeddict-item]
                    **extra,
                )

        outcome = self.create_once(key, identity, complete, size=size)
        if outcome == "created":
            self._check_stored(key, size, parts)
        return outcome


def without_conditional_writes(where: str, how: str) -> ConfigError:
    """The refusal of a server that does not honour If-None-Match / If-Match."""
    return ConfigError(
        f"the object store ({where}) {how} conditional writes (If-None-Match, If-Match), "
        "so two writers could overwrite each other",
        hint='set target.conditional_writes = "emulate" to check with HEAD before each '
        "write instead (safe against re-runs, not against two imports at the same moment)",
    )
