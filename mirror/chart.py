"""Values for the vendor's Helm chart, the domain's current version, and a check of the link.

The bucket is the air-gapped side's source of truth (see INTERFACES.md):
`PREFIX/DOMAIN/index.json` lists the complete versions, each with its
`manifest.json` beside the bundle, and `PREFIX/DOMAIN/current.json` records
which version is live and how it got there. This module promises:

- values are rendered only for a complete version (listed in the index, with
  its manifest present), and a presigned link's expiry is written into the file;
- `current.json` is replaced only with a conditional write on the ETag that was
  read, so two operators promoting at once cannot lose each other's change
  (the loser gets TemporaryFailure and runs again);
- `check_values_file` fetches the link exactly as the chart would (no S3
  credentials), hashes it while streaming, and compares it with the manifest;
- `refresh_values` rewrites a values file only when its link is about to
  expire, its version is no longer current, or it is missing, and runs the
  `chart.on_change` hook only for files it rewrote.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shlex
import subprocess
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal, Protocol
from urllib.parse import parse_qsl, quote, unquote, urlsplit

import httpx
import yaml

from mirror.config import ChartSettings, TargetSettings
from mirror.errors import (
    AuthError,
    ConfigError,
    IntegrityError,
    MirrorError,
    NotFound,
    OperationFailed,
    TemporaryFailure,
)
from mirror.fsutil import CHUNK_SIZE, atomic_writer
from mirror.timestamps import rfc3339
from mirror.units import format_duration
from mirror.versions import label_key, sort_labels

log = logging.getLogger(__name__)

DOCUMENT_FORMAT = 1
HISTORY_LIMIT = 200
SHOWN_VERSIONS = 12
ERROR_BODY_LIMIT = 64 * 1024
DEFAULT_WARN = 86400.0
HOOK_OUTPUT_LIMIT = 200

Clock = Callable[[], datetime]


def utcnow() -> datetime:
    return datetime.now(UTC)


isoformat = rfc3339  # the one timestamp form of our documents and messages


class BucketStore(Protocol):
    """What this module needs of mirror.objectstore.ObjectStore."""

    def key(self, *parts: str) -> str: ...

    def read_json(self, key: str) -> tuple[dict[str, Any] | None, str | None]: ...

    def write_json(self, key: str, document: dict[str, Any], *, if_match: str | None) -> str: ...

    def presign_get(self, key: str, ttl: float) -> tuple[str, datetime]: ...


# --- versions in the bucket ------------------------------------------------------------------


@dataclass(frozen=True)
class BundleVersion:
    """A complete version: its bundle object and the sha256 its manifest promises."""

    domain: str
    version: str
    key: str
    manifest_key: str
    sha256: str
    size: int | None


def listed_versions(store: BucketStore, domain: str) -> list[str]:
    """The complete versions of `domain` by the index, oldest first; NotFound without an index."""
    index, _ = store.read_json(store.key(domain, "index.json"))
    if index is None:
        raise NotFound(
            f"domain {domain} has no versions in the bucket ({store.key(domain, 'index.json')} "
            "is missing); check the name, or import a transfer set for it first"
        )
    entries = index.get("versions") or []
    return sort_labels(str(entry["version"]) for entry in entries if entry.get("version"))


def describe_versions(versions: list[str]) -> str:
    """`a, b, c` (newest last), shortened to the newest few."""
    if not versions:
        return "none"
    if len(versions) <= SHOWN_VERSIONS:
        return ", ".join(versions)
    older = len(versions) - SHOWN_VERSIONS
    return f"{', '.join(versions[-SHOWN_VERSIONS:])} (and {older} older)"


def complete_version(store: BucketStore, domain: str, version: str) -> BundleVersion:
    """`version` of `domain` if the index lists it and its manifest is present; else NotFound."""
    versions = listed_versions(store, domain)
    if version not in versions:
        raise NotFound(
            f"version {version} of {domain} does not exist; versions: {describe_versions(versions)}"
        )
    manifest_key = store.key(domain, version, "manifest.json")
    manifest, _ = store.read_json(manifest_key)
    if manifest is None:
        raise NotFound(
            f"version {version} of {domain} is incomplete ({manifest_key} is missing); "
            "import its transfer set again"
        )
    try:
        object_key = str(manifest["object"])
        sha256 = str(manifest["sha256"]).lower()
    except KeyError as exc:
        raise IntegrityError(f"manifest {manifest_key} has no {exc.args[0]!r} field") from None
    size = manifest.get("size")
    return BundleVersion(
        domain=domain,
        version=version,
        key=object_key,
        manifest_key=manifest_key,
        sha256=sha256,
        size=int(size) if isinstance(size, int) else None,
    )


def read_current(store: BucketStore, domain: str) -> tuple[dict[str, Any] | None, str | None]:
    """`current.json` of `domain` and its ETag, or (None, None) when nothing was promoted."""
    return store.read_json(store.key(domain, "current.json"))


def current_version(store: BucketStore, domain: str) -> str:
    """The promoted version, or (none promoted) the newest complete one; NotFound if none."""
    document, _ = read_current(store, domain)
    if document and document.get("current"):
        return str(document["current"])
    versions = listed_versions(store, domain)
    if not versions:
        raise NotFound(f"domain {domain} has no complete version in the bucket yet")
    return max(versions, key=label_key)


# --- current.json: promote, roll back, history ----------------------------------------------


def _history(document: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    if not document:
        return []
    return [dict(entry) for entry in document.get("history") or [] if entry.get("version")]


def _promotion_stack(history: Iterable[Mapping[str, Any]]) -> list[str]:
    """Versions in the order they were promoted, with rolled-back ones taken off again."""
    stack: list[str] = []
    for entry in history:
        version = str(entry["version"])
        if entry.get("action") == "rollback":
            while stack and stack[-1] != version:
                stack.pop()
            if not stack:
                stack.append(version)
        else:
            stack.append(version)
    return stack


def with_promotion(
    document: Mapping[str, Any] | None,
    domain: str,
    version: str,
    at: datetime,
    action: Literal["promote", "rollback"] = "promote",
) -> dict[str, Any]:
    """The `current.json` that makes `version` current, its history extended (and bounded)."""
    history = _history(document)
    history.append({"version": version, "action": action, "at": isoformat(at)})
    return {
        "format": DOCUMENT_FORMAT,
        "domain": domain,
        "current": version,
        "history": history[-HISTORY_LIMIT:],
    }


def rollback_target(document: Mapping[str, Any] | None, domain: str) -> str:
    """The version promoted before the current one; OperationFailed when there is none."""
    if not document or not document.get("current"):
        raise OperationFailed(
            f"nothing to roll back to: no version of {domain} has been promoted yet "
            f"(mirror chart promote {domain} VERSION)"
        )
    current = str(document["current"])
    stack = _promotion_stack(_history(document))
    while stack and stack[-1] == current:
        stack.pop()
    if not stack:
        others = sorted(
            {str(entry["version"]) for entry in _history(document)} - {current}, key=label_key
        )
        if not others:
            raise OperationFailed(
                f"nothing to roll back to: {current} is the only version of {domain} ever promoted"
            )
        raise OperationFailed(
            f"nothing to roll back to: {current} is the oldest promotion of {domain} left; "
            f"the later ones ({', '.join(others)}) were rolled back "
            f"(make one current again with: mirror chart promote {domain} VERSION)"
        )
    return stack[-1]


@dataclass(frozen=True)
class HistoryEntry:
    version: str
    action: str
    at: str
    current: bool


def history_view(document: Mapping[str, Any] | None) -> list[HistoryEntry]:
    """The history, newest first; the newest entry is marked current."""
    entries = list(reversed(_history(document)))
    current = str(document.get("current")) if document else None
    return [
        HistoryEntry(
            version=str(entry["version"]),
            action=str(entry.get("action", "promote")),
            at=str(entry.get("at", "")),
            current=index == 0 and str(entry["version"]) == current,
        )
        for index, entry in enumerate(entries)
    ]


def promote(
    store: BucketStore, domain: str, version: str, *, now: Clock = utcnow
) -> dict[str, Any]:
    """Make `version` (complete, else NotFound) the current one; returns the new current.json.

    Promoting the version that is already current changes nothing. A concurrent
    change of current.json makes the conditional write fail: TemporaryFailure.
    """
    complete_version(store, domain, version)
    document, etag = read_current(store, domain)
    if document and document.get("current") == version:
        return dict(document)
    updated = with_promotion(document, domain, version, now())
    store.write_json(store.key(domain, "current.json"), updated, if_match=etag)
    log.info("promoted", extra={"domain": domain, "version": version})
    return updated


def rollback(store: BucketStore, domain: str, *, now: Clock = utcnow) -> dict[str, Any]:
    """Make the previously promoted version current again; returns the new current.json."""
    document, etag = read_current(store, domain)
    target = rollback_target(document, domain)
    complete_version(store, domain, target)
    updated = with_promotion(document, domain, target, now(), action="rollback")
    store.write_json(store.key(domain, "current.json"), updated, if_match=etag)
    log.info("rolled back", extra={"domain": domain, "version": target})
    return updated


# --- values ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ChartValues:
    """Rendered values for one version; `expires_at` is None for a plain URL."""

    domain: str
    version: str
    key: str
    sha256: str
    bundle_url: str
    url_mode: Literal["presigned", "plain"]
    expires_at: datetime | None
    ttl: float | None

    def document(self) -> dict[str, Any]:
        return {
            "staticExport": {
                "enabled": True,
                "bundleUrl": self.bundle_url,
                "version": self.version,
            }
        }

    def expiry_note(self) -> str:
        if self.expires_at is None:
            return "bundleUrl is a plain URL and does not expire"
        ttl = format_duration(self.ttl) if self.ttl is not None else "?"
        return f"bundleUrl expires {isoformat(self.expires_at)} (presigned, {ttl})"

    def text(self) -> str:
        header = [
            f"# {self.expiry_note()}",
            f"# bundle sha256 {self.sha256} ({self.domain} {self.version})",
            f"# rendered by: mirror chart values {self.domain} --pin {self.version}",
        ]
        body = yaml.safe_dump(self.document(), sort_keys=False, width=1_000_000)
        return "\n".join(header) + "\n" + body

    def summary(self) -> dict[str, Any]:
        return {
            "domain": self.domain,
            "version": self.version,
            "key": self.key,
            "sha256": self.sha256,
            "url_mode": self.url_mode,
            "bundle_url": self.bundle_url,
            "expires_at": isoformat(self.expires_at) if self.expires_at else None,
        }


def plain_url(target: TargetSettings, key: str) -> str:
    if not target.public_base_url:
        raise ConfigError(
            'target.url_mode is "plain" but target.public_base_url is empty; '
            "set it to the bucket's URL inside the network"
        )
    return target.public_base_url.rstrip("/") + "/" + quote(key, safe="/")


def render_values(
    store: BucketStore,
    target: TargetSettings,
    domain: str,
    version: str | None = None,
) -> ChartValues:
    """Values for `version` of `domain`, or for its current version when None."""
    chosen = version or current_version(store, domain)
    bundle = complete_version(store, domain, chosen)
    if target.url_mode == "plain":
        return ChartValues(
            domain=domain,
            version=chosen,
            key=bundle.key,
            sha256=bundle.sha256,
            bundle_url=plain_url(target, bundle.key),
            url_mode="plain",
            expires_at=None,
            ttl=None,
        )
    ttl = min(target.presign_ttl, 7 * 86400.0)
    url, expires_at = store.presign_get(bundle.key, ttl)
    return ChartValues(
        domain=domain,
        version=chosen,
        key=bundle.key,
        sha256=bundle.sha256,
        bundle_url=url,
        url_mode="presigned",
        expires_at=expires_at,
        ttl=ttl,
    )


def write_values(values: ChartValues, path: Path) -> None:
    """Replace `path` with the values, all or nothing."""
    with atomic_writer(path) as handle:
        handle.write(values.text().encode())


# --- reading a values file and its link ------------------------------------------------------


@dataclass(frozen=True)
class ValuesFile:
    bundle_url: str
    version: str | None
    enabled: bool


def read_values_file(path: Path) -> ValuesFile:
    """The staticExport keys of a values file; ConfigError (exit 2) when it has none."""
    try:
        text = path.read_bytes().decode("utf-8")
    except FileNotFoundError:
        raise ConfigError(f"values file {path} does not exist") from None
    except OSError as exc:
        raise ConfigError(f"cannot read values file {path}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"values file {path} is not UTF-8 text (byte {exc.start})") from None
    try:
        document = yaml.safe_load(text)
    except RecursionError:
        raise ConfigError(f"values file {path} nests too deeply to be a values file") from None
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        line = f" at line {where.line + 1}" if where is not None else ""
        raise ConfigError(f"values file {path} is not valid YAML{line}") from None
    section = document.get("staticExport") if isinstance(document, dict) else None
    url = section.get("bundleUrl") if isinstance(section, dict) else None
    if not isinstance(section, dict) or not isinstance(url, str) or not url:
        raise ConfigError(f"values file {path} has no staticExport.bundleUrl")
    version = section.get("version")
    return ValuesFile(
        bundle_url=url,
        version=str(version) if version is not None else None,
        enabled=section.get("enabled") is True,
    )


def link_expiry(url: str) -> datetime | None:
    """When a presigned link expires, from its signature (SigV4 or SigV2); None if unsigned."""
    query = {name.lower(): value for name, value in parse_qsl(urlsplit(url).query)}
    try:
        if "x-amz-date" in query and "x-amz-expires" in query:
            signed = datetime.strptime(query["x-amz-date"], "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)
            return signed + timedelta(seconds=int(query["x-amz-expires"]))
        if "expires" in query:
            return datetime.fromtimestamp(int(query["expires"]), UTC)
    except (ValueError, OverflowError):
        raise ConfigError(
            "bundleUrl has unreadable signature parameters (X-Amz-Date/X-Amz-Expires or Expires)"
        ) from None
    return None


@dataclass(frozen=True)
class LinkTarget:
    """Where a bundle link points: `.../DOMAIN/VERSION/bundle.EXT`."""

    domain: str
    version: str
    filename: str
    host: str


def link_target(url: str) -> LinkTarget:
    parts = urlsplit(url)
    segments = [unquote(segment) for segment in parts.path.split("/") if segment]
    if len(segments) < 3 or not segments[-1].startswith("bundle."):
        raise ConfigError(
            f"bundleUrl on {parts.hostname or '?'} does not point at a mirror bundle "
            "(expected .../DOMAIN/VERSION/bundle.EXT)"
        )
    return LinkTarget(
        domain=segments[-3], version=segments[-2], filename=segments[-1], host=parts.netloc
    )


# --- chart check -----------------------------------------------------------------------------


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
    A file that is not a values file at all raises ConfigError at once.
    """
    values = read_values_file(path)
    target = link_target(values.bundle_url)
    expires_at = link_expiry(values.bundle_url)
    report = CheckReport(
        file=str(path),
        domain=target.domain,
        version=target.version,
        host=target.host,
        expires_at=expires_at,
        enabled=values.enabled,
    )
    moment = now()
    if expires_at is not None:
        report.seconds_left = (expires_at - moment).total_seconds()

    try:
        bundle = complete_version(store, target.domain, target.version)
    except NotFound as exc:
        return _fail(report, "missing", exc)
    report.expected_sha256 = bundle.sha256
    if values.version is not None and values.version != target.version:
        return _fail(
            report,
            "version-mismatch",
            IntegrityError(
                f"{path} says version {values.version} but its bundleUrl points at "
                f"{target.domain} {target.version}; render it again with mirror chart values"
            ),
        )
    if expires_at is not None and expires_at <= moment:
        return _fail(report, "expired", _expired_error(report, expires_at, moment))

    try:
        fetched = _fetch_sha256(http, values.bundle_url)
    except httpx.HTTPError as exc:
        return _fail(
            report,
            "unreachable",
            TemporaryFailure(
                f"cannot fetch the bundleUrl of {path} from {target.host}: "
                f"{type(exc).__name__}: {exc}"
            ),
        )
    if fetched.status == 404:
        return _fail(
            report,
            "missing",
            NotFound(
                f"{target.host} has no object for {target.domain} {target.version} "
                f"({target.filename}, HTTP 404) although its manifest exists"
            ),
        )
    if fetched.status == 403 and fetched.expired:
        return _fail(report, "expired", _expired_error(report, expires_at, moment))
    if fetched.status in (401, 403):
        return _fail(
            report,
            "refused",
            AuthError(
                f"{target.host} refused the bundleUrl of {path} (HTTP {fetched.status}"
                f"{', ' + fetched.code if fetched.code else ''}); the chart could not fetch it "
                "either: render the values again, or check the bucket policy for plain URLs"
            ),
        )
    if fetched.status != 200:
        return _fail(
            report,
            "unreachable",
            TemporaryFailure(
                f"{target.host} answered HTTP {fetched.status} for the bundleUrl of {path}"
            ),
        )
    report.actual_sha256 = fetched.sha256
    report.size = fetched.size
    if fetched.sha256 != bundle.sha256:
        return _fail(
            report,
            "mismatch",
            IntegrityError(
                f"the bundle behind {path} ({target.domain} {target.version}) has sha256 "
                f"{fetched.sha256[:16]}..., its manifest says {bundle.sha256[:16]}...: "
                "the object was replaced or damaged; do not deploy it"
            ),
        )
    if report.seconds_left is not None and report.seconds_left < warn:
        return _fail(
            report,
            "expiring",
            OperationFailed(
                f"the bundleUrl of {path} ({target.domain} {target.version}) expires "
                f"{isoformat(expires_at or moment)}, in {format_duration(report.seconds_left)} "
                f"(warning at {format_duration(warn)}); run mirror chart refresh or chart values"
            ),
        )
    return report


