"""The import's side of a splice recipe: a spliced delta's archive replayed over its base.

The pack made the archive over the bytes it took the base's object to be, recorded it as a
recipe (`transferset/recipe.py`) and signed the base object's digest and the archive's
(`DeltaEntry.recipe`). Where the bucket's base version manifest names that base object, the
import replays the recipe: one read of the base and byte copies, no inflate, no file hashed;
the archive's signed digest proves the tree the pack proved.

Promises:
- `recipe_applies` is the one decision between a replay and a splice (`mirror.airgap.spliced`):
  the recipe's base sha256 and size are the base manifest's.
- `ReplayedRecipe.read` checks the blob's parts against their signed sha256 first (a part the
  medium damaged is named as such), then reads the recipe's segments (refused over
  `MAX_SEGMENTS_BYTES` before they are read) and checks them (`read_segments`), and spools
  its literals to the work directory; the blob's other members are read past, and its whole
  sha256 is checked at its end (`BlobReader`).
- `ReplayedRecipe.generate` gives the archive as it is made. The base's bytes must be the
  ones its manifest names, and the archive the signed digest (checked here as it passes, so
  a mismatch is refused as this delta, naming its remedy, before the upload's own check of
  the same digest); every refusal is `refuse(what)`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import IO, cast

from mirror.airgap import layout
from mirror.airgap.spliced import BaseObjects
from mirror.errors import IntegrityError
from mirror.integrity import CHUNK_SIZE, Digest, HashingWriter, require_digest, tee
from mirror.transferset.delta import RECIPE_SEGMENTS, DeltaRecipePart, read_chunks, read_delta_blob
from mirror.transferset.format import ManifestItem, SpliceRecipe
from mirror.transferset.reader import BlobReader, check_files
from mirror.transferset.recipe import MAX_SEGMENTS_BYTES, Segments, read_segments, replay

Refuse = Callable[[str], IntegrityError]


def recipe_applies(item: ManifestItem, base: layout.VersionManifest | None) -> bool:
    """Whether `item` is published by replaying its recipe over the object `base` (its base
    version's manifest) names."""
    recipe = item.delta.recipe if item.delta is not None else None
    return (
        recipe is not None
        and base is not None
        and (base.sha256, base.size) == (recipe.base_sha256, recipe.base_size)
    )


class ReplayedRecipe:
    """A delta item's recipe, read and checked, its literals spooled (module docstring)."""

    def __init__(self, recipe: SpliceRecipe, segments: Segments, literals: IO[bytes]) -> None:
        self.recipe = recipe
        self._segments = segments
        self._literals = literals

    @classmethod
    def read(cls, set_dir: Path, item: ManifestItem, work: Path, refuse: Refuse) -> ReplayedRecipe:
        assert item.delta is not None and item.delta.recipe is not None
        check_files(set_dir, [(p.name, p.size, p.sha256) for p in item.parts])
        literals = open(work / "literals", "w+b")  # noqa: SIM115 (closed by close)
        try:
            segments = _read_blob(set_dir, item, literals, refuse)
            size = literals.tell()
            literals.seek(0)
            recipe = item.delta.recipe
            try:
                checked = read_segments(
                    segments,
                    base_size=recipe.base_size,
                    literal_size=size,
                    size=recipe.size,
                    label="the delta blob",
                )
            except IntegrityError as exc:
                raise refuse(exc.message) from None
        except BaseException:
            literals.close()
            raise
        return cls(recipe, checked, literals)

    def generate(
        self,
        store: BaseObjects,
        base: layout.VersionManifest,
        put: Callable[[bytes], None],
        refuse: Refuse,
    ) -> None:
        """The archive over `base`'s object from `store`, to `put` (module docstring)."""
        read = HashingWriter()
        archive = HashingWriter()
        chunks = tee(store.open_stream(base.object), read.write)
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
            raise refuse(
                f"{store.bucket}/{base.object} (the base {base.domain} {base.version}) does "
                "not match its manifest "
                "(damaged or replaced; `mirror chart check` finds such versions)"
            )
        if failed is not None:
            raise refuse(f"the delta's recipe: {failed.message}")
        try:
            require_digest("the archive of the delta's recipe", archive.result, *self._signed)
        except IntegrityError as exc:
            raise refuse(exc.message) from None

    @property
    def _signed(self) -> tuple[str, int]:
        return self.recipe.sha256, self.recipe.size

    def close(self) -> None:
        self._literals.close()


def _read_blob(set_dir: Path, item: ManifestItem, literals: IO[bytes], refuse: Refuse) -> bytes:
    """The recipe's segments; its literals written to `literals`; the rest read past."""
    segments = b""
    with BlobReader(set_dir, item) as blob:
        for member in read_delta_blob(cast(IO[bytes], blob), label=item.label):
            if isinstance(member, DeltaRecipePart) and member.name == RECIPE_SEGMENTS:
                if member.size > MAX_SEGMENTS_BYTES:
                    raise refuse(f"its recipe's segments hold {member.size} bytes")
                segments = member.stream.read()
            elif isinstance(member, DeltaRecipePart):
                for chunk in read_chunks(member.stream):
                    literals.write(chunk)
            else:
                for _ in read_chunks(member.stream):
                    pass
        while blob.read(CHUNK_SIZE):
            pass  # the blob's last part and its whole sha256 are checked at its end
    return segments
