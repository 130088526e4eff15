"""Values for the vendor's Helm chart: render them for a complete version, read them back.

Promises: values are rendered only for a complete version (listed in the index,
with its manifest present), and a presigned link's expiry is written into the
file as a comment; a values file is replaced all or nothing; reading one that
has no `staticExport.bundleUrl` is ConfigError (exit 2).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Literal
from urllib.parse import quote, unquote, urlsplit

import yaml

from mirror.airgap import layout
from mirror.airgap.chart.bucket import (
    BucketStore,
    BundleVersion,
    complete_version,
    current_version,
)
from mirror.config import TargetSettings
from mirror.errors import ConfigError, NotFound
from mirror.fsutil import atomic_writer
from mirror.timestamps import rfc3339
from mirror.units import format_duration

isoformat = rfc3339  # the one timestamp form of our documents and messages


@dataclass(frozen=True)
class ChartValues:
    """Rendered values for one version; `expires_at` is None for a link that does not expire.
    `moving`: the link is `mirror serve`'s URL of the domain's current version (which
    follows promote and rollback); `version` is then the one current when rendered, and the
    values say `version: current`."""

    domain: str
    version: str
    key: str
    sha256: str
    bundle_url: str
    url_mode: Literal["presigned", "plain", "serve"]
    expires_at: datetime | None
    ttl: float | None
    moving: bool = False

    def helm_values(self) -> dict[str, Any]:
        """The `staticExport` section of the chart's values."""
        return {
            "staticExport": {
                "enabled": True,
                "bundleUrl": self.bundle_url,
                "version": layout.MOVING if self.moving else self.version,
            }
        }

    def expiry_note(self) -> str:
        if self.moving:
            return (
                "bundleUrl is mirror serve's link to the current version: it follows promote "
                "and rollback and does not expire"
            )
        if self.url_mode == "serve":
            return "bundleUrl is mirror serve's link to this version and does not expire"
        if self.expires_at is None:
            return "bundleUrl is a plain URL and does not expire"
        ttl = format_duration(self.ttl) if self.ttl is not None else "?"
        return f"bundleUrl expires {isoformat(self.expires_at)} (presigned, {ttl})"

    def text(self) -> str:
        how = "--moving" if self.moving else f"--pin {self.version}"
        header = [
            f"# {self.expiry_note()}",
            f"# bundle sha256 {self.sha256} ({self.domain} {self.version})",
            f"# rendered by: mirror chart values {self.domain} {how}",
        ]
        body = yaml.safe_dump(self.helm_values(), sort_keys=False, width=1_000_000)
        return "\n".join(header) + "\n" + body

    def as_dict(self) -> dict[str, Any]:
        return {
            "domain": self.domain,
            "version": self.version,
            "key": self.key,
            "sha256": self.sha256,
            "url_mode": self.url_mode,
            "bundle_url": self.bundle_url,
            "expires_at": isoformat(self.expires_at) if self.expires_at else None,
            "moving": self.moving,
        }


def served_url(public_url: str, bundle: BundleVersion, *, moving: bool) -> str:
    """`mirror serve`'s link to the bundle (`moving`: to the domain's current version)."""
    if not public_url:
        raise ConfigError(
            'target.url_mode is "serve" but serve.public_url is empty; set it to the '
            "address the pods use to reach mirror serve (http://mirror-serve.NAMESPACE.svc:8080)"
        )
    ref = bundle.ref
    path = layout.served_path(ref.domain, None if moving else str(ref.label), ref.format)
    return public_url.rstrip("/") + quote(path, safe="/")


def _served_values(bundle: BundleVersion, served_at: str, *, moving: bool) -> ChartValues:
    ref = bundle.ref
    return ChartValues(
        domain=ref.domain,
        version=str(ref.label),
        key=bundle.key,
        sha256=ref.sha256,
        bundle_url=served_url(served_at, bundle, moving=moving),
        url_mode="serve",
        expires_at=None,
        ttl=None,
        moving=moving,
    )


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
    *,
    served_at: str = "",
    moving: bool = False,
) -> ChartValues:
    """Values for `version` of `domain`, or for its current version when None. With
    `target.url_mode = "serve"` the link is `mirror serve`'s at `served_at` (serve.public_url):
    the version's own by default, the moving link to the current version with `moving`."""
    if moving and (target.url_mode != "serve" or version is not None):
        raise ConfigError(
            "only mirror serve has a link that follows the current version: --moving needs "
            'target.url_mode = "serve" and no --pin'
        )
    chosen = version or current_version(store, domain)
    bundle = complete_version(store, domain, chosen)
    if target.url_mode == "serve":
        return _served_values(bundle, served_at, moving=moving)
    url, expires_at, ttl = _bucket_link(store, target, bundle.key)
    return ChartValues(
        domain=domain,
        version=chosen,
        key=bundle.key,
        sha256=bundle.ref.sha256,
        bundle_url=url,
        url_mode="plain" if target.url_mode == "plain" else "presigned",
        expires_at=expires_at,
        ttl=ttl,
    )


def _bucket_link(
    store: BucketStore, target: TargetSettings, key: str
) -> tuple[str, datetime | None, float | None]:
    """The link to `key` in the bucket, when it expires and its lifetime: the plain URL
    under target.public_base_url (never expires), else a presigned one (at most a week)."""
    if target.url_mode == "plain":
        return plain_url(target, key), None, None
    ttl = min(target.presign_ttl, 7 * 86400.0)
    url, expires_at = store.presign_get(key, ttl)
    return url, expires_at, ttl


def write_values(values: ChartValues, path: Path) -> None:
    """Replace `path` with the values, all or nothing."""
    with atomic_writer(path) as handle:
        handle.write(values.text().encode())


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
        raise NotFound(f"values file {path} does not exist") from None
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
