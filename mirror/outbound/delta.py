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
- `build_delta` reads the new version's bundle, streaming: the base's side (its paths
  and contents) comes from the file digests kept beside its bundle (`store.digests`); the
  base's bundle is read only for a spliced delta's recipe (`outbound/recipe.py`). A base
  stored before digests were kept (or whose listing is damaged) has its bundle read once
  instead, logged, and its digests are kept then, as are the new version's, so the next
  pack reads one bundle. Memory is flat in the file count: the file lists and the base's
  tables are on disk past `spill.SPILL_AT` entries; files below `SPOOL_IN_MEMORY` are
  spooled in memory; larger files, the file lists and the delta blob go to temp files
  without a name under the store's tmp dir, so success, refusal and a killed process alike
  leave none behind.
- V's file list must hash to V's recorded tree, and the base's to the base's recorded tree,
  or the delta is refused (IntegrityError: the store is inconsistent with its index).
- A base whose bundle is a `tar.gz` gets a spliced delta (`DeltaEntry.spliced`), with the
  recipe of the archive made here when it is worth carrying (`outbound/recipe.py`): the import
  edits the base's object in one pass over its members (`transferset/delta/_splice.py`), keeping a
  base file only at its own path, so the delta carries every file of V that the base does not
  hold at the same path with the same sha256 (a page moved or copied to a new path is
  carried; contents still go once each). No tree archive is built (compressing the whole
  tree is what made a delta pack slow): the entry names no archive digest (the import learns
  it as it writes), its `compression` is the one the import compresses changed regions with,
  and `carried_files` counts the files carried.
- Any other base (a zip) gets a tree-archive delta: the blob carries the contents the base
  lacks anywhere, and the entry's `archive_sha256`/`archive_size` are those of the tree
  archive built in file-list order with mtime `archive_mtime(exported_at)`: what the import
  rebuilds and proves.
- `decide`: the delta is chosen when its blob is at most `ratio` of the bundle; `full`
  builds none.