@dataclass(frozen=True)
class _Fetched:
    status: int
    sha256: str = ""
    size: int = 0
    code: str = ""
    expired: bool = False


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
            code = _xml_field(text, "Code")
            expired = "expired" in (_xml_field(text, "Message") + code).lower()
            return _Fetched(status=response.status_code, code=code, expired=expired)
        digest = hashlib.sha256()
        size = 0
        for chunk in response.iter_bytes(CHUNK_SIZE):
            digest.update(chunk)
            size += len(chunk)
        return _Fetched(status=200, sha256=digest.hexdigest(), size=size)


def _xml_field(text: str, name: str) -> str:
    start = text.find(f"<{name}>")
    end = text.find(f"</{name}>", start)
    if start < 0 or end < 0:
        return ""
    return text[start + len(name) + 2 : end].strip()[:200]


# --- refresh ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class RefreshResult:
    domain: str
    path: Path
    version: str
    action: Literal["rendered", "fresh"]
    reason: str
    expires_at: datetime | None
    hook_exit: int | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "domain": self.domain,
            "path": str(self.path),
            "version": self.version,
            "action": self.action,
            "reason": self.reason,
            "expires_at": isoformat(self.expires_at) if self.expires_at else None,
            "hook_exit": self.hook_exit,
        }

    def line(self) -> str:
        verb = "wrote" if self.action == "rendered" else "kept"
        return f"{verb} {self.path}: {self.domain} {self.version} ({self.reason})"


