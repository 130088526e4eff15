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
- Every part carries a checksum the server verifies (`target.part_checksum`: CRC32 or
  MD5), so a part damaged on the wire is refused by the server (IntegrityError), and
  what the server reports back is checked too: each part's echoed checksum, and after
  completion the object's size and its composite checksum (or multipart ETag). An
  object the server reports otherwise than it was sent is removed and refused: nothing
  is called published that was not stored as sent.
- Multipart uploads a killed import left open (SIGKILL, power loss: no abort ran) are
  swept at every batch, before staging and after completing: under the prefix, an open
  upload whose key is already published can never be completed and is aborted, and so
  is any upload older than ORPHAN_GRACE. A younger one of an unpublished key may be a
  concurrent import's and is left alone (a lifecycle rule on the bucket ends those too).
  An upload that meets NoSuchUpload (a part or its completion) because another import of
  the same object published it and swept this one is "exists", not a failure.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import logging
import threading
import zlib
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal, Protocol

import botocore.exceptions

from mirror.airgap.s3errors import error_code
from mirror.errors import IntegrityError
from mirror.integrity import CHUNK_SIZE
from mirror.timestamps import utcnow

if TYPE_CHECKING:
    from mirror.airgap.objectstore import ObjectStore

log = logging.getLogger(__name__)

SHA256_META = "sha256"
MAX_PARTS = 10_000
ORPHAN_GRACE = timedelta(hours=1)

Outcome = Literal["created", "exists"]
PartChecksum = Literal["crc32", "md5"]
Progress = Callable[[int], None]
State = Literal["new", "staged", "exists", "completed", "aborted"]


class _PublishedMeanwhile(Exception):
    """Another import completed the key and swept this upload: the object is there."""


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
                    **algorithm_args(self.store.part_checksum),
                )["UploadId"]
        try:
            return self._send_all(source, on_progress)
        except _PublishedMeanwhile:
            return self._published_meanwhile()

    def _send_all(self, source: Reader, on_progress: Progress | None) -> State:
        """Read, hash and hand out the parts; check the whole once the source is read."""
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
            checksum = part_checksum(self.store.part_checksum, part)
            with self.store.call("upload part", self.key), self._unless_swept():
                answer = self.store.client.upload_part(
                    Bucket=self.store.bucket,
                    Key=self.key,
                    UploadId=self.upload_id,
                    PartNumber=number,
                    Body=part,  # type: ignore[arg-type]
                    **checksum,  # type: ignore[arg-type]
                )
            check_part_answer(self.key, number, checksum, dict(answer))
            hashed.result()
            if on_progress is not None:
                on_progress(len(part))
            return {"ETag": answer["ETag"], "PartNumber": number, **checksum}
        finally:
            self.senders.give_slot()

    def _raise_failed_parts(self) -> None:
        """Raise the failure of a part that has finished (parts finish about in order)."""
        while self._checked < len(self._parts) and self._parts[self._checked].done():
            self._parts[self._checked].result()
            self._checked += 1

    def wait_for_parts(self) -> None:
        """Wait until every part is on the server; the first failure is raised."""
        try:
            for future in self._parts:
                future.result()
        except _PublishedMeanwhile:
            self._published_meanwhile()

    @contextlib.contextmanager
    def _unless_swept(self) -> Iterator[None]:
        """NoSuchUpload for a key another import has published meanwhile (its sweep aborted
        this upload) means the object is there: _PublishedMeanwhile, not a failure."""
        try:
            yield
        except botocore.exceptions.ClientError as exc:
            swept = error_code(exc) == "NoSuchUpload"
            if swept and self.store.existing(self.key, self.identity, size=self.size):
                raise _PublishedMeanwhile from None
            raise

    def _published_meanwhile(self) -> State:
        """Stop the parts still on their way; the object is there ("exists")."""
        self.abort()
        self.state = "exists"
        return self.state

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
        sent = [future.result() for future in self._parts]
        parts = [{k: v for k, v in part.items() if k != "ContentMD5"} for part in sent]

        def complete(extra: dict[str, Any]) -> None:
            with self._unless_swept():
                self.store.client.complete_multipart_upload(
                    Bucket=self.store.bucket,
                    Key=self.key,
                    UploadId=self.upload_id,
                    MultipartUpload={"Parts": parts},  # type: ignore[typeddict-item]
                    **extra,
                )

        try:
            outcome = self.store.create_once(self.key, self.identity, complete, size=self.size)
        except _PublishedMeanwhile:
            outcome = "exists"
        if outcome == "created":
            self.state = "completed"
            self._check_stored(sent)
        else:
            self.abort()
        return outcome

    def _check_stored(self, sent: list[dict[str, Any]]) -> None:
        """Read back what the server says it stored; remove and refuse an object that differs."""
        with self.store.call("HEAD", self.key):
            answer = dict(
                self.store.client.head_object(
                    Bucket=self.store.bucket, Key=self.key, ChecksumMode="ENABLED"
                )
            )
        problem = stored_object_problem(answer, size=self.size, sent=sent)
        if problem is None:
            return
        self.store.delete(self.key)
        raise IntegrityError(
            f"{self.store.bucket}/{self.key}: the server stored {problem}; "
            "the object was removed and nothing was published",
            hint="run again; if it recurs, the S3 server is damaging what it stores",
        )

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
        sweep_orphans(self.store, self.now() - ORPHAN_GRACE)
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
        sweep_orphans(self.store, self.now() - ORPHAN_GRACE)
        return outcomes

    def abort(self) -> None:
        """Abort every upload of the batch that is not completed."""
        for upload in self.uploads:
            upload.abort()

    @property
    def peak_parts_in_flight(self) -> int:
        return self.senders.peak_in_flight


