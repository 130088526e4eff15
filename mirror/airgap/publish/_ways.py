"""The publishers, one per way `mirror.transferset.delta.publication` decides, and the
checks that run before anything is uploaded.

Promises:
- `check_deltas` runs before anything is uploaded: no delta is of a way this release no
  longer publishes (a tree archive: ConfigError, exit 2, naming the remedy); every
  delta's base version is complete in the bucket (its per-version manifest and its object
  exist, and its object is a tar.gz; unless the delta's own version is already there)
  with the tree the signed manifest names, and is not another item of the same set, and a
  recipe that will be replayed names an archive its base and its delta can make;
  otherwise IntegrityError (exit 5) naming the base, the bucket and the remedy
  (`carry_whole`). It also refuses (TemporaryFailure, exit 75) a work directory without
  room for the largest rebuild.
- `SplicePublisher`: the base's object edited (`SplicePlan`), streamed from the bucket on a
  thread of its own a few pieces ahead, every member proved as it passes, the base's bytes
  checked against its manifest once read and its tree (every file hashed as it passes)
  against the signed base tree, so a base whose object and manifest digest were both
  replaced by another version's is refused as such, not published over in silence; when
  the splice refuses anything the base is read once more to name the cause (a base
  damaged, replaced or holding another tree is refused as such). Its digest is learnt by the upload.
- `ReplayPublisher`: the recipe's segments (refused over `MAX_SEGMENTS_BYTES` before they
  are read) checked, its literals spooled; then one read of the base and byte copies. The
  base's bytes must be its manifest's, the archive the signed digest (checked as it
  passes, so a mismatch is refused as this delta, before the upload's own check).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import IO, cast

from mirror.airgap import layout
from mirror.airgap.publish._base import (
    Bases,
    HashingStream,
    Store,
    base_manifest,
    carry_whole,
    require_base_object,
)
from mirror.airgap.publish._pipe import Pipe
from mirror.airgap.publish._stream import FromDelta, Member, Published
from mirror.airgap.publish._whole import TreeChecked
from mirror.airgap.publish._workdir import (
    FreeSpace,
    check_space,
    check_writable,
    remove_abandoned,
    work_root,
)
from mirror.archive import read_archive_stream
from mirror.errors import ConfigError, IntegrityError, MirrorError
from mirror.fsutil import free_bytes
from mirror.integrity import Digest, HashingWriter, tee
from mirror.transferset.delta import (
    MAX_SEGMENTS_BYTES,
    RECIPE_SEGMENTS,
    DeltaRecipePart,
    Publication,
    Segments,
    SplicePlan,
    Way,
    archive_mtime,
    publication,
    read_chunks,
    read_segments,
    replay,
    splice_tree,
)
from mirror.transferset.format import Manifest, ManifestItem, parse_manifest
from mirror.transferset.reader import read_manifest_bytes, set_bytes

SPLICEABLE_FORMAT = "tar.gz"
MAX_DEFLATE_RATIO = 1032  # deflate's longest match, 258 bytes, costs at least two bits
_NOT_A_MATCH = (
    "does not match its manifest (damaged or replaced; `mirror chart check` finds such versions)"
)


class SplicePublisher(FromDelta):
    """The base's object edited under the delta's plan (module docstring)."""

    @staticmethod
    def admit(store: Store, item: ManifestItem, base: layout.VersionManifest, remedy: str) -> None:
        """A spliced delta edits its base's object: only a tar.gz one can be edited."""
        assert item.delta is not None
        if base.archive_format != SPLICEABLE_FORMAT:
            raise IntegrityError(
                f"{item.label} is spliced from {item.domain} {item.delta.base_version}, whose "
                f"object {store.bucket}/{base.object} is {base.archive_format}, not "
                f"{SPLICEABLE_FORMAT}; nothing was published",
                hint=remedy,
            )

    def generate(self, put: Callable[[bytes], None]) -> None:
        assert self.contents is not None and self.files is not None and self.item.delta
        assert self.item.delta.compression is not None  # a spliced delta names it
        self.contents.flush()
        with SplicePlan(self.files, self.contents) as plan:
            try:
                self._splice(plan, put, self.item.delta.compression.level)
            except IntegrityError as exc:
                self.check_base()  # a damaged or other base, named as such
                raise self.refused(f"{exc.message} (the base {self.base_label})") from None

    def check_base(self) -> None:
        """The base's object read once more when the splice refused: refused naming the base
        when it is damaged or replaced, not an archive `mirror.archive` accepts, or holds
        another tree than the signed base tree."""
        assert self.item.delta is not None
        base, name = self.base, f"{self.store.bucket}/{self.base.object}"
        source = HashingStream(self.store.open_stream(base.object))
        failure, report = "", None
        try:
            stream = cast(IO[bytes], source)
            report = read_archive_stream(stream, "tar.gz", base.size, None, self.limits, name=name)
        except IntegrityError as exc:
            failure = exc.message
        source.drain()
        if not source.matches(base.sha256, base.size):
            raise self.refused(f"{name} (the base {self.base_label}) {_NOT_A_MATCH}")
        if report is None:
            raise self.refused(f"the base {self.base_label} ({name}): {failure}")
        if report.tree_sha256 != self.item.delta.base_tree_sha256:
            raise self.refused(
                f"{name} holds tree {report.tree_sha256[:12]}, not "
                f"the base tree {self.item.delta.base_tree_sha256[:12]}"
            )

    def _splice(self, plan: SplicePlan, put: Callable[[bytes], None], level: int) -> None:
        """The base fetched and hashed on a thread of its own (`Pipe`) through the splice."""
        base, name = self.base, f"{self.store.bucket}/{self.base.object}"
        read = HashingWriter()

        def fetch(give: Callable[[bytes], None]) -> None:
            for chunk in self.store.open_stream(base.object):
                read.write(chunk)
                give(chunk)

        pipe = Pipe(fetch, name="base")
        try:
            source = iter(pipe.get, None)
            mtime = archive_mtime(self.item.exported_at)
            splice_tree(
                source,
                plan,
                put,
                mtime=mtime,
                level=level,
                label=name,
                listed=self.listed,
                base_tree=self.item.delta.base_tree_sha256 if self.item.delta else None,
            )
            for _ in source:
                pass
        finally:
            pipe.close()
        if read.result != Digest(base.sha256, base.size):
            raise IntegrityError(f"{name} {_NOT_A_MATCH}")


