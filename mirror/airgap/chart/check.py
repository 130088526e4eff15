"""`chart check`: fetch a values file's link exactly as the chart would, and compare.

Promises: the link is fetched without S3 credentials, hashed while it streams
(memory does not grow with the bundle), and compared with the version's
manifest; every failure becomes one MirrorError in the report with its exit code.
A `mirror serve` link to the current version (`.../DOMAIN/current/bundle.EXT`) is compared
with the manifest of the version the answer names (`Mirror-Version`), which `version` in
the report then is; mirror serve's refusal of an object (502) is an IntegrityError.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

from mirror.airgap import layout
from mirror.airgap.chart.bucket import BucketStore, BundleVersion, complete_version
from mirror.airgap.chart.values import (
    LinkTarget,
    ValuesFile,
    isoformat,
    link_target,
    read_values_file,
)
from mirror.airgap.layout import SERVER_NAME, VERSION_HEADER
from mirror.errors import (
    AuthError,
    IntegrityError,
    MirrorError,
    NotFound,
    OperationFailed,
    TemporaryFailure,
)
from mirror.integrity import CHUNK_SIZE, HashingWriter, mismatch
from mirror.links import is_expired_answer, link_expiry, s3_error
from mirror.timestamps import utcnow
from mirror.units import format_duration

ERROR_BODY_LIMIT = 64 * 1024
ERROR_LINE_LIMIT = 300
DEFAULT_WARN = 86400.0

Clock = Callable[[], datetime]
Finding = tuple[str, MirrorError]


@dataclass
class CheckReport:
    """What `chart check` found; `error` is None when all is fine."""

    file: str
    domain: str
    version: str
    host: str
    expected_sha256: str | None = None
    actual_sha256: str | None = None
    size: int | None = None
    expires_at: datetime | None = None
    seconds_left: float | None = None
    enabled: bool = True
    error: MirrorError | None = None
    status: str = "ok"

    @property
    def exit_code(self) -> int:
        return self.error.exit_code if self.error else 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "file": self.file,
            "domain": self.domain,
            "version": self.version,
            "host": self.host,
            "status": self.status,
            "expected_sha256": self.expected_sha256,
            "actual_sha256": self.actual_sha256,
            "size": self.size,
            "expires_at": isoformat(self.expires_at) if self.expires_at else None,
            "seconds_left": round(self.seconds_left) if self.seconds_left is not None else None,
            "enabled": self.enabled,
            "error": str(self.error) if self.error else None,
            "exit_code": self.exit_code,
        }

    def lines(self) -> list[str]:
        if self.error:
            return []
        if self.expires_at is None:
            expiry = "the link is a plain URL and does not expire"
        else:
            left = format_duration(self.seconds_left or 0)
            expiry = f"the link expires {isoformat(self.expires_at)} (in {left})"
        lines = [
            f"ok: {self.domain} {self.version} from {self.host}: {self.size} bytes, "
            f"sha256 matches the manifest; {expiry}"
        ]
        if not self.enabled:
            lines.append("note: staticExport.enabled is not true: the chart will not serve it")
        return lines


def _fail(report: CheckReport, status: str, error: MirrorError) -> CheckReport:
    report.status = status
    report.error = error
    return report


def _expired_error(report: CheckReport, expires_at: datetime | None, now: datetime) -> MirrorError:
    when = (
        f" at {isoformat(expires_at)} ({format_duration((now - expires_at).total_seconds())} ago)"
        if expires_at and expires_at <= now
        else ""
    )
    return OperationFailed(
        f"the bundleUrl of {report.file} ({report.domain} {report.version}) expired{when}; "
        f"run mirror chart values {report.domain} --out {report.file} (or chart refresh)"
    )


def check_values_file(
    path: Path,
    store: BucketStore,
    http: httpx.Client,
    *,
    warn: float = DEFAULT_WARN,
    now: Clock = utcnow,
) -> CheckReport:
    """Fetch the file's bundleUrl as the chart would and compare it with the version's manifest.

    Failures go into `report.error` (the CLI raises it after printing): missing
    version or object -> NotFound, bytes or version differ -> IntegrityError,
    link expired or expiring within `warn` seconds -> OperationFailed, link
    refused for another reason -> AuthError, server unreachable -> TemporaryFailure.
    A file that is not there raises NotFound at once, one that is not a values file at all
    ConfigError.
    """
    values = read_values_file(path)
    target = link_target(values.bundle_url)
    moment = now()
    report = _report(path, values, target, moment)
    if target.version == layout.MOVING:
        return _check_moving(path, http, values, target, store, report, moment)
    try:
        bundle = _expected_bundle(store, target, report)
    except NotFound as exc:
        return _fail(report, "missing", exc)
    finding = (
        _before_fetch(path, values.version, target, report, moment)
        or _fetch_and_compare(path, http, values.bundle_url, target, bundle, report, moment)
        or _expiring(path, target, report, moment, warn)
    )
    return _fail(report, *finding) if finding else report


def _report(path: Path, values: ValuesFile, target: LinkTarget, moment: datetime) -> CheckReport:
    """The report before anything is fetched: what the file's link names, and when it
    expires."""
    expires_at = link_expiry(values.bundle_url)
    return CheckReport(
        file=str(path),
        domain=target.domain,
        version=target.version,
        host=target.host,
        expires_at=expires_at,
        seconds_left=(expires_at - moment).total_seconds() if expires_at is not None else None,
        enabled=values.enabled,
    )


def _expected_bundle(store: BucketStore, target: LinkTarget, report: CheckReport) -> BundleVersion:
    """The version's complete bundle as its manifest names it (NotFound when there is none),
    its sha256 the one the report expects."""
    bundle = complete_version(store, target.domain, target.version)
    report.expected_sha256 = bundle.ref.sha256
    return bundle


def _check_moving(
    path: Path,
    http: httpx.Client,
    values: ValuesFile,
    target: LinkTarget,
    store: BucketStore,
    report: CheckReport,
    moment: datetime,
) -> CheckReport:
    """A `mirror serve` link to the domain's current version: fetched first, then compared
    with the manifest of the version it says it served (its `Mirror-Version` header)."""
    try:
        fetched = _fetch_sha256(http, values.bundle_url)
    except httpx.HTTPError as exc:
        return _fail(report, *_unreachable(path, target, exc))
    refused = _refusal(path, fetched, target, report, moment)
    if refused is not None:
        return _fail(report, *refused)
    if not fetched.served_version:
        return _fail(
            report,
            "mismatch",
            IntegrityError(
                f"{target.host} did not say which version of {target.domain} it served (no "
                f"Mirror-Version header): the bundleUrl of {path} is not mirror serve's"
            ),
        )
    served = LinkTarget(target.domain, fetched.served_version, target.filename, target.host)
    report.version = served.version
    try:
        bundle = _expected_bundle(store, served, report)
    except NotFound as exc:
        return _fail(report, "missing", exc)
    finding = _compare(path, fetched, served, bundle, report)
    return _fail(report, *finding) if finding else report


def _before_fetch(
    path: Path, version: str | None, target: LinkTarget, report: CheckReport, moment: datetime
) -> Finding | None:
    if version is not None and version != target.version:
        return "version-mismatch", IntegrityError(
            f"{path} says version {version} but its bundleUrl points at "
            f"{target.domain} {target.version}; render it again with mirror chart values"
        )
    if report.expires_at is not None and report.expires_at <= moment:
        return "expired", _expired_error(report, report.expires_at, moment)
    return None


def _fetch_and_compare(
    path: Path,
    http: httpx.Client,
    url: str,
    target: LinkTarget,
    bundle: BundleVersion,
    report: CheckReport,
    moment: datetime,
) -> Finding | None:
    try:
        fetched = _fetch_sha256(http, url)
    except httpx.HTTPError as exc:
        return _unreachable(path, target, exc)
    refused = _refusal(path, fetched, target, report, moment)
    if refused is not None:
        return refused
    return _compare(path, fetched, target, bundle, report)


def _unreachable(path: Path, target: LinkTarget, exc: httpx.HTTPError) -> Finding:
    return "unreachable", TemporaryFailure(
        f"cannot fetch the bundleUrl of {path} from {target.host}: {type(exc).__name__}: {exc}"
    )


def _compare(
    path: Path, fetched: _Fetched, target: LinkTarget, bundle: BundleVersion, report: CheckReport
) -> Finding | None:
    report.actual_sha256 = fetched.sha256
    report.size = fetched.size
    if fetched.sha256 != bundle.ref.sha256:
        return "mismatch", mismatch(
            f"the bundle behind {path} ({target.domain} {target.version})",
            fetched.sha256,
            bundle.ref.sha256,
            hint="the object was replaced or damaged since its manifest was written; "
            "do not deploy it",
        )
    return None


def _refusal(
    path: Path, fetched: _Fetched, target: LinkTarget, report: CheckReport, moment: datetime
) -> Finding | None:
    """What a non-200 answer means for the chart."""
    if fetched.status == 404:
        said = f": {fetched.line}" if fetched.served_by_mirror and fetched.line else ""
        return "missing", NotFound(
            f"{target.host} has no object for {target.domain} {target.version} "
            f"({target.filename}, HTTP 404){said}"
            + ("" if said else " although its manifest exists")
        )
    if fetched.status == 403 and fetched.expired:
        return "expired", _expired_error(report, report.expires_at, moment)
    if fetched.status == 502 and fetched.served_by_mirror:
        return "mismatch", IntegrityError(
            f"mirror serve at {target.host} refused {target.domain} {target.version}: "
            f"{fetched.line or 'the object does not match its manifest'}",
            hint="the object in the bucket was replaced or damaged; do not deploy it",
        )
    if fetched.status in (401, 403):
        return "refused", AuthError(
            f"{target.host} refused the bundleUrl of {path} (HTTP {fetched.status}"
            f"{', ' + fetched.code if fetched.code else ''}); the chart could not fetch it "
            "either: render the values again, or check the bucket policy for plain URLs"
        )
    if fetched.status != 200:
        return "unreachable", TemporaryFailure(
            f"{target.host} answered HTTP {fetched.status} for the bundleUrl of {path}"
        )
    return None


def _expiring(
    path: Path, target: LinkTarget, report: CheckReport, moment: datetime, warn: float
) -> Finding | None:
    if report.seconds_left is None or report.seconds_left >= warn:
        return None
    return "expiring", OperationFailed(
        f"the bundleUrl of {path} ({target.domain} {target.version}) expires "
        f"{isoformat(report.expires_at or moment)}, in {format_duration(report.seconds_left)} "
        f"(warning at {format_duration(warn)}); run mirror chart refresh or chart values"
    )


@dataclass(frozen=True)
class _Fetched:
    status: int
    sha256: str = ""
    size: int = 0
    code: str = ""
    expired: bool = False
    served_version: str = ""
    """`mirror serve`'s Mirror-Version header: the version it sent."""
    served_by_mirror: bool = False
    line: str = ""
    """The first line of an error answer's body (mirror serve answers errors in one line)."""


def _fetch_sha256(http: httpx.Client, url: str) -> _Fetched:
    """GET `url` without credentials, hashing the body while it streams."""
    with http.stream("GET", url) as response:
        if response.status_code != 200:
            body = bytearray()
            for chunk in response.iter_bytes(CHUNK_SIZE):
                body.extend(chunk)
                if len(body) >= ERROR_BODY_LIMIT:
                    break
            text = body.decode("utf-8", "replace")
            return _Fetched(
                status=response.status_code,
                code=s3_error(text).code,
                expired=is_expired_answer(response.status_code, text),
                served_by_mirror=response.headers.get("server", "").startswith(SERVER_NAME),
                line=" ".join(text.strip().splitlines()[:1])[:ERROR_LINE_LIMIT],
            )
        hashing = HashingWriter()
        for chunk in response.iter_bytes(CHUNK_SIZE):
            hashing.write(chunk)
        return _Fetched(
            status=200,
            sha256=hashing.result.sha256,
            size=hashing.size,
            served_version=response.headers.get(VERSION_HEADER, ""),
            served_by_mirror=response.headers.get("server", "").startswith(SERVER_NAME),
        )
