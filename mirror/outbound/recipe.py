"""The pack's side of a spliced delta: the archive made here, recorded as its recipe.

The pack holds the base's bundle, which is the base's object in the bucket when the base was
carried whole. So it splices that bundle itself, with the import's own plan
(`mirror.airgap.spliced.SplicePlan`: the same file list, the same carried contents, the same
decisions) and the pinned libdeflate, and records the archive as a recipe
(`transferset/recipe.py`) in the delta blob; the manifest signs the archive's digest. An
import whose base object is that bundle replays it instead of splicing.

Promises:
- `make_recipe` reads the base's bundle once, hashing it: a bundle that is not the bytes the
  index records is IntegrityError (the store is inconsistent with its index), and no recipe
  names it. Kept files are not hashed again: the bundle's digest proves them, and the
  carried contents were hashed as they were taken (`mirror.outbound.carried`).
- A base the splice refuses (a link or a device in it) gets no recipe (None, logged): the
  import then refuses or splices it as before, with the remedy it names. Nor does an
  archive of which more than `MAX_LITERAL_SHARE` is not the base's bytes: the recipe would
  carry most of it again, where the splice needs only the changed files (a small site, or
  most of it changed).
- Memory is the splice's: the literals and segments go to nameless temp files under the
  store's tmp dir, as the contents do.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

from mirror.airgap.rebuild import Contents
from mirror.airgap.spliced import SplicePlan
from mirror.errors import IntegrityError
from mirror.integrity import Digest, HashingWriter, mismatch
from mirror.spill import FileList
from mirror.transferset.delta import DeltaBlobWriter, read_chunks
from mirror.transferset.format import SpliceRecipe
from mirror.transferset.recipe import RecipeWriter
from mirror.transferset.splice import splice_tree

log = logging.getLogger(__name__)
MAX_LITERAL_SHARE = 0.1


class CarriedSpool:
    """The delta blob's writer, keeping each carried content in `contents` as it passes
    (the splice inserts them)."""

    def __init__(self, blob: DeltaBlobWriter, contents: Contents) -> None:
        self._blob = blob
        self.contents = contents

    def add_content(self, sha256: str, size: int, chunks: Iterable[bytes]) -> None:
        """Hashed already: `carried.take_contents` hands on only contents it proved."""
        with self.contents.adding(hashing=False) as adding:

            def kept() -> Iterator[bytes]:
                for chunk in chunks:
                    adding.write(chunk)
                    yield chunk

            self._blob.add_content(sha256, size, kept())
            if adding.size == size:
                adding.finish({sha256}, Digest(sha256, size))


def make_recipe(
    bundle: Path,
    bundle_sha256: str,
    files: FileList,
    contents: Contents,
    blob: DeltaBlobWriter,
    *,
    mtime: int,
    level: int,
    label: str,
    spool_dir: Path,
) -> SpliceRecipe | None:
    """The recipe of the spliced archive of `bundle` (the base) under the plan of `files`
    and `contents`, added to `blob`; its signed entry (module docstring)."""
    contents.flush()
    read = HashingWriter()

    def base() -> Iterator[bytes]:
        with bundle.open("rb") as handle:
            for chunk in read_chunks(handle):
                read.write(chunk)
                yield chunk

    with (
        tempfile.TemporaryFile(dir=spool_dir) as segments,
        tempfile.TemporaryFile(dir=spool_dir) as literals,
        SplicePlan(files, contents) as plan,
    ):
        writer = RecipeWriter(segments, literals)
        source = base()
        try:
            splice_tree(
                source,
                plan,
                writer.write,
                mtime=mtime,
                level=level,
                label=f"the base of {label}",
                copied=writer.copied,
                prove_kept=False,
            )
        except IntegrityError as exc:
            log.warning("%s: no splice recipe (%s)", label, exc.message)
            return None
        for _ in source:
            pass
        if read.result.sha256 != bundle_sha256:
            raise mismatch(
                f"{label}: the base's stored bundle",
                read.result.sha256,
                bundle_sha256,
                hint="the store is inconsistent with its index: run `mirror store verify`",
            )
        archive = writer.finish()
        if literals.tell() > archive.size * MAX_LITERAL_SHARE:
            log.info(
                "%s: no splice recipe (%d of its archive's %d bytes are not the base's)",
                label,
                literals.tell(),
                archive.size,
            )
            return None
        blob.add_recipe(segments, literals)
    return SpliceRecipe(
        base_sha256=bundle_sha256,
        base_size=read.size,
        sha256=archive.sha256,
        size=archive.size,
    )
