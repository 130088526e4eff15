"""Rebuild a version carried as a delta into the archive the import publishes.

A delta item carries the file list of the new tree and the contents its base does not hold
(`mirror.transferset.delta`). A tree-archive delta is published as the tree archive of
that list (the base version's object in the bucket gives the contents the delta did not
carry), which must hash to the signed digest. A spliced delta is published as the base's
object edited (`mirror.airgap.spliced`), proved against the file list member by member;
its digest is learnt by the upload that reads it. A spliced delta whose recipe's base is
the base's object is published by replaying the recipe over that object
(`mirror.airgap.replayed`): its archive must hash to the signed digest.

Promises:
- `check_deltas` runs before anything is uploaded: every delta's base version is complete
  in the bucket (its per-version manifest and its object exist, and a spliced delta's base
  object is a tar.gz; unless the delta's own version is already there) with the tree the
  signed manifest names,
  and is not another item of the same set, and a recipe that will be replayed names an
  archive its base and its delta can make (`_require_recipe_size`); otherwise
  IntegrityError (exit 5) naming the base, the bucket and the remedy. It also refuses
  (TemporaryFailure, exit 75) a work directory without room for the largest rebuild.
- Every refusal of a delta this side cannot rebuild (its base missing, another version,
  damaged or holding another tree; a content neither carried nor in the base; a delta
  whose blob, file list or contents are wrong, or that does not rebuild to the signed
  archive) names one remedy, `carry_whole`: pack the
  refused set's versions again, whole (`mirror transfer pack --full --from-set N OUT`),
  and import that set. The import accepts it in its new sequence, whatever was published
  before (mirror.airgap.importer: a version already there with the same tree is there).
- A delta blob's parts are each checked against their signed sha256 before anything
  inside the blob is read, so a damaged part is named as such, not as a broken archive.
- `RebuiltArchive` is a readable stream of the rebuilt archive for the ordinary upload:
  nothing is read or fetched before its first `read` (a re-run whose object is already
  there costs nothing), then every carried content and every base content it keeps is
  checked against its sha256, the file list against the signed tree hash, and the archive
  against `DeltaEntry.archive_sha256`; any failure is IntegrityError naming the path, so
  the upload aborts and nothing is published. Memory does not grow with the site: contents
  are spooled to one file in the work directory, the file list to another (read from the
  blob entry by entry), the tables of contents and paths move to disk as they grow
  (`mirror.spill`), the archive is generated as it is read. Each base content is hashed
  once (by the archive check that reads the base).
  Disk holds the new tree's distinct contents; the base's object is read once, as it
  streams from the bucket (a zip base, whose directory is at its end, is fetched first).
  The work directory is removed on every path out; one left by a killed import (its
  process is gone) is removed by the next import of a delta into the same place.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable, Container, Iterator, Mapping
from pathlib import Path
from typing import IO, Any, Protocol, cast

from mirror.airgap import layout
from mirror.airgap.pipe import Pipe
from mirror.airgap.replayed import ReplayedRecipe, recipe_applies
from mirror.airgap.spliced import SPLICEABLE_FORMAT, SplicePlan, splice_base
from mirror.airgap.workdir import (
    FreeSpace,
    check_space,
    check_writable,
    locked_work_dir,
    remove_abandoned,
    remove_work_dir,
    work_root,
)
from mirror.archive import ArchiveLimits, Format, TreePaths, read_archive, read_archive_stream
from mirror.errors import (
    IntegrityError,
    MirrorError,
    OperationFailed,
)
from mirror.fsutil import disk_full, free_bytes, is_disk_full
from mirror.integrity import CHUNK_SIZE, Digest, HashingWriter, require_digest
from mirror.spill import FileList, SpillMap
from mirror.transferset.compression import require_reproducible
from mirror.transferset.delta import (
    DeltaContent,
    DeltaRecipePart,
    TreeArchive,
    TreeFile,
    archive_mtime,
    check_tree,
    read_chunks,
    read_delta_blob,
    read_file_list,
)
from mirror.transferset.format import Manifest, ManifestItem, parse_manifest
from mirror.transferset.reader import BlobReader, check_files, read_manifest_bytes, set_bytes

MAX_DEFLATE_RATIO = 1032  # deflate's longest match, 258 bytes, costs at least two bits

Bases = Mapping[tuple[str, str], layout.VersionManifest]
"""Base manifests by (domain, version), as `check_deltas` proved them."""


class Store(layout.Bucket, Protocol):
    """What a rebuild needs of mirror.airgap.s3.objectstore.ObjectStore."""

    @property
    def prefix(self) -> str: ...

    def open_stream(self, key: str) -> Iterator[bytes]: ...

    def head(self, key: str) -> dict[str, Any] | None: ...


# ---- before anything is uploaded ---------------------------------------------------------------


def carry_whole(sequence: int, site: str | None = None) -> str:
    """The remedy for a delta set this side cannot rebuild: its versions again, whole, in a
    new set (the connected side knows which versions set `sequence` carried). A set packed
    for a named site names it: with several sites the pack refuses to guess."""
    for_site = f"--site {site} " if site else ""
    return (
        f"run `mirror transfer pack {for_site}--full --from-set {sequence} OUT` on the "
        "connected side and import that set"
    )


@contextlib.contextmanager
def _remedy_named(sequence: int, site: str | None) -> Iterator[None]:
    """A refusal of what a delta's blob holds names the remedy (`carry_whole`)."""
    try:
        yield
    except IntegrityError as exc:
        if exc.hint is not None:
            raise
        raise IntegrityError(exc.message, hint=carry_whole(sequence, site)) from None


