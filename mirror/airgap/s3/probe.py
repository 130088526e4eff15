"""What the configured S3 server really does, found by trying it: `mirror target check`.

Promises:
- Every probe writes only under `PREFIX/.mirror-probe/`, one fresh key per run, and
  removes exactly what it wrote (open uploads included), whatever the outcome: on a
  versioned bucket each version it wrote by its VersionId (a delete by key there only
  hides them under a delete marker, kept forever), and a delete marker, if a delete by key
  made one; nothing else, and no marker left.
- Each check is one row: name, status (`ok`, `warn`, `fail`, `skipped`), a detail line,
  and for a failure the MirrorError an operation would meet (its exit code).
- `require_safe_writes` is what `transfer import` runs first: a server that stores
  bytes with a wrong checksum is refused by name (exit 2), and so is one that ignores
  conditional writes unless `target.conditional_writes = "emulate"` says to go on
  with HEAD before each write.
"""

from __future__ import annotations

import contextlib
import functools
import urllib.parse
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any, Literal, Protocol

import botocore.exceptions
import httpx

from mirror.airgap.s3.checksums import PartChecksum, md5_hex, part_checksum
from mirror.airgap.s3.errors import (
    DIGEST_CODES,
    UNSUPPORTED_CODES,
    error_code,
    http_status,
    s3_failure,
)
from mirror.airgap.s3.objectstore import ObjectStore, without_conditional_writes
from mirror.errors import ConfigError, MirrorError
from mirror.logs import redacted_url

Status = Literal["ok", "warn", "fail", "skipped"]
Conditional = Literal["honoured", "unsupported", "ignored"]
Protection = Literal["enforced", "read back", "none"]
PROBE_DIR = ".mirror-probe"
SKEW_WARN = 60.0
SKEW_FAIL = 15 * 60.0  # S3's limit for a request's signed time
BODY = b"mirror target check\n"


@dataclass(frozen=True)
class Check:
    name: str
    status: Status
    detail: str
    error: MirrorError | None = None

    def as_dict(self) -> dict[str, Any]:
        exit_code = self.error.exit_code if self.error is not None else None
        return {
            "name": self.name,
            "status": self.status,
            "detail": self.detail,
            "exit_code": exit_code,
        }


class ProbeStore(Protocol):
    """What a probe needs of a store: its bucket and where it is, its key names, the S3
    client whose calls it makes (boto3's, or tests/fixtures/memory.py's), the checksum its
    uploads send and whether conditional writes may be emulated."""

    @property
    def bucket(self) -> str: ...

    @property
    def where(self) -> str: ...

    @property
    def emulate_conditional(self) -> bool: ...

    @property
    def client(self) -> Any: ...

    @property
    def part_checksum(self) -> PartChecksum: ...

    def key(self, *parts: str) -> str: ...

    def presign_get(self, key: str, ttl: float) -> tuple[str, datetime]: ...


_S3_ERRORS = (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError)