class ReplayPublisher(Published):
    """The pack's recipe replayed over the base's object (module docstring)."""

    _segments: Segments | None = None
    _literals: IO[bytes] | None = None

    @staticmethod
    def admit(store: Store, item: ManifestItem, base: layout.VersionManifest, remedy: str) -> None:
        """A replayed recipe's signed size is the upload's known size (its parts are cut from
        it, each a buffer): it cannot pass its base's bytes (copied forward, once at most)
        plus its literals, which the delta blob carries deflated (at most
        `MAX_DEFLATE_RATIO`:1)."""
        SplicePublisher.admit(store, item, base, remedy)
        recipe = item.delta.recipe if item.delta is not None else None
        assert recipe is not None
        if recipe.size > base.size + item.size * MAX_DEFLATE_RATIO:
            raise IntegrityError(
                f"{item.label}: its recipe names an archive of {recipe.size} bytes, more than "
                f"its base ({base.size} bytes) and the literals its delta carries can make; "
                "nothing was published",
                hint=remedy,
            )

    def prepare(self, work: Path) -> None:
        assert self.item.delta is not None and self.item.delta.recipe is not None
        recipe = self.item.delta.recipe
        self._literals = literals = open(work / "literals", "w+b")  # noqa: SIM115 (release)
        segments: list[bytes] = []
        self.read_blob(lambda member: self._take(member, segments, literals))
        size = literals.tell()
        literals.seek(0)
        try:
            self._segments = read_segments(
                segments[0] if segments else b"",
                base_size=recipe.base_size,
                literal_size=size,
                size=recipe.size,
                label="the delta blob",
            )
        except IntegrityError as exc:
            raise self.refused(exc.message) from None

    def _take(self, member: Member, segments: list[bytes], literals: IO[bytes]) -> bool:
        if not isinstance(member, DeltaRecipePart):
            return False
        if member.name == RECIPE_SEGMENTS:
            if member.size > MAX_SEGMENTS_BYTES:
                raise self.refused(f"its recipe's segments hold {member.size} bytes")
            segments.append(member.stream.read())
        else:
            for chunk in read_chunks(member.stream):
                literals.write(chunk)
        return True

    def release(self) -> None:
        if self._literals is not None:
            self._literals.close()
            self._literals = None

    def generate(self, put: Callable[[bytes], None]) -> None:
        assert self._segments is not None and self._literals is not None
        assert self.item.delta is not None and self.item.delta.recipe is not None
        base = self.base
        read, archive = HashingWriter(), HashingWriter()
        chunks = tee(self.store.open_stream(base.object), read.write)
        failed: IntegrityError | None = None
        try:
            for piece in replay(chunks, self._segments, self._literals):
                archive.write(piece)
                put(piece)
        except IntegrityError as exc:  # a base cut short is named as the base, below
            failed = exc
        for _ in chunks:
            pass
        if read.result != Digest(base.sha256, base.size):
            name = f"{self.store.bucket}/{base.object}"
            raise self.refused(f"{name} (the base {self.base_label}) {_NOT_A_MATCH}")
        if failed is not None:
            raise self.refused(f"the delta's recipe: {failed.message}")
        recipe = self.item.delta.recipe
        self.require(
            "the archive of the delta's recipe", archive.result, recipe.sha256, recipe.size
        )


