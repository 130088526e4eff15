"""The pack's side of a spliced delta: the archive made here, recorded as its recipe.

A spliced delta's import edits its base's object in the bucket (`mirror.airgap.publish`).
The splice is deterministic (the pinned libdeflate, the padding), so the pack can make the
same archive when it knows the base object's bytes: it splices them itself, with the
import's own plan (`mirror.airgap.publish.SplicePlan`: the same file list, carried contents
and decisions), records the archive as a recipe (`transferset/delta/_recipe.py`) and signs its
digest. An import whose base object is those bytes replays the recipe instead of splicing.

The base object's bytes: the object the site published of the base, as its receipt said
(`Delivery.published_sha256`, recorded by `transfer ack`): the base's bundle when that is
its digest, else the archive of the base's kept recipe when that is (replayed over its own
base's object, down to a bundle), else none, and no recipe (the pack holds no such bytes;
the import splices). A base no receipt spoke of (a one-way site, which sends none; a set
packed but not yet acknowledged under `delta_bases = "packed"`; a delivery recorded before
receipts were) keeps the older rule: the kept recipe's archive if there is one, else the
bundle. Where that guess is wrong it costs only speed: the import splices, proving every
file.

Every recipe made by a real pack is kept beside the new version's bundle
(`BlobStore.recipe_path`, removed with the bundle, and by a real pack that sends the
version whole: `forget`). When its chain of kept recipes down to a file is `KEEP_WHOLE_AT`
long, the object it makes is kept whole too (`BlobStore.object_path`, removed with them),
and later chains start there: none grows long, and none needs a bundle older than that,
which retention removes in time. A kept recipe is one file: a line of canonical JSON
``{"base_bundle", "base_sha256", "base_size", "format": 1, "literals", "segments",
"sha256", "size"}`` (the two members' lengths), then the segments, then the literals.

Promises:
- `make_recipe` reads the base object's bytes once, hashing them: the only read of the
  base's bundle in a delta pack (its files come from its kept digests). Kept files are not
  hashed again: the base's digest proves them, and the carried contents were hashed as
  they were taken (`mirror.outbound.carried`). A kept recipe whose archive is not the digest
  it names is removed (logged) and the bundle taken instead; a bundle that is not the bytes
  its name says gets no recipe (logged, naming `mirror store verify`): the delta does not
  need one.
- A base the splice refuses (a link or a device in it) gets no recipe (None, logged), nor
  does a splice whose archive the import's would refuse: the new tree's paths are checked
  beside every directory it keeps or writes, as the import checks them (`ArchiveLimits()`:
  a directory kept where the new tree has a file, or a case twin of one, is an archive
  `mirror.archive` refuses). The import then refuses or splices as before, with the
  remedy it names; a replay would have published that archive unchecked. A recipe of
  which more than `MAX_LITERAL_SHARE` is not the base's bytes is kept but not carried: it
  would carry most of the archive again, where the splice needs only the changed files.
- A kept recipe that cannot be read or written is logged and skipped, never failing a pack
  (whatever a broken disk leaves in it: a pack that failed on it would fail every time).
- Memory is the splice's: the literals and segments go to nameless temp files under the
  store's tmp dir, as the contents do; a chain of kept recipes is replayed as a stream.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import stat
import tempfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from mirror.archive import ArchiveLimits, TreePaths
from mirror.archive.spill import FileList
from mirror.errors import IntegrityError
from mirror.integrity import Digest, HashingWriter, tee
from mirror.store.blobs import BlobStore
from mirror.transferset.delta import (
    Contents,
    DeltaBlobWriter,
    RecipeWriter,
    Segments,
    SplicePlan,
    read_chunks,
    read_segments,
    replay,
    splice_tree,
)
from mirror.transferset.format import SpliceRecipe, canonical_json

log = logging.getLogger(__name__)
MAX_LITERAL_SHARE = 0.1
MAX_CHAIN = 16
KEEP_WHOLE_AT = 8
FORMAT = 1


class CarriedSpool:
    """The delta blob's writer, keeping each carried content in `contents` as it passes
    (the splice inserts them)."""

    def __init__(self, blob: DeltaBlobWriter, contents: Contents) -> None:
        self._blob = blob
        self.contents = contents

    def add_content(self, sha256: str, size: int, chunks: Iterable[bytes]) -> None:
        """Hashed already: `carried.take_contents` hands on only contents it proved."""
        with self.contents.adding(hashing=False) as adding:
            self._blob.add_content(sha256, size, tee(chunks, adding.write))
            if adding.size == size:
                adding.finish({sha256}, Digest(sha256, size))


@dataclass(frozen=True)
class BaseObject:
    """The base object's bytes as the pack takes them to be: `chunks()` gives them, they
    must hash to `sha256`; `kept` when they are a kept recipe's archive, not a bundle;
    `depth`, how many kept recipes are replayed to give them (0: a file read)."""

    bundle_sha256: str
    sha256: str
    chunks: Callable[[], Iterator[bytes]]
    kept: bool
    depth: int = 0


@dataclass
class MadeRecipe:
    """A recipe made (its members in temp files), its manifest entry and the base object
    it was made over (the bundle, when a damaged kept base was forgotten)."""

    entry: SpliceRecipe
    segments: IO[bytes]
    literals: IO[bytes]
    base: BaseObject

    @property
    def worth_carrying(self) -> bool:
        return self.literals.seek(0, os.SEEK_END) <= self.entry.size * MAX_LITERAL_SHARE


def base_object(
    store: BlobStore, bundle_sha256: str, published: str | None = None
) -> BaseObject | None:
    """The base object of the version whose bundle is `bundle_sha256`, the site having
    published the object whose sha256 is `published` (None: unknown); module docstring."""
    if published == bundle_sha256:
        return _bundle(store, bundle_sha256)
    kept = _kept_object(store, bundle_sha256, MAX_CHAIN)
    if published is None:
        return kept or _bundle(store, bundle_sha256)
    if kept is not None and kept.sha256 == published:
        return kept
    log.info(
        "bundle %s: the site published %s, bytes this store does not hold; no recipe",
        bundle_sha256[:12],
        published[:12],
    )
    return None


@contextlib.contextmanager
def make_recipe(
    store: BlobStore,
    base: BaseObject,
    files: FileList,
    contents: Contents,
    *,
    mtime: int,
    level: int,
    label: str,
) -> Iterator[MadeRecipe | None]:
    """The recipe of the archive spliced from `base` under the plan of `files` and
    `contents` (module docstring); its temp files live as long as the context."""
    with (
        tempfile.TemporaryFile(dir=store.tmp_dir) as segments,
        tempfile.TemporaryFile(dir=store.tmp_dir) as literals,
    ):
        entry: SpliceRecipe | None = None
        try:
            entry = _splice(base, files, contents, segments, literals, mtime, level, label)
        except _OtherBytes as exc:
            if base.kept:
                log.warning("%s: the kept recipe of its base is damaged; removed", label)
                forget(store, base.bundle_sha256)
                for handle in (segments, literals):
                    handle.seek(0)
                    handle.truncate()
                base = _bundle(store, base.bundle_sha256)
                with contextlib.suppress(_OtherBytes):
                    entry = _splice(base, files, contents, segments, literals, mtime, level, label)
            if entry is None:
                log.warning(
                    "%s: no splice recipe: the base's stored bundle %s hashes to %s; "
                    "run `mirror store verify`",
                    label,
                    base.bundle_sha256[:12],
                    exc.sha256[:12],
                )
        yield None if entry is None else MadeRecipe(entry, segments, literals, base)


def keep(store: BlobStore, bundle_sha256: str, made: MadeRecipe) -> None:
    """Keep `made` beside the bundle of the version it makes (module docstring). The old
    whole object goes first: a recipe is never kept beside an object it does not make."""
    base = made.base
    target = store.recipe_path(bundle_sha256)
    temp = store.temp_path(f"recipe-{os.getpid()}-{bundle_sha256}")
    sizes = {name: handle.seek(0, os.SEEK_END) for name, handle in _members(made)}
    header = {**made.entry.model_dump(), "base_bundle": base.bundle_sha256, "format": FORMAT}
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(temp, "wb") as out:
            out.write(canonical_json({**header, **sizes}) + b"\n")
            for _, handle in _members(made):
                handle.seek(0)
                for chunk in read_chunks(handle):
                    out.write(chunk)
            out.flush()
            os.fsync(out.fileno())
        with contextlib.suppress(FileNotFoundError):
            store.object_path(bundle_sha256).unlink()  # another recipe's, if any
        os.replace(temp, target)
    except OSError as exc:
        log.warning("cannot keep the splice recipe of bundle %s: %s", bundle_sha256[:12], exc)
        with contextlib.suppress(OSError):
            temp.unlink()
        return
    if base.depth + 1 >= KEEP_WHOLE_AT:
        _keep_whole(store, bundle_sha256)


def _keep_whole(store: BlobStore, bundle_sha256: str) -> None:
    """The object the kept recipe of `bundle_sha256` makes, kept whole (replayed once, its
    digest checked): the next recipes' chains start here, so none grows past
    `KEEP_WHOLE_AT` and none depends on a bundle older than that (which retention removes)."""
    made = _kept_object(store, bundle_sha256, MAX_CHAIN)
    if made is None:
        return
    target = store.object_path(bundle_sha256)
    temp = store.temp_path(f"object-{os.getpid()}-{bundle_sha256}")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(temp, "wb") as out:
            written = HashingWriter(out)
            for chunk in made.chunks():
                written.write(chunk)
            out.flush()
            os.fsync(out.fileno())
        if written.result.sha256 != made.sha256:
            raise OSError(f"it hashes to {written.result.sha256[:12]}, not {made.sha256[:12]}")
        os.replace(temp, target)
    except (OSError, IntegrityError) as exc:
        log.warning("cannot keep the object of bundle %s whole: %s", bundle_sha256[:12], exc)
        with contextlib.suppress(OSError):
            temp.unlink()


def _members(made: MadeRecipe) -> list[tuple[str, IO[bytes]]]:
    return [("segments", made.segments), ("literals", made.literals)]


def _splice(
    base: BaseObject,
    files: FileList,
    contents: Contents,
    segments: IO[bytes],
    literals: IO[bytes],
    mtime: int,
    level: int,
    label: str,
) -> SpliceRecipe | None:
    """The recipe's entry; None when the splice refuses the base; _OtherBytes when the
    base's bytes are not its digest."""
    contents.flush()
    read = HashingWriter()
    writer = RecipeWriter(segments, literals)
    chunks = tee(base.chunks(), read.write)
    refused: IntegrityError | None = None
    try:
        with SplicePlan(files, contents) as plan, _listed(files) as listed:
            splice_tree(
                chunks,
                plan,
                writer.write,
                mtime=mtime,
                level=level,
                label=f"the base of {label}",
                listed=listed,
                copied=writer.copied,
                prove_kept=False,
            )
    except IntegrityError as exc:
        refused = exc
    _read_to_end(chunks, read, base)
    if refused is not None:
        log.warning("%s: no splice recipe (%s)", label, refused.message)
        return None
    archive = writer.finish()
    return SpliceRecipe(
        base_sha256=base.sha256, base_size=read.size, sha256=archive.sha256, size=archive.size
    )


