"""Staged uploads: objects written from byte streams, visible only once every one of them matched.

Promises:
- `StagedUpload.stage(source)` reads its source once: the bytes are hashed (sha256)
  and sent as multipart-upload parts as they are read. A known upload (`sha256=` and
  `size=` given) refuses bytes that do not hash to the promised sha256, or have another
  length (IntegrityError). A learnt one (neither given: an archive made as it is
  streamed) reads its source to the end and learns both; its `identity` metadata names
  the object instead, and a source of more than MAX_PARTS parts (the part size is set
  from `size_hint`) is refused (OperationFailed) and aborted. Either way `digest` is the
  sha256 and size that were read and sent, once staged. Nothing is visible until
  `complete()`, which writes the object with the same create-once rule as every
  immutable object.
- A key that already holds the same object (its identity metadata and, when known, its
  size) is neither read nor uploaded again: the upload is "exists" from the start.
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
- Staging meets the object store only through `MultipartTarget` (what the S3 object store,
  mirror.airgap.s3.objectstore, and the tests' in-memory bucket implement): no S3 library,
  no request of its own.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal, Protocol

from mirror.errors import IntegrityError, MirrorError, OperationFailed
from mirror.integrity import CHUNK_SIZE, Digest, HashingWriter, require_digest
from mirror.timestamps import utcnow

log = logging.getLogger(__name__)

SHA256_META = "sha256"
MAX_PARTS = 10_000
ORPHAN_GRACE = timedelta(hours=1)
OCTET_STREAM = "application/octet-stream"

Outcome = Literal["created", "exists"]
Part = dict[str, Any]
Progress = Callable[[int], None]
State = Literal["new", "staged", "exists", "completed", "aborted"]


class UploadGone(OperationFailed):
    """The server no longer knows the upload (NoSuchUpload): aborted by another import's
    sweep, usually because that import published the same object."""


@dataclass(frozen=True)
class OpenUpload:
    """A multipart upload the server still holds open."""

    key: str
    upload_id: str
    initiated: datetime


class MultipartTarget(Protocol):
    """What staging needs of an object store: uploads in parts, completed create-once.

    `existing` is the object at `key` when it is the same one (`identity` metadata and
    `size`), None when there is none, IntegrityError when it is another. `upload_part`
    sends one part with a checksum the server verifies and checks what it reports back;
    its record goes to `complete_upload`, which makes the object visible once (If-None-Match),
    checks what the server stored (removing and refusing an object that differs) and says
    "exists" when the same object was there. `abort_upload` is best effort (False when the
    server refused). `open_uploads` lists the uploads open under the prefix.
    NoSuchUpload from `upload_part` or `complete_upload` is UploadGone.
    """

    part_size: int
    workers: int

    def existing(
        self, key: str, identity: Mapping[str, str], *, size: int | None = None
    ) -> dict[str, Any] | None: ...

    def put_immutable(
        self, key: str, data: bytes, *, identity: Mapping[str, str], content_type: str = ...
    ) -> Outcome: ...

    def start_upload(self, key: str, *, identity: Mapping[str, str], content_type: str) -> str: ...

    def upload_part(self, key: str, upload_id: str, number: int, data: bytearray) -> Part: ...

    def complete_upload(
        self, key: str, upload_id: str, parts: list[Part], *, identity: Mapping[str, str], size: int
    ) -> Outcome: ...

    def abort_upload(self, key: str, upload_id: str) -> bool: ...

    def open_uploads(self) -> list[OpenUpload]: ...


def same_object(
    facts: dict[str, Any] | None, identity: Mapping[str, str], size: int | None, *, where: str
) -> dict[str, Any] | None:
    """`facts` (a HEAD: `metadata`, `size`) when they are of the object `identity` and `size`
    name, None when there is no object; IntegrityError when it is another: the one rule of
    `MultipartTarget.existing`."""
    if facts is None:
        return None
    metadata = facts["metadata"]
    differs = [name for name, value in identity.items() if metadata.get(name) != value]
    if differs or (size is not None and facts["size"] != size):
        raise IntegrityError(
            f"{where} already exists with different content "
            f"({', '.join(differs) or 'size'} differs); objects are never overwritten",
            hint="remove it by hand only if you are sure it is wrong",
        )
    return facts


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
    """One object at `key`, staged as a multipart upload and made visible by `complete()` (or
    dropped by `abort()`).

    Known (`sha256` and `size`): the bytes must be exactly those; `identity` (the metadata
    that says "the same object") defaults to `{SHA256_META: sha256}`, and the sha256 is
    stored with it. Learnt (neither): `identity` is required and names the object (e.g. its
    tree's digest); the source is read to its end, in parts of at least
    `size_hint / MAX_PARTS` bytes, and the object carries only `identity` (its sha256 is
    not known when the upload begins).

    `digest` is the sha256 and size read and sent once `stage` returned "staged". It stays
    None for an upload that was "exists" before its source was read to the end (already
    there, or published meanwhile by another import): a caller that needs the digest of a
    learnt object already there learns it another way (its own records, or by reading the
    object).
    """

    def __init__(
        self,
        target: MultipartTarget,
        senders: PartSenders,
        key: str,
        *,
        sha256: str | None = None,
        size: int | None = None,
        identity: Mapping[str, str] | None = None,
        size_hint: int = 0,
        content_type: str = OCTET_STREAM,
    ) -> None:
        if (sha256 is None) != (size is None):
            raise ValueError(f"{key}: give both sha256 and size (known), or neither (learnt)")
        if sha256 is None and not identity:
            raise ValueError(f"{key}: a learnt upload needs the identity naming its object")
        self.target = target
        self.senders = senders
        self.key = key
        self.sha256 = sha256
        self.size = size
        self.identity: dict[str, str] = dict(identity or {SHA256_META: str(sha256)})
        self.metadata = {SHA256_META: sha256, **self.identity} if sha256 else self.identity
        self.content_type = content_type
        self.part_size = max(
            target.part_size, -(-(size_hint if size is None else size) // MAX_PARTS)
        )
        self.upload_id = ""
        self.state: State = "new"
        self.digest: Digest | None = None
        self._parts: list[Future[Part]] = []
        self._checked = 0

    def stage(self, source: Reader, on_progress: Progress | None = None) -> State:
        """Send `source`'s bytes as parts, hashing them; IntegrityError when a known upload's
        do not match. The parts may still be on their way when this returns; `complete`
        waits for them. `on_progress` gets each part's size once it is on the server (the
        object's whole size at once when it is already there and the source is not read)."""
        facts = self.target.existing(self.key, self.identity, size=self.size)
        if facts is not None:
            self.state = "exists"
            if on_progress is not None:
                on_progress(int(facts["size"]))
            return self.state
        try:
            return self._send_all(source, on_progress)
        except _PublishedMeanwhile:
            return self._published_meanwhile()

    def _send_all(self, source: Reader, on_progress: Progress | None) -> State:
        """Read, hash and hand out the parts; check the whole once the source is read. The
        hash runs on its own thread, in order, while the next part is read. The upload
        begins with the first byte, so an empty object is never a multipart upload."""
        hashing = HashingWriter()
        hashed: Future[int] | None = None
        total = 0
        while True:
            self.senders.take_slot()
            try:
                part = read_part(source, self._next_part_size(total))
                total += len(part)
                number = len(self._parts) + 1
                if part and (self.size is None or total <= self.size):
                    self._begin(number)
                else:
                    self.senders.give_slot()
                    break
            except BaseException:
                self.senders.give_slot()
                raise
            hashed = self.senders.hasher.submit(hashing.write, part)
            self._parts.append(
                self.senders.pool.submit(self._send, number, part, hashed, on_progress)
            )
            del part
            self._raise_failed_parts()
        if hashed is not None:
            hashed.result()
        read = Digest(hashing.result.sha256, total)
        if self.sha256 is not None and self.size is not None:
            check_whole(self.key, read, sha256=self.sha256, size=self.size)
        self.digest = read
        self.state = "staged"
        return self.state

    def _next_part_size(self, total: int) -> int:
        """A whole part; a known upload reads one byte past its size, to see a longer source."""
        if self.size is None:
            return self.part_size
        return min(self.part_size, self.size + 1 - total)

    def _begin(self, number: int) -> None:
        """Start the upload at its first part; refuse a part past S3's MAX_PARTS (only a
        learnt upload can meet it: a known one's part size is set from its size)."""
        if number > MAX_PARTS:
            raise OperationFailed(
                f"{self.key}: the source holds more than {MAX_PARTS} parts of {self.part_size} "
                f"bytes ({MAX_PARTS * self.part_size}), the most its upload can take (sized for "
                "the size expected); nothing was published"
            )
        if not self.upload_id:
            self.upload_id = self.target.start_upload(
                self.key, identity=self.metadata, content_type=self.content_type
            )

    def _send(
        self, number: int, part: bytearray, hashed: Future[int], on_progress: Progress | None
    ) -> Part:
        try:
            with self._unless_swept():
                sent = self.target.upload_part(self.key, self.upload_id, number, part)
            hashed.result()
            if on_progress is not None:
                on_progress(len(part))
            return sent
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
        except UploadGone:
            if self.target.existing(self.key, self.identity, size=self.size):
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
        if self.state != "staged" or self.digest is None:
            raise RuntimeError(f"{self.key}: complete() before stage() finished")
        size = self.digest.size
        if size == 0:
            outcome = self.target.put_immutable(
                self.key, b"", identity=self.identity, content_type=self.content_type
            )
            self.state = "completed"
            return outcome
        sent = [future.result() for future in self._parts]
        try:
            with self._unless_swept():
                outcome = self.target.complete_upload(
                    self.key, self.upload_id, sent, identity=self.identity, size=size
                )
        except _PublishedMeanwhile:
            outcome = "exists"
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
            self.target.abort_upload(self.key, self.upload_id)
        if self.state in ("new", "staged"):
            self.state = "aborted"


class Staging:
    """A batch of staged uploads, completed together or aborted together (context manager).

    `stage(key, source, sha256=..., size=...)` stages one object from any byte stream
    (a blob joined from a set's parts, a rebuilt archive), or `stage(key, source,
    identity=...)` one whose digest is learnt as it is read (a spliced archive);
    `complete()` makes them all visible, in the order staged, once every one has matched.
    """

    def __init__(
        self,
        target: MultipartTarget,
        *,
        workers: int | None = None,
        now: Callable[[], datetime] = utcnow,
    ) -> None:
        self.target = target
        self.now = now
        self.senders = PartSenders(workers or target.workers)
        self.uploads: list[StagedUpload] = []
        self._completed = False

    def __enter__(self) -> Staging:
        sweep_orphans(self.target, self.now() - ORPHAN_GRACE)
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
        sha256: str | None = None,
        size: int | None = None,
        identity: Mapping[str, str] | None = None,
        size_hint: int = 0,
        content_type: str = OCTET_STREAM,
        on_progress: Progress | None = None,
    ) -> StagedUpload:
        """Stage one object (StagedUpload: known with `sha256` and `size`, learnt with
        `identity` alone); returns the upload, whose `digest` is what was read."""
        upload = StagedUpload(
            self.target,
            self.senders,
            key,
            sha256=sha256,
            size=size,
            identity=identity,
            size_hint=size_hint,
            content_type=content_type,
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
        sweep_orphans(self.target, self.now() - ORPHAN_GRACE)
        return outcomes

    def abort(self) -> None:
        """Abort every upload of the batch that is not completed."""
        for upload in self.uploads:
            upload.abort()

    @property
    def peak_parts_in_flight(self) -> int:
        return self.senders.peak_in_flight


def upload_blob(
    target: MultipartTarget, key: str, source: Reader, *, sha256: str, size: int, **how: Any
) -> Outcome:
    """One object from `source`, staged and completed alone (a batch of one); `how` is
    `stage`'s `content_type` and `on_progress`."""
    with Staging(target) as staging:
        staging.stage(key, source, sha256=sha256, size=size, **how)
        return staging.complete()[key]


def sweep_orphans(target: MultipartTarget, started_before: datetime) -> int:
    """Abort the open multipart uploads under the target's prefix that no import can still
    complete: those of a key already published, and those begun before `started_before`.
    Returns how many were aborted. Best effort: a server that refuses the listing keeps them."""
    try:
        uploads = target.open_uploads()
    except MirrorError as exc:
        log.debug("cannot list the open uploads: %s", exc)
        return 0
    aborted = 0
    for upload in uploads:
        young = upload.initiated >= started_before
        if young and target.existing(upload.key, {}) is None:  # no identity: any object there
            continue  # perhaps a concurrent import's
        if target.abort_upload(upload.key, upload.upload_id):
            aborted += 1
            log.info("aborted an upload of %s left open since %s", upload.key, upload.initiated)
    return aborted


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


def check_whole(key: str, read: Digest, *, sha256: str, size: int) -> None:
    """The source held exactly `size` bytes hashing to `sha256` (IntegrityError otherwise;
    `read.size` past `size` means the source held more)."""
    unpublished = "nothing was published"
    if read.size > size:
        raise IntegrityError(
            f"{key}: the source holds more than the expected {size} bytes; {unpublished}"
        )
    require_digest(f"{key}: the source", read, sha256, size, hint=unpublished)