def values_paths(template: str, domains: list[str]) -> dict[str, Path]:
    """Where each domain's values go; ConfigError if several share one file."""
    if not template:
        raise ConfigError("chart.values_path is not set; set it to the values file to refresh")
    if not domains:
        raise ConfigError("no domain to refresh: pass --domain D or list [[exports]] domains")
    if "{domain}" not in template and len(domains) > 1:
        raise ConfigError(
            f"chart.values_path {template!r} has no {{domain}} but {len(domains)} domains "
            "would share it; add {domain} to the path or pass one --domain"
        )
    return {domain: Path(template.replace("{domain}", domain)) for domain in domains}


def refresh_reason(
    path: Path,
    domain: str,
    version: str,
    target: TargetSettings,
    refresh_before: float,
    now: datetime,
) -> str | None:
    """Why the values file at `path` must be rendered again, or None if it is still good."""
    if not path.exists():
        return "missing"
    try:
        values = read_values_file(path)
        link = link_target(values.bundle_url)
        expires_at = link_expiry(values.bundle_url)
    except ConfigError:
        return "unreadable"
    if (link.domain, link.version) != (domain, version) or values.version not in (None, version):
        return f"version {values.version or link.version} -> {version}"
    if target.url_mode == "plain":
        if expires_at is not None:
            return "url_mode is now plain"
        return None
    if expires_at is None:
        return "url_mode is now presigned"
    left = (expires_at - now).total_seconds()
    if left <= 0:
        return f"link expired {format_duration(-left)} ago"
    if left < refresh_before:
        return f"link expires in {format_duration(left)}"
    return None