def _read_to_end(chunks: Iterator[bytes], read: HashingWriter, base: BaseObject) -> None:
    """Read the rest of the base (`read` hashes it); _OtherBytes when its bytes are not
    its digest, whether or not the splice took them."""
    for _ in chunks:
        pass
    if read.result.sha256 != base.sha256:
        raise _OtherBytes(read.result.sha256)


@contextlib.contextmanager
def _listed(files: FileList) -> Iterator[TreePaths]:
    """The new tree's paths checked as the import checks its file list (`read_file_list`),
    for the splice to check the directories it keeps or writes beside them."""
    with contextlib.closing(TreePaths(ArchiveLimits())) as listed:
        for path, _, _ in files:
            listed.check(path)
        yield listed


def _bundle(store: BlobStore, bundle_sha256: str) -> BaseObject:
    path = store.open(bundle_sha256)
    return BaseObject(bundle_sha256, bundle_sha256, lambda: _file_chunks(path), kept=False)


def _file_chunks(path: Path) -> Iterator[bytes]:
    with path.open("rb") as handle:
        yield from read_chunks(handle)


def _kept_object(store: BlobStore, bundle_sha256: str, depth: int) -> BaseObject | None:
    """The archive of the kept recipe of the version whose bundle is `bundle_sha256`,
    replayed down to a bundle; None when there is none whole (or the chain is too long)."""
    path = store.recipe_path(bundle_sha256)
    kept = _read_kept(store, bundle_sha256)
    if kept is None:
        return None
    base_bundle, entry, checked, start = kept
    whole = store.object_path(bundle_sha256)
    if whole.is_file():  # kept whole: read, not replayed (its digest is checked as it is)
        return BaseObject(bundle_sha256, entry.sha256, lambda: _file_chunks(whole), kept=True)
    if entry.base_sha256 == base_bundle:
        base = _bundle(store, base_bundle) if store.has(base_bundle) else None
    else:
        base = _kept_object(store, base_bundle, depth - 1) if depth > 1 else None
    if base is None or base.sha256 != entry.base_sha256:
        return None

    def chunks() -> Iterator[bytes]:
        assert base is not None
        with path.open("rb") as literals:
            literals.seek(start)
            yield from replay(base.chunks(), checked, literals)

    return BaseObject(bundle_sha256, entry.sha256, chunks, kept=True, depth=base.depth + 1)


