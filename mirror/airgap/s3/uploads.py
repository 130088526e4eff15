"""The multipart upload calls of the object store (`ObjectStore` extends them with the
conditional writes): start an upload, send a part and check the server's answer to it,
read back what a completion stored, abort, and list the uploads left open. S3's "no such
upload" is `UploadGone` (mirror.airgap.s3.multipart stages the upload again); every other
error is the one-line MirrorError that names the bucket and key.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping

import botocore.exceptions

from mirror.airgap.s3.bucket import S3_ERRORS, S3Bucket
from mirror.airgap.s3.checksums import (
    DAMAGED_HINT,
    PartChecksum,
    algorithm_args,
    check_part_answer,
    part_checksum,
    stored_object_problem,
)
from mirror.airgap.s3.errors import error_code
from mirror.airgap.s3.multipart import OpenUpload, Part, UploadGone
from mirror.errors import IntegrityError

__all__ = ["MultipartCalls"]


class MultipartCalls(S3Bucket):
    """The S3 calls of a multipart upload under one bucket and prefix."""

    part_checksum: PartChecksum
    """The checksum each part carries for the server to verify (mirror.airgap.s3.checksums)."""

    def start_upload(self, key: str, *, identity: Mapping[str, str], content_type: str) -> str:
        with self.call("create multipart upload", key):
            return self.client.create_multipart_upload(
                Bucket=self.bucket,
                Key=key,
                ContentType=content_type,
                Metadata=dict(identity),
                **algorithm_args(self.part_checksum),
            )["UploadId"]

    def upload_part(self, key: str, upload_id: str, number: int, data: bytearray) -> Part:
        checksum = part_checksum(self.part_checksum, data)
        with self._uploading("upload part", key):
            answer = self.client.upload_part(
                Bucket=self.bucket,
                Key=key,
                UploadId=upload_id,
                PartNumber=number,
                Body=data,  # type: ignore[arg-type]
                **checksum,  # type: ignore[arg-type]
            )
        check_part_answer(key, number, checksum, dict(answer))
        return {"ETag": answer["ETag"], "PartNumber": number, **checksum}

    def _check_stored(self, key: str, size: int, sent: list[Part]) -> None:
        """Read back what the server says it stored; remove and refuse an object that differs."""
        with self.call("HEAD", key):
            answer = dict(
                self.client.head_object(Bucket=self.bucket, Key=key, ChecksumMode="ENABLED")
            )
        problem = stored_object_problem(answer, size=size, sent=sent)
        if problem is None:
            return
        self.delete(key)
        raise IntegrityError(
            f"{self.bucket}/{key}: the server stored {problem}; "
            "the object was removed and nothing was published",
            hint=DAMAGED_HINT,
        )

    @contextlib.contextmanager
    def _uploading(self, action: str, key: str, *, only_gone: bool = False) -> Iterator[None]:
        """NoSuchUpload as UploadGone; with `only_gone`, other S3 errors pass unchanged (to
        create_once), else they are the one-line MirrorError."""
        try:
            yield
        except botocore.exceptions.ClientError as exc:
            if error_code(exc) == "NoSuchUpload":
                raise UploadGone(self.error(exc, action, key).message) from None
            if only_gone:
                raise
            raise self.error(exc, action, key) from None
        except botocore.exceptions.BotoCoreError as exc:
            if only_gone:
                raise
            raise self.error(exc, action, key) from None

    def abort_upload(self, key: str, upload_id: str) -> bool:
        try:
            self.client.abort_multipart_upload(Bucket=self.bucket, Key=key, UploadId=upload_id)
        except S3_ERRORS:
            return False
        return True

    def open_uploads(self) -> list[OpenUpload]:
        prefix = f"{self.prefix}/" if self.prefix else ""
        paginator = self.client.get_paginator("list_multipart_uploads")
        with self.call("LIST", prefix or None):
            return [
                OpenUpload(upload["Key"], upload["UploadId"], upload["Initiated"])
                for page in paginator.paginate(Bucket=self.bucket, Prefix=prefix)
                for upload in page.get("Uploads", [])
            ]