Publisher = type[SplicePublisher] | type[ReplayPublisher]
PUBLISHERS: dict[Way, Publisher] = {
    Way.SPLICE: SplicePublisher,
    Way.REPLAY: ReplayPublisher,
}


def open_published(
    set_dir: Path,
    item: ManifestItem,
    store: Store,
    *,
    sequence: int,
    site: str | None = None,
    work_dir: Path | None = None,
    bases: Bases | None = None,
) -> TreeChecked | Published:
    """What the import uploads for `item` (of set `sequence`): its blob, its tree proved as
    it is read (`_whole`), or the archive of the way `publication` decides over the base
    `bases` holds (fetched when not given)."""
    if item.delta is None:
        return TreeChecked(set_dir, item, work_dir)  # the upload hashes the whole, this its tree
    base = (bases or {}).get((item.domain, item.delta.base_version))
    if base is None:
        base = base_manifest(store, item, sequence, site=site)
    publisher = PUBLISHERS[publication(item, base).way]
    return publisher(set_dir, item, store, base, sequence=sequence, site=site, work_dir=work_dir)


def expected(item: ManifestItem, bases: Bases | None) -> Publication:
    """What the object published for `item` must be (`publication` over its base)."""
    base = (bases or {}).get((item.domain, item.delta.base_version)) if item.delta else None
    return publication(item, base)


def check_deltas(
    store: Store,
    manifest: Manifest,
    *,
    work_dir: Path | None = None,
    free_space: FreeSpace = free_bytes,
) -> Bases:
    """Refuse a set whose deltas cannot be published here (module docstring). Returns each
    delta's base manifest by (domain, base version), for the publishers: fetched once."""
    in_set = {(item.domain, item.version) for item in manifest.items}
    remedy = carry_whole(manifest.sequence, manifest.site)
    needed = 0
    bases: dict[tuple[str, str], layout.VersionManifest] = {}
    for item in manifest.items:
        if item.delta is None:
            continue
        unbased = publication(item)
        if unbased.refused is not None:  # a way this release dropped (docs/delta.md)
            what = f"{item.label}: {unbased.refused}; nothing was published"
            raise ConfigError(what, hint=remedy)
        base = base_manifest(store, item, manifest.sequence, in_set, site=manifest.site)
        bases[item.domain, item.delta.base_version] = base
        if layout.read_version_manifest(store, item.domain, item.version) is None:
            require_base_object(store, item, base, remedy)
            PUBLISHERS[publication(item, base).way].admit(store, item, base, remedy)
        needed = max(needed, (item.published_size or item.size) + base.size)
    if needed:
        root = work_root(work_dir)
        check_writable(root)
        remove_abandoned(root)
        check_space(root, needed, free_space)
    return bases


def import_bytes(set_dir: Path) -> int | None:
    """The bytes an import of `set_dir` counts, for a progress total only (the manifest is
    not verified here): the set's files, each delta blob counted as the archive made from
    it. None when unreadable, or when an archive's size is learnt as it is written."""
    total = set_bytes(set_dir)
    if total is None:
        return None
    try:
        manifest = parse_manifest(read_manifest_bytes(set_dir))
    except MirrorError:
        return total
    for item in manifest.items:
        if item.published_size is None:
            return None
        total += item.published_size - item.size
    return total