def check_deltas(
    store: Store,
    manifest: Manifest,
    *,
    work_dir: Path | None = None,
    free_space: FreeSpace = free_bytes,
) -> Bases:
    """Refuse a set whose deltas cannot be rebuilt here (module docstring). Returns each
    delta's base manifest by (domain, base version), for the rebuild: fetched once."""
    in_set = {(item.domain, item.version) for item in manifest.items}
    needed = 0
    bases: dict[tuple[str, str], layout.VersionManifest] = {}
    for item in manifest.items:
        if item.delta is None:
            continue
        if not item.delta.spliced:
            require_reproducible(item.delta.compression)
        base = base_manifest(store, item, manifest.sequence, in_set, site=manifest.site)
        bases[item.domain, item.delta.base_version] = base
        if layout.read_version_manifest(store, item.domain, item.version) is None:
            remedy = carry_whole(manifest.sequence, manifest.site)
            _require_base_object(store, item, base, remedy)
            _require_spliceable(store, item, base, remedy)
            _require_recipe_size(item, base, remedy)
        needed = max(needed, (item.delta.archive_size or item.size) + base.size)
    if needed:
        root = work_root(work_dir)
        check_writable(root)
        remove_abandoned(root)
        check_space(root, needed, free_space)
    return bases


def base_manifest(
    store: Store,
    item: ManifestItem,
    sequence: int,
    in_set: set[tuple[str, str]] | None = None,
    *,
    site: str | None = None,
) -> layout.VersionManifest:
    """The per-version manifest of the delta item (of set `sequence` for `site`)'s base,
    proven to be the signed base."""
    assert item.delta is not None
    base_version = item.delta.base_version
    remedy = carry_whole(sequence, site)
    if in_set is not None and (item.domain, base_version) in in_set:
        raise IntegrityError(
            f"{item.label} is a delta against {item.domain} {base_version} of the same set; "
            "refused (a delta's base must already be in the bucket)",
            hint=remedy,
        )
    base = layout.read_version_manifest(store, item.domain, base_version)
    where = f"{store.bucket}/{store.prefix}" if store.prefix else store.bucket
    if base is None:
        raise IntegrityError(
            f"{item.label} is a delta against {item.domain} {base_version}, which is not in "
            f"{where}; nothing was published",
            hint=remedy,
        )
    if base.tree_sha256 != item.delta.base_tree_sha256:
        raise IntegrityError(
            f"{item.label}: wrong base: {item.domain} {base_version} in {where} holds tree "
            f"{base.tree_sha256[:12]}, the delta was made against tree "
            f"{item.delta.base_tree_sha256[:12]}; nothing was published",
            hint=remedy,
        )
    return base