def sweep_orphans(store: ObjectStore, started_before: datetime) -> int:
    """Abort the open multipart uploads under the store's prefix that no import can still
    complete: those of a key already published, and those begun before `started_before`.
    Returns how many were aborted. Best effort: a server that refuses the listing keeps them."""
    errors = (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError)
    prefix = f"{store.prefix}/" if store.prefix else ""
    try:
        paginator = store.client.get_paginator("list_multipart_uploads")
        uploads = [
            upload
            for page in paginator.paginate(Bucket=store.bucket, Prefix=prefix)
            for upload in page.get("Uploads", [])
        ]
    except errors as exc:
        log.debug("cannot list the open uploads under %s: %s", prefix or "the bucket", exc)
        return 0
    aborted = 0
    for upload in uploads:
        key = upload["Key"]
        if upload["Initiated"] >= started_before and store.head(key) is None:
            continue
        with contextlib.suppress(*errors):
            store.client.abort_multipart_upload(
                Bucket=store.bucket, Key=key, UploadId=upload["UploadId"]
            )
            aborted += 1
            log.info("aborted an upload of %s left open since %s", key, upload["Initiated"])
    return aborted


def algorithm_args(kind: PartChecksum) -> dict[str, Any]:
    """CreateMultipartUpload's argument that makes every part carry a CRC32."""
    return {"ChecksumAlgorithm": "CRC32"} if kind == "crc32" else {}


def part_checksum(kind: PartChecksum, part: bytes | bytearray) -> dict[str, str]:
    """The UploadPart/PutObject argument the server verifies the bytes by."""
    if kind == "crc32":
        return {"ChecksumCRC32": crc32_base64(part)}
    digest = hashlib.md5(part, usedforsecurity=False).digest()
    return {"ContentMD5": base64.b64encode(digest).decode()}


def crc32_base64(data: bytes | bytearray) -> str:
    return base64.b64encode(zlib.crc32(data).to_bytes(4, "big")).decode()


def check_part_answer(key: str, number: int, sent: dict[str, str], answer: dict[str, Any]) -> None:
    """Refuse a part the server reports back with another checksum than the one sent."""
    if "ChecksumCRC32" in sent:
        echoed = answer.get("ChecksumCRC32")
        if echoed is None or echoed == sent["ChecksumCRC32"]:
            return
        what = f"CRC32 {echoed}, sent {sent['ChecksumCRC32']}"
    else:
        etag = str(answer.get("ETag", "")).strip('"')
        md5_hex = base64.b64decode(sent["ContentMD5"]).hex()
        if not is_plain_md5(etag) or answer.get("ServerSideEncryption") or etag == md5_hex:
            return
        what = f"ETag {etag}, sent MD5 {md5_hex}"
    raise IntegrityError(
        f"{key}: the server reports part {number} stored with {what}; nothing was published",
        hint="run again; if it recurs, the S3 server is damaging what it stores",
    )


def stored_object_problem(
    answer: dict[str, Any], *, size: int, sent: list[dict[str, Any]]
) -> str | None:
    """What differs between a completed object (its HEAD) and the parts sent, or None."""
    stored = int(answer.get("ContentLength", -1))
    if stored != size:
        return f"{stored} bytes, not the {size} sent"
    etag = str(answer.get("ETag", "")).strip('"')
    if "-" in etag and etag.rsplit("-", 1)[1] != str(len(sent)):
        return f"an object of {etag.rsplit('-', 1)[1]} parts, not the {len(sent)} sent"
    reported = str(answer.get("ChecksumCRC32") or "")
    if (
        sent
        and "ChecksumCRC32" in sent[0]
        and reported
        and answer.get("ChecksumType") != "FULL_OBJECT"
    ):
        joined = b"".join(base64.b64decode(part["ChecksumCRC32"]) for part in sent)
        if reported.split("-")[0] != crc32_base64(joined):
            return f"an object whose CRC32 of parts is {reported}, not the one sent"
    if sent and "ContentMD5" in sent[0] and "-" in etag and not answer.get("ServerSideEncryption"):
        joined = b"".join(base64.b64decode(part["ContentMD5"]) for part in sent)
        expected = hashlib.md5(joined, usedforsecurity=False).hexdigest()
        if etag.split("-")[0] != expected:
            return f"an object whose ETag is {etag}, not the {expected}-{len(sent)} sent"
    return None


def is_plain_md5(etag: str) -> bool:
    return len(etag) == 32 and all(c in "0123456789abcdef" for c in etag.lower())


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
