"""Every version's bundle staged straight from the set's parts (a delta's: the archive made
from its base, mirror.airgap.publish) and completed only once all have matched the signed
manifest; on any mismatch or error every upload is aborted. A version the bucket holds with
the same tree in other bytes is kept, not sent."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mirror.airgap import layout, publish
from mirror.airgap.s3.multipart import Outcome, StagedUpload, Staging
from mirror.airgap.s3.objectstore import ObjectStore
from mirror.errors import IntegrityError
from mirror.integrity import Digest
from mirror.transferset.format import ManifestItem
from mirror.transferset.reader import VerifiedSet, find_damaged_part

TREE_SHA256_META = "tree-sha256"

Progress = Callable[[int], None] | None


@dataclass(frozen=True)
class Staged:
    """A bundle object in place: whether this import created it, and its sha256 and size
    (a spliced delta's learnt as it was written); `kept`, the manifest of the version the
    bucket holds with the same tree in other bytes, when it is that one."""

    outcome: Outcome
    digest: Digest
    kept: layout.VersionManifest | None = None


def bundle_key(store: ObjectStore, item: ManifestItem) -> str:
    return layout.bundle_key(store, item.domain, item.version, item.archive_format)


def stage_bundles(
    store: ObjectStore,
    verified: VerifiedSet,
    on_progress: Progress = None,
    *,
    work_dir: Path | None = None,
    bases: publish.Bases | None = None,
) -> dict[str, Staged]:
    """Upload every version's bundle, completed together once every one has matched (else
    all are aborted); a version there with the same tree (`same_tree_there`) is not sent.
    The outcome and the object's digest, by key."""
    kept = _kept(store, verified)
    source = _Source(store, verified, work_dir, bases)
    uploads: list[StagedUpload] = []
    read: dict[str, Digest] = {}
    with Staging(store) as staging:
        for item in verified.manifest.items:
            key = bundle_key(store, item)
            if key in kept:
                if on_progress is not None:
                    on_progress(kept[key].digest.size)
                continue
            uploads.append(_stage(staging, source, item, key, on_progress))
            if uploads[-1].state == "exists" and uploads[-1].digest is None:
                # read back now: a refusal aborts every staged upload (trial37 D3)
                read[key] = _read_digest(store, key, item.tree_sha256)
        outcomes = staging.complete()
    trees = {bundle_key(store, item): item.tree_sha256 for item in verified.manifest.items}
    staged = {
        u.key: Staged(
            outcomes[u.key],
            u.digest or read.get(u.key) or _read_digest(store, u.key, trees[u.key]),
        )
        for u in uploads
    }
    return {**staged, **kept}


def _kept(store: ObjectStore, verified: VerifiedSet) -> dict[str, Staged]:
    """The versions the bucket holds with the same tree in other bytes, by bundle key."""
    return {
        bundle_key(store, item): Staged("exists", Digest(stored.sha256, stored.size), stored)
        for item in verified.manifest.items
        if (stored := same_tree_there(store, item)) is not None
    }


@dataclass(frozen=True)
class _Source:
    """Where a version's bytes come from: the verified set, and for a delta its base in the
    bucket and the work directory its archive is made in."""

    store: ObjectStore
    verified: VerifiedSet
    work_dir: Path | None
    bases: publish.Bases | None


def _stage(
    staging: Staging, source: _Source, item: ManifestItem, key: str, on_progress: Progress
) -> StagedUpload:
    """Stage `item`'s object at `key` from what the set carries for it; a damaged part of a
    whole item is named."""
    verified, bases = source.verified, source.bases
    with publish.open_published(
        verified.path,
        item,
        source.store,
        sequence=verified.manifest.sequence,
        site=verified.manifest.site,
        work_dir=source.work_dir,
        bases=bases,
    ) as reader:
        try:
            upload = staging.stage(
                key,
                reader,
                **_expected(item, bases),
                content_type=_content_type(item.archive_format),
                on_progress=on_progress,
            )
        except IntegrityError as exc:
            named = find_damaged_part(verified.path, item) if item.delta is None else None
            raise (named or exc) from None
        if isinstance(reader, publish.TreeChecked):
            reader.finish()  # an object already there was not read: its tree still is
    return upload


def _expected(item: ManifestItem, bases: publish.Bases | None) -> dict[str, Any]:
    """What the staged upload of `item` must hash to (`publication`, over its base); a
    digest learnt as it is written (a splice) names the object by its tree instead."""
    published = publish.expected(item, bases)
    if published.sha256 is not None:
        return {"sha256": published.sha256, "size": published.size}
    return {"identity": {TREE_SHA256_META: item.tree_sha256}, "size_hint": published.size_hint}


def _read_digest(store: ObjectStore, key: str, tree_sha256: str) -> Digest:
    """The digest of an object already in place that this import did not write (a spliced
    delta's, published by an import killed before the version's manifest): read back, its
    tree proved the signed one (its metadata only claims it; the digest recorded is what
    `chart check` vouches for)."""
    head = store.head(key)
    where = f"{store.bucket}/{key}"
    try:
        tree, digest = publish.read_back(store, key, head["size"] if head is not None else 0)
    except IntegrityError as exc:
        tree, digest = exc.message, None
    if tree != tree_sha256 or digest is None:
        held = f"tree {tree[:12]}" if digest is not None else f"no such tree ({tree})"
        raise IntegrityError(
            f"{where} already exists and names tree {tree_sha256[:12]} but holds {held}; "
            "objects are never overwritten",
            hint="remove it by hand only if you are sure it is wrong",
        )
    return digest


def same_tree_there(store: ObjectStore, item: ManifestItem) -> layout.VersionManifest | None:
    """The version's manifest when the bucket holds `item`'s version, complete, with the same
    tree in other bytes (module docstring); None otherwise (the ordinary path decides)."""
    stored = layout.read_version_manifest(store, item.domain, item.version)
    if stored is None or stored.sha256 == item.published_sha256:
        return None
    if stored.tree_sha256 != item.tree_sha256 or stored.object != bundle_key(store, item):
        return None
    head = store.head(stored.object)
    if head is None or head["size"] != stored.size or head["sha256"] not in (None, stored.sha256):
        return None
    return stored


def _content_type(archive_format: str) -> str:
    return {
        "zip": "application/zip",
        "tar.gz": "application/gzip",
        "tar": "application/x-tar",
        "tar.xz": "application/x-xz",
        "tar.bz2": "application/x-bzip2",
    }.get(archive_format, "application/octet-stream")