def _require_base_object(
    store: Store, item: ManifestItem, base: layout.VersionManifest, remedy: str
) -> None:
    """The base's bundle object is there (its manifest alone does not make a base)."""
    assert item.delta is not None
    if store.head(base.object) is None:
        raise IntegrityError(
            f"{item.label} is a delta against {item.domain} {item.delta.base_version}, whose "
            f"object {store.bucket}/{base.object} is missing; nothing was published",
            hint=remedy,
        )


def _require_spliceable(
    store: Store, item: ManifestItem, base: layout.VersionManifest, remedy: str
) -> None:
    """A spliced delta edits its base's object: only a tar.gz one can be edited."""
    assert item.delta is not None
    if item.delta.spliced and base.archive_format != SPLICEABLE_FORMAT:
        raise IntegrityError(
            f"{item.label} is spliced from {item.domain} {item.delta.base_version}, whose "
            f"object {store.bucket}/{base.object} is {base.archive_format}, not "
            f"{SPLICEABLE_FORMAT}; nothing was published",
            hint=remedy,
        )


def _require_recipe_size(item: ManifestItem, base: layout.VersionManifest, remedy: str) -> None:
    """A replayed recipe's signed size is the upload's known size (its parts are cut from
    it, each a buffer): it cannot pass its base's bytes (copied forward, once at most) plus
    its literals, which the delta blob carries deflated (at most `MAX_DEFLATE_RATIO`:1)."""
    recipe = item.delta.recipe if item.delta is not None else None
    if recipe is None or not recipe_applies(item, base):
        return
    if recipe.size > base.size + item.size * MAX_DEFLATE_RATIO:
        raise IntegrityError(
            f"{item.label}: its recipe names an archive of {recipe.size} bytes, more than its "
            f"base ({base.size} bytes) and the literals its delta carries can make; nothing "
            "was published",
            hint=remedy,
        )


# ---- the upload's source -----------------------------------------------------------------------


def import_bytes(set_dir: Path) -> int | None:
    """The bytes an import of `set_dir` counts, for a progress total only (the manifest is
    not verified here): the set's files, each delta blob counted as the archive rebuilt
    from it. None when unreadable, or when a spliced delta's archive (its size learnt as it
    is written) makes the total unknown."""
    total = set_bytes(set_dir)
    if total is None:
        return None
    try:
        manifest = parse_manifest(read_manifest_bytes(set_dir))
    except MirrorError:
        return total
    for item in manifest.items:
        if item.delta is not None:
            if item.published_size is None:
                return None
            total += item.published_size - item.size
    return total


def read_back(store: Store, key: str, size: int) -> tuple[str, Digest]:
    """The tree and digest of the tar.gz object at `key` (of `size` bytes), read once (as a
    rebuild reads its base): an object in place is what its identity metadata claims only
    once its bytes say so. IntegrityError when it is no safe archive."""
    source = _HashingStream(store.open_stream(key))
    where = f"{store.bucket}/{key}"
    stream = cast(IO[bytes], source)
    report = read_archive_stream(stream, "tar.gz", size, None, ArchiveLimits(), name=where)
    source.drain()
    return report.tree_sha256, source.digest


def open_published(
    set_dir: Path,
    item: ManifestItem,
    store: Store,
    *,
    sequence: int,
    site: str | None = None,
    work_dir: Path | None = None,
    bases: Bases | None = None,
) -> BlobReader | RebuiltArchive:
    """What the import uploads for `item` (of set `sequence`): its blob, or (a delta) the
    rebuilt archive."""
    if item.delta is None:
        return BlobReader(set_dir, item, check_parts=False)  # the upload hashes the whole
    base = (bases or {}).get((item.domain, item.delta.base_version))
    return RebuiltArchive(
        set_dir, item, store, sequence=sequence, site=site, work_dir=work_dir, base=base
    )