_UNUSABLE = (
    OSError,
    ValueError,
    KeyError,
    TypeError,
    OverflowError,
    RecursionError,
    IntegrityError,
)


def _read_kept(
    store: BlobStore, bundle_sha256: str
) -> tuple[str, SpliceRecipe, Segments, int] | None:
    """The kept recipe's base bundle, entry, checked segments and where its literals
    start; None when there is none, or (logged and removed) none whole and well-formed."""
    path = store.recipe_path(bundle_sha256)
    try:
        if not stat.S_ISREG(path.stat().st_mode):  # a FIFO would be waited on, forever
            raise ValueError("not a regular file")
        with path.open("rb") as handle:
            header = json.loads(handle.readline(64 * 1024))
            segments = handle.read(header["segments"])
        base_bundle = header["base_bundle"]
        store.recipe_path(base_bundle)  # a sha256's hex, or ValueError
        start = len(canonical_json(header)) + 1 + header["segments"]
        if header["format"] != FORMAT or path.stat().st_size != start + header["literals"]:
            raise ValueError("not a whole kept recipe")
        entry = SpliceRecipe(**{k: header[k] for k in SpliceRecipe.model_fields})
        checked = read_segments(
            segments,
            base_size=entry.base_size,
            literal_size=header["literals"],
            size=entry.size,
            label=str(path),
        )
    except FileNotFoundError:
        return None
    except _UNUSABLE as exc:
        log.warning("the kept splice recipe %s is unusable (%s); removed", path, exc)
        forget(store, bundle_sha256)
        return None
    return base_bundle, entry, checked, start


def forget(store: BlobStore, bundle_sha256: str) -> None:
    """No kept recipe for the version whose bundle is `bundle_sha256` (its object is taken
    to be that bundle)."""
    for kept in (store.recipe_path(bundle_sha256), store.object_path(bundle_sha256)):
        with contextlib.suppress(OSError):
            kept.unlink()


class _OtherBytes(Exception):
    """The base object's bytes hash to `sha256`, not to the digest they were taken for."""

    def __init__(self, sha256: str) -> None:
        super().__init__(sha256)
        self.sha256 = sha256
