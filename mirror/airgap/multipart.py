"""Multipart upload of one blob: parts in parallel, the whole hashed as it streams.

Promises: memory stays at (workers + 1) parts; the bytes are hashed on their
way to the server and an upload whose bytes do not hash to the promised sha256
(or have another length) is aborted before it becomes visible (IntegrityError);
the object is completed with the same create-once rule as every immutable object.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Literal, Protocol

import botocore.exceptions

from mirror.errors import IntegrityError
from mirror.fsutil import CHUNK_SIZE

if TYPE_CHECKING:
    from mirror.airgap.objectstore import ObjectStore

SHA256_META = "sha256"

Outcome = Literal["created", "exists"]
Progress = Callable[[int], None]


class Reader(Protocol):
    """Anything with `read(n)`; a short read means the end of the stream."""

    def read(self, size: int = -1, /) -> bytes: ...


class MultipartUpload:
    """One multipart upload of `size` bytes to `key` that must hash to `sha256`."""

    def __init__(
        self, store: ObjectStore, key: str, *, sha256: str, size: int, part_size: int
    ) -> None:
        self.store = store
        self.client = store.client
        self.key = key
        self.sha256 = sha256
        self.size = size
        self.part_size = part_size
        self.slots = threading.BoundedSemaphore(store.workers + 1)
        self.upload_id = ""

    def run(self, source: Reader, content_type: str, on_progress: Progress | None) -> Outcome:
        with self.store.call("create multipart upload", self.key):
            self.upload_id = self.client.create_multipart_upload(
                Bucket=self.store.bucket,
                Key=self.key,
                ContentType=content_type,
                Metadata={SHA256_META: self.sha256},
            )["UploadId"]
        completed = False
        try:
            parts = self._send_all(source, on_progress)

            def complete(extra: dict[str, Any]) -> None:
                self.client.complete_multipart_upload(
                    Bucket=self.store.bucket,
                    Key=self.key,
                    UploadId=self.upload_id,
                    MultipartUpload={"Parts": parts},  # type: ignore[typeddict-item]
                    **extra,
                )

            identity = {SHA256_META: self.sha256}
            outcome = self.store.create_once(self.key, identity, complete, size=self.size)
            completed = outcome == "created"
            return outcome
        finally:
            if not completed:
                with contextlib.suppress(
                    botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError
                ):
                    self.client.abort_multipart_upload(
                        Bucket=self.store.bucket, Key=self.key, UploadId=self.upload_id
                    )

    def _send(self, number: int, chunk: bytes, on_progress: Progress | None) -> dict[str, Any]:
        try:
            with self.store.call("upload part", self.key):
                answer = self.client.upload_part(
                    Bucket=self.store.bucket,
                    Key=self.key,
                    UploadId=self.upload_id,
                    PartNumber=number,
                    Body=chunk,
                    ContentMD5=md5_base64(chunk),
                )
            if on_progress is not None:
                on_progress(len(chunk))
            return {"ETag": answer["ETag"], "PartNumber": number}
        finally:
            self.slots.release()

    def _send_all(self, source: Reader, on_progress: Progress | None) -> list[dict[str, Any]]:
        """Read parts, hash them on one thread and send them on `workers` threads."""
        futures: list[Future[dict[str, Any]]] = []
        with (
            ThreadPoolExecutor(self.store.workers, thread_name_prefix="s3-part") as pool,
            ThreadPoolExecutor(1, thread_name_prefix="s3-sha256") as hasher,
        ):
            try:
                digest, total = self._feed(source, pool, hasher, futures, on_progress)
                check_whole(
                    self.key, data_hash=digest, got=total, sha256=self.sha256, size=self.size
                )
                return [future.result() for future in futures]
            except BaseException:
                for future in futures:
                    future.cancel()
                raise

    def _feed(
        self,
        source: Reader,
        pool: ThreadPoolExecutor,
        hasher: ThreadPoolExecutor,
        futures: list[Future[dict[str, Any]]],
        on_progress: Progress | None,
    ) -> tuple[str, int]:
        digest = hashlib.sha256()
        total = 0
        number = 0
        hashing: Future[None] | None = None
        while True:
            self.slots.acquire()
            chunk = read_exact(source, min(self.part_size, self.size + 1 - total))
            if not chunk:
                self.slots.release()
                break
            if hashing is not None:
                hashing.result()
            hashing = hasher.submit(digest.update, chunk)
            total += len(chunk)
            if total > self.size:
                self.slots.release()
                break
            number += 1
            futures.append(pool.submit(self._send, number, chunk, on_progress))
            del chunk
            for done in [f for f in futures if f.done()]:
                done.result()
        if hashing is not None:
            hashing.result()
        return digest.hexdigest(), total


def md5_base64(data: bytes) -> str:
    return base64.b64encode(hashlib.md5(data, usedforsecurity=False).digest()).decode()


def read_exact(source: Reader, size: int) -> bytes:
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


def check_whole(key: str, *, data_hash: str, got: int, sha256: str, size: int) -> None:
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