def manifest_fields(item: ManifestItem) -> dict[str, Any]:
    """The extra fields of a per-version manifest for a version carried as a delta."""
    if item.delta is None:
        return {}
    fields = {"delta_base": item.delta.base_version, "delta_sha256": item.sha256}
    if item.provenance is not None:  # the statement is about the bundle the delta was made from
        fields["provenance_subject"] = item.provenance.subject_sha256
    return fields


class RebuiltArchive:
    """The tree archive of a delta item of set `sequence` as a readable stream (module
    docstring)."""

    def __init__(
        self,
        set_dir: Path,
        item: ManifestItem,
        store: Store,
        *,
        sequence: int,
        site: str | None = None,
        work_dir: Path | None = None,
        limits: ArchiveLimits | None = None,
        base: layout.VersionManifest | None = None,
    ) -> None:
        assert item.delta is not None
        self._base = base
        self.set_dir = set_dir
        self.item = item
        self.store = store
        self.sequence = sequence
        self.site = site
        self.root = work_root(work_dir)
        self.limits = limits or ArchiveLimits()
        self.work: Path | None = None
        self._lock: int | None = None
        self._contents: Contents | None = None
        self._files: FileList | None = None
        self._listed = TreePaths(self.limits)  # the list's paths, beside which a splice writes
        self._pipe: Pipe | None = None
        self._replayed: ReplayedRecipe | None = None
        self._buffer = bytearray()
        self._done = False
        self._failed: BaseException | None = None

    def __enter__(self) -> RebuiltArchive:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._pipe is not None:
            self._pipe.close()
            self._pipe = None
        if self._contents is not None:
            self._contents.close()
            self._contents = None
        if self._replayed is not None:
            self._replayed.close()
            self._replayed = None
        if self._files is not None:
            self._files.close()
            self._files = None
        self._listed.close()
        if self.work is not None:
            remove_work_dir(self.work)
            self.work = None
        if self._lock is not None:
            os.close(self._lock)
            self._lock = None

    def read(self, size: int = -1, /) -> bytes:
        """Up to `size` bytes of the archive (b"" at its end); a refusal is raised again by
        every later call, so no reader can take what follows it for the end."""
        if self._failed is not None:
            raise self._failed
        try:
            return self._read(CHUNK_SIZE if size is None or size < 0 else size)
        except BaseException as exc:
            self._failed = exc
            raise

    def _read(self, want: int) -> bytes:
        if self._pipe is None and not self._done:
            files = self._prepare()
            self._pipe = Pipe(lambda put: self._generate(files, put), name="rebuild")
        while len(self._buffer) < want and self._pipe is not None:
            piece = self._pipe.get()
            if piece is None:
                self._pipe.close()
                self._pipe = None
                self._done = True
                break
            if not self._buffer and len(piece) <= want:
                return piece
            self._buffer += piece
        with memoryview(self._buffer) as view:
            data = bytes(view[:want])
        del self._buffer[:want]
        return data

    # -- preparation: every content the archive needs, checked, in the work directory --------

    def _prepare(self) -> FileList:
        try:
            self.work, self._lock = locked_work_dir(self.root)
            self._contents = Contents(self.work / "contents")
            self._files = FileList(str(self.work))
            assert self.item.delta is not None
            if self.item.delta.recipe is not None and self._base is None:
                self._base = base_manifest(self.store, self.item, self.sequence, site=self.site)
            if recipe_applies(self.item, self._base):
                with _remedy_named(self.sequence, self.site):
                    self._replayed = ReplayedRecipe.read(
                        self.set_dir, self.item, self.work, self._refused
                    )
                return self._files
            self._spool_delta(self._files)
            if not self.item.delta.spliced:
                self._listed.close()  # only a splice checks paths beside the list's
                self._take_missing(self._files)
        except OSError as exc:
            if is_disk_full(exc):
                raise disk_full(self.root, None, "nothing was published") from None
            raise OperationFailed(
                f"cannot rebuild {self.item.label} in {self.root}: {exc.strerror or exc}"
            ) from None
        return self._files

    def _take_missing(self, files: FileList) -> None:
        """The contents the delta did not carry, from the base; refused when one is in
        neither."""
        assert self._contents is not None
        if any(sha256 not in self._contents for _, _, sha256 in files):
            with SpillMap() as needed:
                for _, _, sha256 in files:
                    needed.add(sha256)
                self._take_from_base(needed)
        for path, _, sha256 in files:
            if sha256 not in self._contents:
                raise self._refused(
                    f"{path}: its content {sha256[:12]} is neither in the "
                    f"delta nor in the base {self._base_label}"
                )

    def _refused(self, what: str) -> IntegrityError:
        """A refusal of this delta (not of the medium): carrying the version whole mends it."""
        return IntegrityError(
            f"{self.item.label}: {what}; nothing was published",
            hint=carry_whole(self.sequence, self.site),
        )

    @property
    def _base_label(self) -> str:
        assert self.item.delta is not None
        return f"{self.item.domain} {self.item.delta.base_version}"

    def _spool_delta(self, files: FileList) -> None:
        """The carried contents, spooled and checked, and the file list (into `files`),
        checked against the signed tree. Parts first: a part the medium damaged is named
        as such."""
        check_files(self.set_dir, [(p.name, p.size, p.sha256) for p in self.item.parts])
        with SpillMap() as carried:
            with _remedy_named(self.sequence, self.site):
                self._read_delta(carried, files)
            with SpillMap() as sizes:
                for _, length, sha256 in files:
                    sizes[sha256] = str(length)
                for sha256, size in carried.sorted_items():
                    listed = sizes.get(sha256)
                    if listed is None:
                        raise self._refused(
                            f"the delta carries content {sha256[:12]}, which no file uses"
                        )
                    if listed != size:
                        raise self._refused(
                            f"content {sha256[:12]} holds {size} bytes, the file list says {listed}"
                        )

    def _read_delta(self, carried: SpillMap, files: FileList) -> None:
        label = self.item.label
        listed = False
        with BlobReader(self.set_dir, self.item) as blob:
            for member in read_delta_blob(cast(IO[bytes], blob), label=label):
                if isinstance(member, DeltaContent):
                    self._spool(member.sha256, member.size, member.stream, "the delta")
                    carried[member.sha256] = str(member.size)
                elif isinstance(member, DeltaRecipePart):
                    for _ in read_chunks(member.stream):
                        pass  # not replayed: this base object is not the recipe's
                else:
                    listed = True
                    entries = read_file_list(member.stream, label=label, paths=self._listed)
                    files.extend((e.path, e.size, e.sha256) for e in entries)
            while blob.read(CHUNK_SIZE):
                pass  # the blob's last part and its whole sha256 are checked at its end
        assert listed  # read_delta_blob refuses a blob without its list
        check_tree((TreeFile(p, s, h) for p, s, h in files), self.item.tree_sha256, label=label)

    def _spool(self, sha256: str, size: int, stream: IO[bytes], source: str) -> None:
        assert self._contents is not None
        with self._contents.adding() as content:
            for chunk in read_chunks(stream):
                content.write(chunk)
            content.finish({sha256})
        self._require(f"content {sha256[:12]} from {source}", content.result, sha256, size)

    def _require(
        self, what: str, actual: Digest | str, sha256: str, size: int | None = None
    ) -> None:
        """mirror.integrity's one digest check, refused as this delta (carry it whole)."""
        try:
            require_digest(what, actual, sha256, size)
        except IntegrityError as exc:
            raise self._refused(exc.message) from None

    def _take_from_base(self, needed: Container[str]) -> None:
        """The contents the delta did not carry, from the base's object: a tar archive is
        read once, as it streams from the bucket (each kept content is checked against its
        sha256, the tree against the signed one, the whole against the base's manifest); a
        zip (its directory is at its end) is fetched to the work directory first."""
        assert self.work is not None and self.item.delta is not None
        base = self._base or base_manifest(self.store, self.item, self.sequence, site=self.site)
        assert self._contents is not None
        sink = _NeededContents(self._contents, needed)
        source = _HashingStream(self.store.open_stream(base.object))
        where = f"{self.store.bucket}/{base.object}"
        try:
            if base.archive_format == "zip":
                path = self.work / "base-archive"
                with open(path, "wb") as out:
                    source.copy_to(out)
                report = read_archive(path, sink, self.limits)
                path.unlink()
            else:
                fmt = cast(Format, base.archive_format)
                stream = cast(IO[bytes], source)
                report = read_archive_stream(stream, fmt, base.size, sink, self.limits, name=where)
                source.drain()
        except IntegrityError as exc:
            source.drain()
            if source.matches(base.sha256, base.size):
                raise self._refused(
                    f"the base {self._base_label} ({where}): {exc.message}"
                ) from None
            report = None
        if not source.matches(base.sha256, base.size):
            raise self._refused(
                f"{where} (the base {self._base_label}) does not match its manifest (damaged "
                "or replaced; `mirror chart check` finds such versions)"
            )
        assert report is not None
        if report.tree_sha256 != self.item.delta.base_tree_sha256:
            raise self._refused(
                f"{where} holds tree {report.tree_sha256[:12]}, not "
                f"the base tree {self.item.delta.base_tree_sha256[:12]}"
            )

    # -- generation: the archive in file-list order, as it is read ----------------------------

    def _generate(self, files: FileList, put: Callable[[bytes], None]) -> None:
        assert self._contents is not None and self.item.delta is not None
        self._contents.flush()
        if self._replayed is not None:
            assert self._base is not None  # read with it (_prepare)
            self._replayed.generate(self.store, self._base, put, self._refused)
            return
        if self.item.delta.spliced:
            self._splice(files, put)
            return
        archive = TreeArchive(
            put,
            mtime=archive_mtime(self.item.exported_at),
            compression=self.item.delta.compression,
        )
        for path, size, sha256 in files:
            archive.add_file(path, size, self._contents.chunks(sha256))
        archive.close()
        assert self.item.delta.archive_sha256 is not None  # a tree-archive delta signs it
        self._require("the rebuilt archive", archive.sha256, self.item.delta.archive_sha256)

    def _splice(self, files: FileList, put: Callable[[bytes], None]) -> None:
        """The base's object edited (mirror.airgap.spliced), every member proved as it
        passes; its digest is learnt by the upload that reads it."""
        assert self._contents is not None and self.item.delta is not None
        assert self.item.delta.compression is not None  # a spliced delta names it
        base = self._base or base_manifest(self.store, self.item, self.sequence, site=self.site)
        with SplicePlan(files, self._contents) as plan:
            try:
                splice_base(
                    self.store,
                    base,
                    plan,
                    put,
                    mtime=archive_mtime(self.item.exported_at),
                    level=self.item.delta.compression.level,
                    listed=self._listed,
                )
            except IntegrityError as exc:
                self._take_from_base(frozenset())  # a damaged or other base, named as such
                raise self._refused(f"{exc.message} (the base {self._base_label})") from None


