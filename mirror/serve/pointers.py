"""What the bucket says each domain holds: its versions, the current one, the rollback target.

The service reads these pointers every `serve.poll_interval` and keeps the last ones it read
in `CACHE_DIR/pointers.json`, so that started again while the object store is away it goes
on serving the versions it last saw as current. The decisions are the chart's own:
mirror.airgap.chart.bucket (`current_of`: promoted, else the newest complete version) and
mirror.airgap.chart.promotion (`rollback_target`).

Promises: a domain whose documents cannot be read keeps the view read before (and its error
is reported); a prefix in the bucket that is no domain name (a hostname, lower case) is
never a served domain (`ignored`: the service warns); a pointers file that is damaged or
of another format is ignored (a warning), never half used; it is replaced atomically.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from mirror.airgap import layout
from mirror.airgap.chart.bucket import current_of
from mirror.airgap.chart.gc import Listing, bucket_domains
from mirror.airgap.chart.promotion import rollback_target
from mirror.errors import AuthError, MirrorError, OperationFailed
from mirror.fsutil import atomic_write_bytes
from mirror.hostnames import is_domain
from mirror.timestamps import parse_zoned, rfc3339, utcnow
from mirror.units import format_size
from mirror.versions import VersionLabel, VersionRef

log = logging.getLogger(__name__)

FORMAT = 1


@dataclass(frozen=True)
class Listed:
    """A complete version as the index lists it: its bundle, and the object that holds it."""

    ref: VersionRef
    object: str

    def as_dict(self) -> dict[str, Any]:
        return {**self.ref.as_dict(), "object": self.object}


@dataclass(frozen=True)
class DomainView:
    """One domain: its complete versions by label, the current one and the rollback target."""

    domain: str
    versions: dict[str, Listed]
    current: str | None
    rollback: str | None
    indexed: bool = True
    """False when the bucket has no index.json for the domain (a name in serve.domains that
    the bucket does not hold: a typo, or nothing imported yet)."""

    def protected(self) -> set[str]:
        """The sha256 of the versions the cache never evicts: current and rollback target."""
        return {
            self.versions[label].ref.sha256
            for label in (self.current, self.rollback)
            if label is not None and label in self.versions
        }

    def as_dict(self) -> dict[str, Any]:
        return {
            "current": self.current,
            "rollback": self.rollback,
            "versions": [listed.as_dict() for listed in self.versions.values()],
        }


@dataclass(frozen=True)
class Pointers:
    """Every served domain's view, when it was read, and each domain's last read error."""

    domains: dict[str, DomainView] = field(default_factory=dict)
    read_at: datetime | None = None
    errors: dict[str, str] = field(default_factory=dict)
    refused: AuthError | None = None
    """The store refused the credentials for every domain: the service exits 4 at start."""
    ignored: tuple[str, ...] = ()
    """Prefixes in the bucket with an index that are no domain name: never served."""

    def as_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "read_at": rfc3339(self.read_at) if self.read_at else None,
            "domains": {name: view.as_dict() for name, view in sorted(self.domains.items())},
        }


def kept_bytes(pointers: Pointers) -> int:
    """The bytes the cache must keep: every domain's current version and rollback target,
    each bundle once."""
    sizes = {
        listed.ref.sha256: listed.ref.size
        for view in pointers.domains.values()
        for label in (view.current, view.rollback)
        if label is not None and (listed := view.versions.get(label)) is not None
    }
    return sum(sizes.values())


def cache_short(pointers: Pointers, cache_max: int) -> str | None:
    """Why `cache_max` (serve.cache_max) cannot hold every domain's current version and
    rollback target (they are kept all the same), or None when it can."""
    needed = kept_bytes(pointers)
    if needed <= cache_max:
        return None
    return (
        f"serve.cache_max ({format_size(cache_max)}) is below the {format_size(needed)} that "
        "every domain's current version and rollback target take: they are kept all the "
        "same, and no other version stays cached; raise it"
    )


def read_domain(bucket: layout.Bucket, domain: str) -> DomainView:
    """`domain`'s view from its index.json and current.json."""
    index = layout.read_index(bucket, domain)
    document = layout.read_current(bucket, domain)
    versions: dict[str, Listed] = {}
    for entry in index.versions if index is not None else []:
        ref = VersionRef(
            domain,
            VersionLabel(entry.version),
            entry.sha256.lower(),
            entry.size,
            layout.format_of(entry),
        )
        versions[entry.version] = Listed(ref, entry.object)
    try:
        rollback: str | None = rollback_target(document, domain)
    except OperationFailed:
        rollback = None
    current = current_of(document, list(versions))
    return DomainView(domain, versions, current, rollback, indexed=index is not None)


def read_pointers(bucket: Listing, wanted: Sequence[str] | None, previous: Pointers) -> Pointers:
    """Every domain's view (`wanted`, or every domain with an index in the bucket). A domain
    that fails keeps its previous view; a failure to list the domains at all is raised."""
    listed = list(wanted) if wanted is not None else bucket_domains(bucket)
    domains = [domain for domain in listed if is_domain(domain)]
    ignored = tuple(domain for domain in listed if not is_domain(domain))
    views: dict[str, DomainView] = {}
    errors: dict[str, str] = {}
    refusals: list[AuthError] = []
    for domain in domains:
        try:
            views[domain] = read_domain(bucket, domain)
        except MirrorError as exc:
            errors[domain] = str(exc)
            refusals += [exc] if isinstance(exc, AuthError) else []
            if domain in previous.domains:
                views[domain] = previous.domains[domain]
    refused = refusals[0] if refusals and len(refusals) == len(domains) else None
    return Pointers(views, utcnow(), errors, refused, ignored)


def save(path: Path, pointers: Pointers) -> None:
    atomic_write_bytes(path, json.dumps(pointers.as_dict(), indent=2).encode() + b"\n")


def load(path: Path) -> Pointers | None:
    """The pointers saved at `path`, or None (absent, damaged: a warning, never half used)."""
    try:
        document = json.loads(path.read_bytes())
        return _from_document(document)
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        log.warning("ignoring the saved pointers %s: %s", path, exc)
        return None


def _from_document(document: dict[str, Any]) -> Pointers:
    if document.get("format") != FORMAT:
        raise ValueError(f"format {document.get('format')!r}, expected {FORMAT}")
    views = {}
    for domain, view in document["domains"].items():
        versions = {}
        for item in view["versions"]:
            ref = VersionRef(
                domain,
                VersionLabel(item["version"]),
                str(item["sha256"]),
                int(item["size"]),
                str(item["format"]),
            )
            versions[item["version"]] = Listed(ref, str(item["object"]))
        views[domain] = DomainView(domain, versions, view["current"], view["rollback"])
    read_at = document.get("read_at")
    return Pointers(views, parse_zoned(read_at) if read_at else None)
