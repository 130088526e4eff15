"""Deltas on the connected side: which version a delta goes against, and the delta itself.

A version V of domain D may travel as a delta (`mirror.transferset.delta`: the file list and only
the contents its base lacks) when the air-gapped side already holds an earlier version.

Promises:
- `choose_bases`: V's base is the newest version of D with an older label (`VersionLabel` order)
  that the site is known to hold (`mirror.sites.held_bases`: acknowledged there or, for the
  implicit single site without receipts, packed in an earlier set for it that is not lost
  and not only sent over a one-way link: `transfer send` proves nothing arrived), and whose
  bundle is in the store. A version
  in the set being packed is never a base; nothing is ever assumed delivered. No such
  version: V goes whole, with the reason (`NO_BASE`, `BASE_BLOB_MISSING`).
- Only a `tar.gz` version over a `tar.gz` base goes as a delta (a spliced one): any other
  version, or a base of any other format, is no base (`NO_BASE`). The tree-archive delta a
  zip got is no longer made (docs/delta.md: the way dropped).
- `build_delta` takes both versions' files from the digests kept beside their bundles
  (`store.digests`); a version stored before digests were kept (or whose listing is
  damaged) has its bundle read once instead, logged, and its digests are kept then, so the
  next pack reads none. It then reads the new bundle once for the carried files
  (`outbound/carried.py`), and the base's object only for the recipe (`outbound/recipe.py`).
  Memory is flat in the file count: the file lists are on disk past `spill.SPILL_AT`
  entries; the carried contents, the file lists and the delta blob go to temp files without
  a name under the store's tmp dir, so success, refusal and a killed process alike leave
  none behind.
- V's file list must hash to V's recorded tree, and the base's to the base's recorded tree,
  or the delta is refused (IntegrityError: the store is inconsistent with its index).
- The spliced delta (`DeltaEntry.spliced`) carries every file of V that the base does not
  hold at the same path with the same sha256 (a page moved or copied to a new path is
  carried; contents still go once each): the import edits the base's object in one pass
  over its members (`transferset/delta/_splice.py`), keeping a base file only at its own
  path. No archive is built here (compressing the whole tree is what made a delta pack
  slow) but for the recipe: the entry names no archive digest (the import learns it as it
  writes), its `compression` is the one the import compresses changed regions with,
  `carried_files` counts the files carried, and `recipe` is the archive made here when it
  is worth carrying.
- `decide`: the delta is chosen when its blob is at most `ratio` of the bundle; `full`
  builds none.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import IO, Any, BinaryIO, cast

from sqlalchemy import select
from sqlalchemy.orm import Session

from mirror.archive import ArchiveLimits
from mirror.archive.spill import FileList
from mirror.fsutil import disk_full, is_disk_full
from mirror.integrity import HashingWriter
from mirror.outbound import carried, recipe
from mirror.store import digests
from mirror.store.blobs import BlobStore
from mirror.store.models import Bundle, Version
from mirror.transferset.delta import (
    Contents,
    DeltaBlobWriter,
    TreeFile,
    archive_mtime,
    current,
)
from mirror.transferset.format import DeltaEntry, SpliceRecipe
from mirror.versions import VersionLabel, VersionRef

log = logging.getLogger(__name__)

NO_BASE = "no base"
BASE_BLOB_MISSING = "base blob missing"
NOT_SMALLER = "not smaller"
FULL_ASKED = "--full"
SPLICED_BASE_FORMAT = "tar.gz"


@dataclass(frozen=True)
class Offered:
    """A version offered for the set (`ref`: its bundle), its index id, its tree and its
    export time as the manifest spells it."""

    version_id: int
    ref: VersionRef
    tree_sha256: str
    exported_at: str


@dataclass(frozen=True)
class Base:
    """A delta's base: its label, tree, bundle and that bundle's archive format (a `tar.gz`
    base gets a spliced delta); `published`, the sha256 of the object the site published of
    it, as its receipt said (None: no receipt said, `outbound/recipe.py` takes it)."""

    label: VersionLabel
    tree_sha256: str
    bundle_sha256: str
    format: str
    published: str | None = None


@dataclass
class DeltaBlob:
    """A built delta: its blob's sha256 and size, the manifest entry, the change counts, and
    (when kept) the open temp file holding the blob."""

    sha256: str
    size: int
    entry: DeltaEntry
    changed: int
    added: int
    removed: int
    file: IO[bytes] | None = None

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None

    def __enter__(self) -> DeltaBlob:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass
class Choice:
    """How one offered version goes: as a delta against `base`, or whole (`reason` says why)."""

    offered: Offered
    base: Base | None = None
    delta: DeltaBlob | None = None
    reason: str | None = None

    @property
    def as_delta(self) -> bool:
        return self.delta is not None and self.reason is None

    @property
    def saving(self) -> int:
        return self.offered.ref.size - self.delta.size if self.as_delta and self.delta else 0

    def as_dict(self) -> dict[str, Any]:
        delta = self.delta
        return {
            "domain": self.offered.ref.domain,
            "version": str(self.offered.ref.label),
            "carried": "delta" if self.as_delta else "full",
            "reason": self.reason,
            "base_version": str(self.base.label) if self.base else None,
            "full_size": self.offered.ref.size,
            "delta_size": delta.size if delta else None,
            "files_changed": delta.changed if delta else None,
            "files_added": delta.added if delta else None,
            "files_removed": delta.removed if delta else None,
            "saving": self.saving,
        }


def _held_bases(
    session: Session,
    offered: Sequence[Offered],
    held_ids: Collection[int],
    published: Mapping[int, str],
) -> dict[str, list[Base]]:
    """Per domain of `offered`: the versions among `held_ids` that may be a base (spliced
    archives, none of them offered in this set), with what their site published."""
    in_set = {item.version_id for item in offered}
    domains = {item.ref.domain for item in offered}
    held = session.execute(
        select(
            Version.id,
            Version.domain,
            Version.label,
            Version.tree_sha256,
            Version.bundle_sha256,
            Bundle.format,
        )
        .join(Bundle, Bundle.sha256 == Version.bundle_sha256)
        .where(Version.domain.in_(domains))
        .where(Version.id.in_(list(held_ids)))
        .where(Bundle.format == SPLICED_BASE_FORMAT)
    ).all()
    known: dict[str, list[Base]] = {}
    for version_id, domain, label, tree, bundle, archive_format in held:
        if version_id not in in_set:
            fact = published.get(version_id)
            base = Base(VersionLabel(label), tree, bundle, archive_format, fact)
            known.setdefault(domain, []).append(base)
    return known


def choose_bases(
    session: Session,
    store: BlobStore,
    offered: Sequence[Offered],
    held_ids: Collection[int],
    published: Mapping[int, str] | None = None,
) -> dict[int, Base | str]:
    """Per offered version id: its base among `held_ids` (what the site may use as a base,
    `mirror.sites.held_bases`), or why it has none (module docstring); `published`, what
    the site's receipts said it published (`store.sitestate.published_objects`)."""
    known = _held_bases(session, offered, held_ids, published or {})
    choices: dict[int, Base | str] = {}
    for item in offered:
        if item.ref.format != SPLICED_BASE_FORMAT:
            choices[item.version_id] = NO_BASE
            continue
        older = [base for base in known.get(item.ref.domain, []) if base.label < item.ref.label]
        present = [base for base in older if store.has(base.bundle_sha256)]
        if present:
            choices[item.version_id] = max(present, key=lambda base: base.label)
        else:
            choices[item.version_id] = BASE_BLOB_MISSING if older else NO_BASE
    return choices