class Probe:
    """Probes against one store, on one key under PREFIX/.mirror-probe/; `written` holds what
    is there because of them (module docstring): the VersionId of each write, or None where
    the bucket named none (not versioned)."""

    def __init__(self, store: ProbeStore, *, verify: str | bool = True) -> None:
        self.store = store
        self.verify = verify
        self.key = store.key(PROBE_DIR, uuid.uuid4().hex)
        self.client = store.client
        self.written: list[str | None] = []

    def _put(self, data: bytes, **extra: Any) -> dict[str, Any]:
        answer = dict(
            self.client.put_object(Bucket=self.store.bucket, Key=self.key, Body=data, **extra)
        )
        version = answer.get("VersionId")
        if version is not None or None not in self.written:
            self.written.append(version)
        return answer

    def remove_written(self) -> None:
        """Delete what `written` holds, newest first; one that cannot be deleted stays listed
        (raised, unless `clean` is the caller). A delete by key (no VersionId known) that
        made a delete marker (the bucket was versioned after all) removes that marker too."""
        while self.written:
            version = self.written[-1]
            extra = {"VersionId": version} if version is not None else {}
            answer = self.client.delete_object(Bucket=self.store.bucket, Key=self.key, **extra)
            self.written.pop()
            marker = answer.get("VersionId")
            if version is None and answer.get("DeleteMarker") and marker:
                self.written.append(str(marker))

    def clean(self) -> None:
        """Remove what the probes wrote and any upload they left, whatever fails: a write
        that cannot be deleted is given up and the next one tried (a failure is the check's
        to report, not the cleaning's)."""
        while self.written:
            with contextlib.suppress(*_S3_ERRORS):
                self.remove_written()
            if self.written:
                self.written.pop()
        with contextlib.suppress(*_S3_ERRORS):
            uploads = self.client.list_multipart_uploads(Bucket=self.store.bucket, Prefix=self.key)
            for upload in uploads.get("Uploads", []):
                self.client.abort_multipart_upload(
                    Bucket=self.store.bucket, Key=self.key, UploadId=upload["UploadId"]
                )

    def checksum_protection(self) -> Protection:
        """PUT with a checksum of other bytes: `enforced` when the server refuses it; else,
        with MD5, `read back` when the ETag it reports is the MD5 of what it stored (the
        upload then checks every part's ETag itself); else `none`."""
        kind = self.store.part_checksum
        try:
            self._put(BODY, **part_checksum(kind, BODY + b"x"))
        except botocore.exceptions.ClientError as exc:
            if error_code(exc) in DIGEST_CODES or http_status(exc) == 400:
                return "enforced"
            raise
        if kind == "md5":
            etag = str(self._put(BODY, **part_checksum("md5", BODY))["ETag"]).strip('"')
            if etag == md5_hex(BODY):
                return "read back"
        return "none"

    def conditional_writes(self) -> Conditional:
        """Write the key, then write it again with If-None-Match: * and a wrong If-Match."""
        with contextlib.suppress(botocore.exceptions.ClientError):
            self.remove_written()  # the checksum probe's, so the key is new again
        etag = self._put(BODY, **part_checksum("md5", BODY))["ETag"]
        for condition in ({"IfNoneMatch": "*"}, {"IfMatch": '"0000000000000000"'}):
            try:
                self._put(BODY, **condition)
            except botocore.exceptions.ClientError as exc:
                if error_code(exc) in UNSUPPORTED_CODES or http_status(exc) == 501:
                    return "unsupported"
                if http_status(exc) != 412:
                    raise
                continue
            return "ignored"
        self._put(BODY, IfMatch=etag)
        return "honoured"

    def clock_skew(self) -> float:
        """Seconds this host's clock is ahead of the server's (negative: behind)."""
        answer = self.client.head_bucket(Bucket=self.store.bucket)
        date = answer["ResponseMetadata"]["HTTPHeaders"].get("date", "")
        server = parsedate_to_datetime(date) if date else None
        if server is None:
            raise ValueError("the server sent no Date header")
        return (datetime.now(UTC) - server).total_seconds()

    def multipart(self) -> None:
        """Begin an upload, find it in the listing, abort it."""
        upload_id = self.client.create_multipart_upload(Bucket=self.store.bucket, Key=self.key)[
            "UploadId"
        ]
        listed = self.client.list_multipart_uploads(Bucket=self.store.bucket, Prefix=self.key)
        self.client.abort_multipart_upload(
            Bucket=self.store.bucket, Key=self.key, UploadId=upload_id
        )
        if not any(u.get("UploadId") == upload_id for u in listed.get("Uploads", [])):
            raise ValueError("an upload just begun is not in the listing")

    def presigned_get(self) -> str:
        """Fetch the probe object through a presigned link, as the chart's pods will."""
        self._put(BODY, **part_checksum("md5", BODY))
        url, _ = self.store.presign_get(self.key, 300)
        response = httpx.get(url, timeout=15.0, verify=self.verify)
        if response.status_code != 200 or response.content != BODY:
            raise ValueError(f"the link answered {response.status_code}")
        parts = urllib.parse.urlsplit(url)
        return redacted_url(f"{parts.scheme}://{parts.netloc}")


def run_checks(store: ObjectStore, *, ca_bundle: str = "") -> list[Check]:
    """Every check, in order; later checks are skipped when the bucket is out of reach."""
    try:
        store.check_access()
    except MirrorError as exc:
        return [Check("credentials and bucket", "fail", str(exc), exc)]
    probe = Probe(store, verify=ca_bundle or True)
    checks = [Check("credentials and bucket", "ok", f"{store.where} answers")]
    try:
        for name, run in _CHECKS:
            checks.append(_attempt(name, functools.partial(run, probe), probe))
    finally:
        probe.clean()
    return checks