def refresh_values(
    store: BucketStore,
    target: TargetSettings,
    chart: ChartSettings,
    domains: list[str],
    *,
    now: Clock = utcnow,
) -> list[RefreshResult]:
    """Render each domain's values file again where needed and run chart.on_change for it.

    Every domain is handled even when a hook fails; then OperationFailed names
    the first failure (its files were written all the same).
    """
    paths = values_paths(chart.values_path, domains)
    hook = shlex.split(chart.on_change) if chart.on_change.strip() else []
    results: list[RefreshResult] = []
    failures: list[str] = []
    for domain, path in paths.items():
        version = current_version(store, domain)
        reason = refresh_reason(path, domain, version, target, chart.refresh_before, now())
        if reason is None:
            results.append(
                RefreshResult(
                    domain=domain,
                    path=path,
                    version=version,
                    action="fresh",
                    reason="still valid",
                    expires_at=_existing_expiry(path),
                )
            )
            continue
        values = render_values(store, target, domain, version)
        write_values(values, path)
        log.info("values rendered", extra={"domain": domain, "version": version, "path": str(path)})
        hook_exit: int | None = None
        if hook:
            hook_exit, detail = run_hook(hook, path, domain, version)
            if hook_exit != 0:
                failures.append(
                    f"chart.on_change ({hook[0]}) exited with {hook_exit} for {domain} "
                    f"({path} was written){detail}"
                )
        results.append(
            RefreshResult(
                domain=domain,
                path=path,
                version=version,
                action="rendered",
                reason=reason,
                expires_at=values.expires_at,
                hook_exit=hook_exit,
            )
        )
    if failures:
        raise RefreshFailed(failures[0], results=results)
    return results