"""

from __future__ import annotations

import io
import logging
import tempfile
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from tempfile import SpooledTemporaryFile
from typing import IO, Any, BinaryIO, cast

from sqlalchemy import select
from sqlalchemy.orm import Session

from mirror.archive import ArchiveLimits, inspect_archive, read_archive
from mirror.archive.spill import FileList, SpillMap
from mirror.errors import IntegrityError
from mirror.fsutil import disk_full, is_disk_full
from mirror.integrity import Digest, HashingWriter, mismatch
from mirror.outbound import carried, recipe
from mirror.store import digests
from mirror.store.blobs import BlobStore
from mirror.store.models import Bundle, Version
from mirror.transferset.delta import (
    Contents,
    DeltaBlobWriter,
    TreeArchive,
    TreeFile,
    archive_mtime,
    current,
    read_chunks,
)
from mirror.transferset.format import Compression, DeltaEntry, SpliceRecipe
from mirror.versions import VersionLabel, VersionRef

SPOOL_IN_MEMORY = carried.SPOOL_IN_MEMORY  # one threshold for both ways of reading a bundle
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
    ).all()
    known: dict[str, list[Base]] = {}
    for version_id, domain, label, tree, bundle, archive_format in held:
        if version_id not in in_set:
            fact = (published or {}).get(version_id)
            base = Base(VersionLabel(label), tree, bundle, archive_format, fact)
            known.setdefault(domain, []).append(base)
    choices: dict[int, Base | str] = {}
    for item in offered:
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
        with _BaseTree.of(store, base, limits) as base_tree:
            return _build(store, item, base, base_tree, output, limits)
    except BaseException as exc:
        if output is not None:
            output.close()
        if isinstance(exc, OSError) and is_disk_full(exc):
            raise disk_full(store.tmp_dir, None, "nothing was kept") from None
        raise


class _BaseTree:
    """The base version's files (path -> sha256) and its contents, on disk as they grow:
    from the digests kept beside its bundle (`store.digests`), or, for a bundle stored
    before they were kept, from reading the bundle once (then kept for the next pack)."""

    def __init__(self) -> None:
        self.paths = SpillMap()
        self.contents = SpillMap()
        self.scanned = False

    @classmethod
    def of(cls, store: BlobStore, base: Base, limits: ArchiveLimits) -> _BaseTree:
        tree = cls()
        listing = digests.load(store, base.bundle_sha256, base.tree_sha256, str(store.tmp_dir))
        if listing is None:
            log.info(
                "version %s: no file digests kept beside its bundle; reading the bundle",
                base.label,
            )
            report = inspect_archive(store.open(base.bundle_sha256), limits)
            if report.tree_sha256 != base.tree_sha256:
                raise _inconsistent(base.label, report.tree_sha256, base.tree_sha256)
            assert report.digests is not None
            digests.keep_report(store, base.bundle_sha256, report)
            listing, tree.scanned = report.digests, True
        with listing:
            for path, _, sha256 in listing:
                tree.paths[path] = sha256
                tree.contents.add(sha256)
        return tree

    def __enter__(self) -> _BaseTree:
        return self

    def __exit__(self, *exc: object) -> None:
        self.paths.close()
        self.contents.close()


def _build(
    store: BlobStore,
    item: Offered,
    base: Base,
    base_tree: _BaseTree,
    output: IO[bytes] | None,
    limits: ArchiveLimits,
) -> DeltaBlob:
    if base.format == item.ref.format == SPLICED_BASE_FORMAT:
        listing = digests.load(store, item.ref.sha256, item.tree_sha256, str(store.tmp_dir))
        if listing is not None:
            with listing:
                return _build_spliced(store, item, base, base_tree, listing, output, limits)
    counted = HashingWriter(output)
    blob = DeltaBlobWriter(cast(BinaryIO, counted), spool_dir=str(store.tmp_dir))
    compression = current()
    tree = None
    if base.format != SPLICED_BASE_FORMAT:
        mtime = archive_mtime(item.exported_at)
        tree = TreeArchive(lambda _data: None, mtime=mtime, compression=compression)
    with FileList(str(store.tmp_dir)) as files:
        sink = _Spooling(store.tmp_dir, base_tree, tree, blob, files)
        report = read_archive(store.open(item.ref.sha256), sink, limits)
        if report.tree_sha256 != item.tree_sha256:
            raise _inconsistent(item.ref.label, report.tree_sha256, item.tree_sha256)
        assert report.digests is not None
        if not store.digests_path(item.ref.sha256).is_file():
            digests.keep_report(store, item.ref.sha256, report)
        removed = _removed(base_tree.paths, report.digests)
        carried = sink.carried if tree is None else len(blob.carried)
        entry = _entry(base, tree, compression, file_count=len(files), carried=carried)
        blob.finish(TreeFile(path, size, sha256) for path, size, sha256 in files)
    return _written(counted, output, entry, (sink.changed, sink.added, removed))


def _build_spliced(
    store: BlobStore,
    item: Offered,
    base: Base,
    base_tree: _BaseTree,
    listing: FileList,
    output: IO[bytes] | None,
    limits: ArchiveLimits,
) -> DeltaBlob:
    """A spliced delta from both versions' kept digests and one inflate of the new bundle
    for the carried contents (`mirror.outbound.carried`)."""
    counted = HashingWriter(output)
    blob = DeltaBlobWriter(cast(BinaryIO, counted), spool_dir=str(store.tmp_dir))
    found = carried.compare(listing, base_tree.paths.sorted_items())
    compression = current()
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
        made = _recipe(store, item, base, listing, contents, blob, kept=output is not None)
        count = len(found.carried)
        entry = _entry(base, None, compression, file_count=len(listing), carried=count, recipe=made)
    blob.finish(TreeFile(path, size, sha256) for path, size, sha256 in listing)
    return _written(counted, output, entry, (found.changed, found.added, found.removed))


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


def _written(
    counted: HashingWriter,
    output: IO[bytes] | None,
    entry: DeltaEntry,
    counts: tuple[int, int, int],
) -> DeltaBlob:
    """The finished delta blob (its file, if kept, rewound), with the files changed, added
    and removed."""
    if output is not None:
        output.flush()
        output.seek(0)
    changed, added, removed = counts
    return DeltaBlob(
        sha256=counted.result.sha256,
        size=counted.size,
        entry=entry,
        changed=changed,
        added=added,
        removed=removed,
        file=output,
    )


def _entry(
    base: Base,
    tree: TreeArchive | None,
    compression: Compression,
    *,
    file_count: int,
    carried: int,
    recipe: SpliceRecipe | None = None,
) -> DeltaEntry:
    """The manifest's entry: spliced without a tree archive (`tree` None), else naming the
    tree archive's digest (closed here, so its size and sha256 are known)."""
    if tree is None:
        return DeltaEntry(
            base_version=str(base.label),
            base_tree_sha256=base.tree_sha256,
            file_count=file_count,
            compression=compression,
            carried_files=carried,
            spliced=True,
            recipe=recipe,
        )
    tree.close()
    return DeltaEntry(
        base_version=str(base.label),
        base_tree_sha256=base.tree_sha256,
        archive_sha256=tree.sha256,
        archive_size=tree.size,
        file_count=file_count,
        compression=compression,
        carried_files=carried,
    )