def _attempt(name: str, run: Callable[[], Check], probe: Probe) -> Check:
    """One check's row; an S3 refusal is the MirrorError an import would meet (its exit code)."""
    try:
        return run()
    except MirrorError as exc:
        return Check(name, "fail", str(exc), exc)
    except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError) as exc:
        thing = f"{probe.store.bucket}/{probe.key}"
        error = s3_failure(exc, "probe", thing=thing, where=probe.store.where)
        return Check(name, "fail", str(error), error)
    except (ValueError, httpx.HTTPError) as exc:
        detail = str(exc)
        error = ConfigError(f"{name}: {detail or type(exc).__name__}")
        return Check(name, "fail", detail or type(exc).__name__, error)


def _skew(probe: Probe) -> Check:
    skew = probe.clock_skew()
    detail = f"this host is {abs(skew):.0f} s {'ahead of' if skew >= 0 else 'behind'} the server"
    if abs(skew) >= SKEW_FAIL:
        return Check("clock skew", "fail", detail, ConfigError(detail, hint="set the clock (NTP)"))
    return Check("clock skew", "warn" if abs(skew) >= SKEW_WARN else "ok", detail)


def _conditional(probe: Probe) -> Check:
    found = probe.conditional_writes()
    if found == "honoured":
        return Check("conditional writes", "ok", "If-None-Match: * and If-Match are honoured")
    error = without_conditional_writes(probe.store.where, found)
    if probe.store.emulate_conditional:
        return Check("conditional writes", "warn", f"{found}; emulated with HEAD before each write")
    return Check("conditional writes", "fail", f"{found} by the server", error)


def _checksums(probe: Probe) -> Check:
    kind = probe.store.part_checksum
    found = probe.checksum_protection()
    if found == "enforced":
        return Check("checksums enforced", "ok", f"a {kind} of other bytes is refused")
    if found == "read back":
        detail = "a wrong md5 is accepted, but ETags are the md5 of what is stored: checked"
        return Check("checksums enforced", "warn", detail + " by the tool after each part")
    return Check(
        "checksums enforced", "fail", f"a wrong {kind} was accepted", checksums_ignored(probe.store)
    )


def _multipart(probe: Probe) -> Check:
    probe.multipart()
    return Check("multipart list and abort", "ok", "an upload was begun, listed and aborted")


def _presign(probe: Probe) -> Check:
    try:
        base = probe.presigned_get()
    except httpx.TransportError as exc:
        detail = f"the presigned host is not reachable from here ({type(exc).__name__})"
        return Check("presigned GET", "warn", detail + "; check from a pod")
    return Check("presigned GET", "ok", f"fetched through {base}")


_CHECKS: list[tuple[str, Callable[[Probe], Check]]] = [
    ("clock skew", _skew),
    ("conditional writes", _conditional),
    ("checksums enforced", _checksums),
    ("multipart list and abort", _multipart),
    ("presigned GET", _presign),
]


def checksums_ignored(store: ProbeStore) -> ConfigError:
    other = "md5" if store.part_checksum == "crc32" else "crc32"
    return ConfigError(
        f"the object store ({store.where}) accepted bytes with a wrong {store.part_checksum} "
        "checksum: it does not verify what it stores, so damage on the way would be published",
        hint=f'set target.part_checksum = "{other}" and run mirror target check to see if '
        "the server verifies that; or use a server that verifies checksums",
    )


def require_safe_writes(store: ObjectStore) -> None:
    """Refuse a server that ignores checksums, or conditional writes unless emulation is
    allowed (then the store checks with HEAD before each write); cleans up after itself."""
    probe = Probe(store)
    try:
        with store.call("probe", probe.key):
            protection = probe.checksum_protection()
            found = probe.conditional_writes()
    finally:
        probe.clean()
    if protection == "none":
        raise checksums_ignored(store)
    if found == "honoured":
        store.conditional_writes = True
        return
    if not store.emulate_conditional:
        raise without_conditional_writes(store.where, found)
    store.conditional_writes = False
