"""Staged uploads: objects written from byte streams, visible only once every one of them matched.

Promises:
- `StagedUpload.stage(source)` reads its source once: the bytes are hashed (sha256)
  and sent as multipart-upload parts as they are read; bytes that do not hash to
  the promised sha256, or have another length, raise IntegrityError. Nothing is
  visible until `complete()`, which writes the object with the same create-once
  rule as every immutable object.
- A key that already holds the same object (sha256 metadata and size) is neither
  read nor uploaded again: the upload is "exists" from the start.
- `Staging` runs a batch: its uploads share one bounded set of part senders, so at
  most `workers` parts (the one being read and the ones being sent or hashed)
  are in memory across the whole batch: memory = workers x part size. `complete()`
  completes the uploads only after every one of them has staged and matched;
  leaving the block any other way (a mismatch, an S3 error, Ctrl-C) aborts every
  upload the batch began, after its parts have stopped, so no object and no open
  multipart upload of a refused batch remains. Completion is the commit point:
  S3 has no transactions, so a failure while completing leaves the uploads
  completed so far in place (a re-run finds them "already there").
- A multipart upload a killed import left open (SIGKILL, power loss: no abort ran) is
  aborted by a later import staging the same key, once it is older than ORPHAN_GRACE;
  a younger one may be a concurrent import's and is left alone.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal, Protocol

import botocore.exceptions

from mirror.errors import IntegrityError
from mirror.fsutil import CHUNK_SIZE
from mirror.timestamps import utcnow

if TYPE_CHECKING:
    from mirror.airgap.objectstore import ObjectStore

log = logging.getLogger(__name__)

SHA256_META = "sha256"
MAX_PARTS = 10_000
ORPHAN_GRACE = timedelta(hours=1)

Outcome = Literal["created", "exists"]
Progress = Callable[[int], None]
State = Literal["new", "staged", "exists", "completed", "aborted"]


class Reader(Protocol):
    """Anything with `read(n)`; an empty read means the end of the stream."""

    def read(self, size: int = -1, /) -> bytes: ...


class PartSenders:
    """The batch's part senders: `workers` threads and as many parts in memory at most (the
    one being read counts: it waits for a free slot), and one ordered sha256 thread."""

    def __init__(self, workers: int) -> None:
        self.workers = max(1, workers)
        self.slots = threading.BoundedSemaphore(self.workers)
        self.pool = ThreadPoolExecutor(self.workers, thread_name_prefix="s3-part")
        self.hasher = ThreadPoolExecutor(1, thread_name_prefix="s3-sha256")
        self._lock = threading.Lock()
        self.in_flight = 0
        self.peak_in_flight = 0

    def take_slot(self) -> None:
        self.slots.acquire()
        with self._lock:
            self.in_flight += 1
            self.peak_in_flight = max(self.peak_in_flight, self.in_flight)

    def give_slot(self) -> None:
        with self._lock:
            self.in_flight -= 1
        self.slots.release()

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)
        self.hasher.shutdown(wait=True, cancel_futures=True)


class StagedUpload:
    """One object of `size` bytes at `key` that must hash to `sha256`, staged as a multipart
    upload and made visible by `complete()` (or dropped by `abort()`)."""

    def __init__(
        self,
        store: ObjectStore,
        senders: PartSenders,
        key: str,
        *,
        sha256: str,
        size: int,
        content_type: str = "application/octet-stream",
        now: Callable[[], datetime] = utcnow,
    ) -> None:
        self.store = store
        self.senders = senders
        self.now = now
        self.key = key
        self.sha256 = sha256
        self.size = size
        self.content_type = content_type
        self.part_size = max(store.part_size, -(-size // MAX_PARTS))
        self.upload_id = ""
        self.state: State = "new"
        self._parts: list[Future[dict[str, Any]]] = []
        self._checked = 0

    @property
    def identity(self) -> dict[str, str]:
        return {SHA256_META: self.sha256}

    def stage(self, source: Reader, on_progress: Progress | None = None) -> State:
        """Send `source`'s bytes as parts, hashing them; IntegrityError when they do not match.
        The parts may still be on their way when this returns; `complete` waits for them.
        `on_progress` gets each part's size once it is on the server (all `size` bytes at
        once when the object is already there and the source is not read)."""
        abort_orphans(self.store, self.key, self.now() - ORPHAN_GRACE)
        if self.store.existing(self.key, self.identity, size=self.size) is not None:
            self.state = "exists"
            if on_progress is not None:
                on_progress(self.size)
            return self.state
        if self.size > 0:
            with self.store.call("create multipart upload", self.key):
                self.upload_id = self.store.client.create_multipart_upload(
                    Bucket=self.store.bucket,
                    Key=self.key,
                    ContentType=self.content_type,
                    Metadata=self.identity,
                )["UploadId"]
        digest = hashlib.sha256()
        hashed: Future[None] | None = None
        total = 0
        while total <= self.size:
            self.senders.take_slot()
            try:
                part = read_part(source, min(self.part_size, self.size + 1 - total))
            except BaseException:
                self.senders.give_slot()
                raise
            if not part:
                self.senders.give_slot()
                break
            total += len(part)
            if total > self.size:
                self.senders.give_slot()
                break
            hashed = self.senders.hasher.submit(digest.update, part)
            number = len(self._parts) + 1
            self._parts.append(
                self.senders.pool.submit(self._send, number, part, hashed, on_progress)
            )
            del part
            self._raise_failed_parts()
        if hashed is not None:
            hashed.result()
        check_whole(
            self.key, data_hash=digest.hexdigest(), got=total, sha256=self.sha256, size=self.size
        )
        self.state = "staged"
        return self.state

    def _send(
        self, number: int, part: bytearray, hashed: Future[None], on_progress: Progress | None
    ) -> dict[str, Any]:
        try:
            with self.store.call("upload part", self.key):
                answer = self.store.client.upload_part(
                    Bucket=self.store.bucket,
                    Key=self.key,
                    UploadId=self.upload_id,
                    PartNumber=number,
                    Body=part,  # type: ignore[arg-type]
                )
            hashed.result()
            if on_progress is not None:
                on_progress(len(part))
            return {"ETag": answer["ETag"], "PartNumber": number}
        finally:
            self.senders.give_slot()

    def _raise_failed_parts(self) -> None:
        """Raise the failure of a part that has finished (parts finish about in order)."""
        while self._checked < len(self._parts) and self._parts[self._checked].done():
            self._parts[self._checked].result()
            self._checked += 1

    def wait_for_parts(self) -> None:
        """Wait until every part is on the server; the first failure is raised."""
        for future in self._parts:
            future.result()

    def complete(self) -> Outcome:
        """Make the staged object visible (create-once); "exists" when it already was."""
        if self.state == "exists":
            return "exists"
        if self.state != "staged":
            raise RuntimeError(f"{self.key}: complete() before stage() finished")
        if self.size == 0:
            outcome = self.store.put_once(self.key, b"", self.identity, self.content_type, size=0)
            self.state = "completed"
            return outcome
        parts = [future.result() for future in self._parts]

        def complete(extra: dict[str, Any]) -> None:
            self.store.client.complete_multipart_upload(
                Bucket=self.store.bucket,
                Key=self.key,
                UploadId=self.upload_id,
                MultipartUpload={"Parts": parts},  # type: ignore[typeddict-item]
                **extra,
            )

        outcome = self.store.create_once(self.key, self.identity, complete, size=self.size)
        if outcome == "created":
            self.state = "completed"
        else:
            self.abort()
        return outcome

    def abort(self) -> None:
        """Drop the upload and its parts (after the parts on their way have stopped)."""
        for future in self._parts:
            future.cancel()
        for future in self._parts:
            with contextlib.suppress(BaseException):
                future.exception()
        if self.upload_id and self.state not in ("completed", "aborted"):
            with contextlib.suppress(
                botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError
            ):
                self.store.client.abort_multipart_upload(
                    Bucket=self.store.bucket, Key=self.key, UploadId=self.upload_id
                )
        if self.state in ("new", "staged"):
            self.state = "aborted"


class Staging:
    """A batch of staged uploads, completed together or aborted together (context manager).

    `stage(key, source, sha256=..., size=...)` stages one object from any byte stream
    (a blob joined from a set's parts, a rebuilt archive); `complete()` makes them
    all visible, in the order staged, once every one has matched.
    """

    def __init__(
        self,
        store: ObjectStore,
        *,
        workers: int | None = None,
        now: Callable[[], datetime] = utcnow,
    ) -> None:
        self.store = store
        self.now = now
        self.senders = PartSenders(workers or store.workers)
        self.uploads: list[StagedUpload] = []
        self._completed = False

    def __enter__(self) -> Staging:
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            if not self._completed:
                self.abort()
        finally:
            self.senders.close()

    def stage(
        self,
        key: str,
        source: Reader,
        *,
        sha256: str,
        size: int,
        content_type: str = "application/octet-stream",
        on_progress: Progress | None = None,
    ) -> StagedUpload:
        upload = StagedUpload(
            self.store,
            self.senders,
            key,
            sha256=sha256,
            size=size,
            content_type=content_type,
            now=self.now,
        )
        self.uploads.append(upload)
        upload.stage(source, on_progress)
        return upload

    def complete(self) -> dict[str, Outcome]:
        """Complete every staged upload (all have matched); outcome by key."""
        for upload in self.uploads:
            upload.wait_for_parts()
        outcomes = {upload.key: upload.complete() for upload in self.uploads}
        self._completed = True
        return outcomes

    def abort(self) -> None:
        """Abort every upload of the batch that is not completed."""
        for upload in self.uploads:
            upload.abort()

    @property
    def peak_parts_in_flight(self) -> int:
        return self.senders.peak_in_flight


def abort_orphans(store: ObjectStore, key: str, started_before: datetime) -> None:
    """Abort the open multipart uploads of exactly `key` begun before `started_before` (left
    by a killed import). Best effort: a server that refuses the listing keeps them."""
    errors = (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError)
    try:
        paginator = store.client.get_paginator("list_multipart_uploads")
        uploads = [
            upload
            for page in paginator.paginate(Bucket=store.bucket, Prefix=key)
            for upload in page.get("Uploads", [])
            if upload.get("Key") == key and upload["Initiated"] < started_before
        ]
    except errors as exc:
        log.debug("cannot list the open uploads of %s: %s", key, exc)
        return
    for upload in uploads:
        with contextlib.suppress(*errors):
            store.client.abort_multipart_upload(
                Bucket=store.bucket, Key=key, UploadId=upload["UploadId"]
            )
            log.info("aborted an upload of %s left open since %s", key, upload["Initiated"])


def read_part(source: Reader, size: int) -> bytearray:
    """Up to `size` bytes in one buffer, reading until the stream ends (short reads are fine);
    filled in place, so a part costs its own size in memory and no more."""
    part = bytearray(size)
    view = memoryview(part)
    got = 0
    while got < size:
        piece = source.read(min(size - got, CHUNK_SIZE))
        if not piece:
            break
        view[got : got + len(piece)] = piece
        got += len(piece)
    view.release()
    if got < size:
        del part[got:]
    return part


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
