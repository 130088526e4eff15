"""The versions of a domain in the bucket, as the chart sees them (read through the layout).

Promises: a version is "complete" only when the index lists it and its
`manifest.json` is present and well-formed; the current version is the promoted
one, or (nothing promoted yet) the newest complete one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from mirror.airgap import layout
from mirror.errors import NotFound
from mirror.versions import VersionLabel, VersionRef, newest

SHOWN_VERSIONS = 12


class BucketStore(layout.Bucket, Protocol):
    """What the chart needs of mirror.airgap.s3.objectstore.ObjectStore."""

    def presign_get(self, key: str, ttl: float) -> tuple[str, datetime]: ...


@dataclass(frozen=True)
class BundleVersion:
    """A complete version: its bundle as its manifest promises it (`ref`), and the keys of
    its bundle object and its manifest."""

    ref: VersionRef
    key: str
    manifest_key: str


def require_index(store: layout.Bucket, domain: str) -> layout.Index:
    """`domain`'s index.json; NotFound (exit 3) when the bucket has none."""
    index = layout.read_index(store, domain)
    if index is None:
        raise NotFound(
            f"domain {domain} has no versions in the bucket ({layout.index_key(store, domain)} "
            "is missing); check the name, or import a transfer set for it first"
        )
    return index


def listed_versions(store: layout.Bucket, domain: str) -> list[VersionLabel]:
    """The complete versions of `domain` by the index, oldest first; NotFound without an index."""
    return sorted(VersionLabel(label) for label in require_index(store, domain).labels() if label)


def _missing_version(
    store: layout.Bucket, domain: str, version: str, versions: Sequence[str]
) -> str:
    """Why `version` is not listed: removed by `chart gc` (and when), or never there."""
    journal = layout.read_gc_journal(store, domain)
    listed = f"versions: {describe_versions(versions)}"
    if journal is not None and version in {entry.version for entry in journal.pending}:
        return f"version {version} of {domain} is being removed by chart gc; {listed}"
    removed_at = journal.removed_at(version) if journal is not None else None
    if removed_at is not None:
        return f"version {version} of {domain} was removed by chart gc at {removed_at}; {listed}"
    return f"version {version} of {domain} does not exist; {listed}"


def describe_versions(versions: Sequence[str]) -> str:
    """`a, b, c` (newest last), shortened to the newest few."""
    if not versions:
        return "none"
    if len(versions) <= SHOWN_VERSIONS:
        return ", ".join(versions)
    older = len(versions) - SHOWN_VERSIONS
    return f"{', '.join(versions[-SHOWN_VERSIONS:])} (and {older} older)"


def complete_version(store: layout.Bucket, domain: str, version: str) -> BundleVersion:
    """`version` of `domain` if the index lists it and its manifest is present; else NotFound."""
    versions = listed_versions(store, domain)
    if version not in versions:
        raise NotFound(_missing_version(store, domain, version, versions))
    manifest_key = layout.version_manifest_key(store, domain, version)
    manifest = layout.read_version_manifest(store, domain, version)
    if manifest is None:
        raise NotFound(
            f"version {version} of {domain} is incomplete ({manifest_key} is missing); "
            "import its transfer set again"
        )
    ref = VersionRef(
        domain,
        VersionLabel(version),
        manifest.sha256.lower(),
        manifest.size,
        manifest.archive_format,
    )
    return BundleVersion(ref, key=manifest.object, manifest_key=manifest_key)


def current_version(store: layout.Bucket, domain: str) -> str:
    """The promoted version, or (none promoted) the newest complete one; NotFound if none."""
    document = layout.read_current(store, domain)
    if document is not None and document.current:
        return document.current
    label = current_of(document, listed_versions(store, domain))
    if label is None:
        raise NotFound(f"domain {domain} has no complete version in the bucket yet")
    return label


def current_of(document: layout.Current | None, listed: Sequence[str]) -> str | None:
    """The current version by these documents: the promoted one, or (none promoted) the
    newest of `listed`; None when there is neither."""
    if document is not None and document.current:
        return document.current
    label = newest(listed)
    return None if label is None else str(label)