def decide(
    store: BlobStore,
    item: Offered,
    base: Base | str,
    *,
    ratio: float,
    full: bool,
    keep: bool,
    limits: ArchiveLimits | None = None,
) -> Choice:
    """Build the delta of `item` against `base` and say whether it goes as one. With `keep`,
    a chosen delta holds its blob in an open temp file (the caller closes the Choice's
    delta); otherwise only its size and hash are learnt. With `keep` (a real pack), a
    version that goes whole has no kept recipe after (`outbound/recipe.py`): its object on
    the air-gapped side is its bundle."""
    if full:
        choice = Choice(item, reason=FULL_ASKED)
    elif isinstance(base, str):
        choice = Choice(item, reason=base)
    else:
        delta = build_delta(store, item, base, keep=keep, limits=limits)
        if delta.size <= item.ref.size * ratio:
            return Choice(item, base, delta)
        delta.close()
        choice = Choice(item, base, delta, NOT_SMALLER)
    if keep:
        recipe.forget(store, item.ref.sha256)
    return choice


def build_delta(
    store: BlobStore,
    item: Offered,
    base: Base,
    *,
    keep: bool,
    limits: ArchiveLimits | None = None,
) -> DeltaBlob:
    """The delta of `item` against `base` (module docstring); with `keep` the blob is kept
    in an open, nameless temp file, else only hashed."""
    limits = limits or ArchiveLimits()
    store.ensure()
    output = tempfile.TemporaryFile(dir=store.tmp_dir) if keep else None  # noqa: SIM115
    try:
        with (
            _files(store, base.label, base.bundle_sha256, base.tree_sha256, limits) as old,
            _files(store, item.ref.label, item.ref.sha256, item.tree_sha256, limits) as new,
        ):
            return _build(store, item, base, old, new, output, limits)
    except BaseException as exc:
        if output is not None:
            output.close()
        if isinstance(exc, OSError) and is_disk_full(exc):
            raise disk_full(store.tmp_dir, None, "nothing was kept") from None
        raise