class RefreshFailed(OperationFailed):
    """A chart.on_change hook failed; `results` tells what was written anyway."""

    def __init__(self, message: str, *, results: list[RefreshResult]) -> None:
        super().__init__(message)
        self.results = results


def _existing_expiry(path: Path) -> datetime | None:
    try:
        return link_expiry(read_values_file(path).bundle_url)
    except ConfigError:
        return None


def run_hook(command: list[str], path: Path, domain: str, version: str) -> tuple[int, str]:
    """Run chart.on_change (no shell) with the file, domain and version in its environment.

    Returns its exit code (127 when it cannot be started) and a short detail
    from its error output for the message.
    """
    env = dict(os.environ)
    env.update(
        {"MIRROR_VALUES_FILE": str(path), "MIRROR_DOMAIN": domain, "MIRROR_VERSION": version}
    )
    try:
        completed = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    except OSError as exc:
        return 127, f": cannot start it: {exc.strerror}"
    for stream, text in (("stdout", completed.stdout), ("stderr", completed.stderr)):
        if text.strip():
            log.info("chart.on_change %s: %s", stream, text.strip())
    last = completed.stderr.strip().splitlines()[-1:] if completed.stderr.strip() else []
    detail = f": {last[0][:HOOK_OUTPUT_LIMIT]}" if last and completed.returncode else ""
    return completed.returncode, detail


__all__ = [
    "BucketStore",
    "BundleVersion",
    "ChartValues",
    "CheckReport",
    "HistoryEntry",
    "RefreshFailed",
    "RefreshResult",
    "check_values_file",
    "complete_version",
    "current_version",
    "history_view",
    "link_expiry",
    "link_target",
    "promote",
    "read_values_file",
    "refresh_values",
    "render_values",
    "rollback",
    "write_values",
]