class _HashingStream:
    """A readable stream over an object's chunks that hashes and counts what passes."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self._chunks = chunks
        self._buffer = memoryview(b"")
        self._hashing = HashingWriter()

    def read(self, size: int = -1, /) -> bytes:
        while not self._buffer:
            chunk = next(self._chunks, None)
            if chunk is None:
                return b""
            self._hashing.write(chunk)
            self._buffer = memoryview(chunk)
        if size is None or size < 0:
            size = len(self._buffer)
        data, self._buffer = self._buffer[:size], self._buffer[size:]
        return bytes(data)

    def copy_to(self, out: IO[bytes]) -> None:
        while chunk := self.read(CHUNK_SIZE):
            out.write(chunk)

    def drain(self) -> None:
        while self.read(CHUNK_SIZE):
            pass

    def matches(self, sha256: str, size: int) -> bool:
        return self._hashing.result == Digest(sha256, size)

    @property
    def digest(self) -> Digest:
        return self._hashing.result


class Contents:
    """The contents a rebuild keeps, once each, appended to one file of the work directory
    (one file, not one per content: a site's thousands of pages cost no inodes or renames);
    also the contents a pack's splice inserts (`mirror.outbound.recipe`).
    A content that is not kept is cut off again at once, so the file holds only kept ones."""

    def __init__(self, path: Path | None = None, *, directory: Path | None = None) -> None:
        """In the file `path`, or in a nameless temp file in `directory`: a process killed
        leaves nothing there."""
        if path is not None:
            self.handle: IO[bytes] = open(path, "w+b")  # noqa: SIM115 (closed in close)
        else:
            self.handle = tempfile.TemporaryFile(dir=directory)  # noqa: SIM115 (the same)
        self.where = SpillMap()  # sha256 -> "offset size"

    def __enter__(self) -> Contents:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __contains__(self, sha256: str) -> bool:
        return sha256 in self.where

    def adding(self, *, hashing: bool = True) -> _Adding:
        return _Adding(self, hashing=hashing)

    def flush(self) -> None:
        self.handle.flush()

    def chunks(self, sha256: str) -> Iterator[bytes]:
        where = self.where.get(sha256)
        assert where is not None
        offset, remaining = (int(n) for n in where.split())
        fd = self.handle.fileno()
        while remaining > 0:
            chunk = os.pread(fd, min(CHUNK_SIZE, remaining), offset)
            if not chunk:
                raise OperationFailed(f"the rebuild's work file {self.handle.name} was truncated")
            offset += len(chunk)
            remaining -= len(chunk)
            yield chunk

    def close(self) -> None:
        self.handle.close()
        self.where.close()


class _Adding:
    """One content being appended: hashed as written (unless `hashing` is off: the caller
    learns its digest elsewhere and hands it to `finish`); `finish(wanted)` keeps it when
    its sha256 is wanted and not yet kept, else cuts it off. Leaving early cuts it off too."""

    def __init__(self, contents: Contents, *, hashing: bool = True) -> None:
        self.contents = contents
        self.start = contents.handle.seek(0, os.SEEK_END)
        self.written = HashingWriter(contents.handle) if hashing else None
        self.size = 0
        self.kept = False

    def write(self, data: bytes) -> int:
        if self.written is not None:
            return self.written.write(data)
        self.size += len(data)
        return self.contents.handle.write(data)

    @property
    def result(self) -> Digest:
        assert self.written is not None
        return self.written.result

    def finish(self, wanted: Container[str], digest: Digest | None = None) -> None:
        known = digest or self.result
        sha256, size = known.sha256, known.size
        if sha256 in wanted and sha256 not in self.contents:
            self.contents.where[sha256] = f"{self.start} {size}"
            self.kept = True

    def __enter__(self) -> _Adding:
        return self

    def __exit__(self, *exc: object) -> None:
        if not self.kept:
            self.contents.handle.seek(self.start)
            self.contents.handle.truncate()


class _NeededContents:
    """An archive sink keeping, once each, the contents a rebuild still needs (by sha256)."""

    def __init__(self, contents: Contents, needed: Container[str]) -> None:
        self.contents = contents
        self.needed = needed

    def directory(self, path: str) -> None:
        return None

    def open_file(self, path: str) -> IO[bytes]:
        return cast(IO[bytes], _BaseFile(self.contents.adding(hashing=False), self.needed))


class _BaseFile:
    """A base archive's file as the sink sees it: kept at its end when it is needed (its
    digest is the one the archive check computed: `archive.FileSink`)."""

    def __init__(self, adding: _Adding, needed: Container[str]) -> None:
        self.adding = adding
        self.needed = needed

    def write(self, data: bytes) -> int:
        return self.adding.write(data)

    def digested(self, sha256: str, size: int) -> None:
        if size != self.adding.size:
            raise OperationFailed(f"the rebuild kept {self.adding.size} bytes of {size}")
        self.adding.finish(self.needed, Digest(sha256, size))

    def __enter__(self) -> _BaseFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.adding.__exit__(*exc)