def _files(
    store: BlobStore, label: str, bundle_sha256: str, tree_sha256: str, limits: ArchiveLimits
) -> FileList:
    """A version's files in the tree's order (`store.digests.files_of`)."""
    return digests.files_of(store, label, bundle_sha256, tree_sha256, limits)


def _build(
    store: BlobStore,
    item: Offered,
    base: Base,
    old: FileList,
    new: FileList,
    output: IO[bytes] | None,
    limits: ArchiveLimits,
) -> DeltaBlob:
    """The spliced delta from both versions' files and one inflate of the new bundle for
    the carried contents (`mirror.outbound.carried`)."""
    counted = HashingWriter(output)
    blob = DeltaBlobWriter(cast(BinaryIO, counted), spool_dir=str(store.tmp_dir))
    found = carried.compare(new, ((path, sha256) for path, _, sha256 in old))
    with (
        found.carried,
        Contents(directory=store.tmp_dir) as contents,  # nameless: a killed pack leaves none
    ):
        carried.take_contents(
            store.open(item.ref.sha256),
            found.carried,
            cast(DeltaBlobWriter, recipe.CarriedSpool(blob, contents)),
            spool_dir=store.tmp_dir,
            label=str(item.ref.label),
            limits=limits,
        )
        made = _recipe(store, item, base, new, contents, blob, kept=output is not None)
        entry = DeltaEntry(
            base_version=str(base.label),
            base_tree_sha256=base.tree_sha256,
            file_count=len(new),
            compression=current(),
            carried_files=len(found.carried),
            spliced=True,
            recipe=made,
        )
    blob.finish(TreeFile(path, size, sha256) for path, size, sha256 in new)
    return _finished(counted, output, entry, found)


def _finished(
    counted: HashingWriter, output: IO[bytes] | None, entry: DeltaEntry, found: carried.Comparison
) -> DeltaBlob:
    """The delta written: its digest and size, what it changes, its kept file rewound."""
    if output is not None:
        output.flush()
        output.seek(0)
    return DeltaBlob(
        sha256=counted.result.sha256,
        size=counted.size,
        entry=entry,
        changed=found.changed,
        added=found.added,
        removed=found.removed,
        file=output,
    )


def _recipe(
    store: BlobStore,
    item: Offered,
    base: Base,
    files: FileList,
    contents: Contents,
    blob: DeltaBlobWriter,
    *,
    kept: bool,
) -> SpliceRecipe | None:
    """The splice recipe of `item`'s archive over `base`'s object (`outbound/recipe.py`):
    kept beside its bundle by a real pack (`kept`), added to `blob` when worth carrying (its
    entry then, else None)."""
    base_object = recipe.base_object(store, base.bundle_sha256, base.published)
    if base_object is None:
        return None
    with recipe.make_recipe(
        store,
        base_object,
        files,
        contents,
        mtime=archive_mtime(item.exported_at),
        level=current().level,
        label=str(item.ref.label),
    ) as made:
        if made is None:
            return None
        if kept:
            recipe.keep(store, item.ref.sha256, made)
        if not made.worth_carrying:
            return None
        blob.add_recipe(made.segments, made.literals)
        return made.entry