def _removed(base_paths: SpillMap, new_files: FileList) -> int:
    """How many base paths the new tree lacks (both in the tree hash's order: one merge)."""
    new = (path.encode() for path, _, _ in new_files)
    current_new = next(new, None)
    removed = 0
    for path, _ in base_paths.sorted_items():
        key = path.encode()
        while current_new is not None and current_new < key:
            current_new = next(new, None)
        if current_new != key:
            removed += 1
    return removed


def _inconsistent(label: str, got: str, recorded: str) -> IntegrityError:
    """The stored bundle's tree is not the one the index records for the version."""
    return mismatch(
        f"version {label}: the tree of its stored bundle",
        got,
        recorded,
        hint="the store is inconsistent with its index: run `mirror store verify`, "
        "or pack with --full",
    )


class _Catcher(io.RawIOBase):
    """What a sink hands `read_archive` for one file: the bytes go to `target`; `on_done`
    hears their digest, the one the archive check computed (`archive.FileSink`), once the
    whole member was read (not when reading stopped on an error)."""

    def __init__(
        self,
        target: IO[bytes],
        on_done: Callable[[Digest], None],
        on_close: Callable[[], None] = lambda: None,
    ) -> None:
        self._target = target
        self._digest: Digest | None = None
        self._on_done = on_done
        self._on_close = on_close

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        return self._target.write(data)

    def digested(self, sha256: str, size: int) -> None:
        self._digest = Digest(sha256, size)

    def __exit__(self, exc_type: object, *rest: object) -> None:
        try:
            if exc_type is None and self._digest is not None:
                self._on_done(self._digest)
        finally:
            self._on_close()
            self.close()


class _Spooling:
    """A sink that spools each file of the new version to learn its hash, then appends it to
    the tree archive (none for a spliced delta) and, when carried, its content to the delta
    blob; the file list goes to `files` (on disk). A spliced delta carries every file the
    base does not hold at the same path with the same content; a tree-archive delta every
    content the base lacks anywhere (module docstring)."""

    def __init__(
        self,
        spool_dir: Path,
        base: _BaseTree,
        tree: TreeArchive | None,
        blob: DeltaBlobWriter,
        files: FileList,
    ) -> None:
        self._spool_dir = spool_dir
        self._base = base
        self._tree = tree
        self._blob = blob
        self.files = files
        self.changed = 0
        self.added = 0
        self.carried = 0

    def directory(self, path: str) -> None:
        pass

    def open_file(self, path: str) -> IO[bytes]:
        spool = SpooledTemporaryFile(max_size=SPOOL_IN_MEMORY, dir=str(self._spool_dir))  # noqa: SIM115

        def done(digest: Digest) -> None:
            self._add(path, spool, digest.sha256, digest.size)

        return cast(IO[bytes], _Catcher(cast(IO[bytes], spool), done, spool.close))

    def _add(self, path: str, spool: SpooledTemporaryFile[bytes], sha256: str, size: int) -> None:
        self.files.append(path, size, sha256)
        before = self._base.paths.get(path)
        if before is None:
            self.added += 1
        elif before != sha256:
            self.changed += 1
        if self._tree is None:
            carry = before != sha256
        else:
            spool.seek(0)
            self._tree.add_file(path, size, read_chunks(spool))
            carry = sha256 not in self._base.contents
        if carry:
            self.carried += 1
            spool.seek(0)
            self._blob.add_content(sha256, size, read_chunks(spool))
