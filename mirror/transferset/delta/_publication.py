"""How a version is published on the air-gapped side, and what digest it must have.

The one decision (`publication`); everything else asks it: the manifest's schema
(`check_entry`), `ManifestItem.published_sha256`, the import's admission, its publishers
and its upload. Pure: the signed item and what the bucket holds of its base in, the answer
out. The ways, with the fields of the signed `DeltaEntry` that name them (docs/delta.md):

- `WHOLE`: no delta; the carried bundle, its sha256 and size.
- `SPLICE` (`spliced` true): the base's object edited, proved member by member; its digest
  is learnt as it is written (`sha256` None), the upload sized by `size_hint`.
- `REPLAY` (`spliced` true with a `recipe` whose base is the bucket's base object): the
  pack's archive replayed over that object; the recipe's signed sha256 and size.
- `TREE_ARCHIVE` (`spliced` false: sets packed by earlier releases for a zip base, or
  before libdeflate as stored blocks): no longer published. Its publication is `refused`
  (the import refuses the set before any upload, naming `transfer pack --full`).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Protocol

TREE_ARCHIVE_RETIRED = (
    "its delta is a tree archive (packed by an earlier release), which this release no "
    "longer rebuilds"
)


class Way(enum.Enum):
    WHOLE = "whole"
    TREE_ARCHIVE = "tree archive"
    SPLICE = "splice"
    REPLAY = "replay"


class Recipe(Protocol):
    """A `SpliceRecipe`: the archive it makes, over the base object it was made from."""

    @property
    def base_sha256(self) -> str: ...
    @property
    def base_size(self) -> int: ...
    @property
    def sha256(self) -> str: ...
    @property
    def size(self) -> int: ...


class Entry(Protocol):
    """A `DeltaEntry`'s fields that say how it is published."""

    @property
    def spliced(self) -> bool: ...
    @property
    def archive_sha256(self) -> str | None: ...
    @property
    def archive_size(self) -> int | None: ...
    @property
    def compression(self) -> object | None: ...
    @property
    def recipe(self) -> Recipe | None: ...


class Item(Protocol):
    """A `ManifestItem`: its blob's digest, and its delta entry if it is one."""

    @property
    def sha256(self) -> str: ...
    @property
    def size(self) -> int: ...
    @property
    def delta(self) -> Entry | None: ...


class BaseObject(Protocol):
    """What the bucket holds of a delta's base: its version manifest's object digest."""

    @property
    def sha256(self) -> str: ...
    @property
    def size(self) -> int: ...


@dataclass(frozen=True)
class Publication:
    """How an item is published: `sha256` and `size` are what the object must be (both
    None when learnt as it is written); `size_hint` sizes an upload of unknown size;
    `refused` names why a way this release dropped is not published."""

    way: Way
    sha256: str | None
    size: int | None
    size_hint: int
    refused: str | None = None


def publication(item: Item, base: BaseObject | None = None) -> Publication:
    """The way `item` is published over `base` (None: not known yet), and its digest."""
    delta = item.delta
    if delta is None:
        return Publication(Way.WHOLE, item.sha256, item.size, item.size)
    recipe = delta.recipe
    over = (base.sha256, base.size) if base is not None else None
    if recipe is not None and over == (recipe.base_sha256, recipe.base_size):
        return Publication(Way.REPLAY, recipe.sha256, recipe.size, recipe.size)
    if delta.spliced:
        hint = (base.size if base is not None else 0) + item.size
        return Publication(Way.SPLICE, None, None, hint)
    return Publication(Way.TREE_ARCHIVE, None, None, 0, TREE_ARCHIVE_RETIRED)


def check_entry(entry: Entry) -> None:
    """ValueError unless the entry's fields name one way (the manifest's schema asks)."""
    digest = (entry.archive_sha256 is None, entry.archive_size is None)
    if entry.spliced and digest != (True, True):
        raise ValueError("a spliced delta names no archive digest: it is learnt at import")
    if not entry.spliced and digest != (False, False):
        raise ValueError("a tree-archive delta names its archive's sha256 and size")
    if entry.spliced and entry.compression is None:
        raise ValueError("a spliced delta names the compression of its changed regions")
    if entry.recipe is not None and not entry.spliced:
        raise ValueError("only a spliced delta has a recipe")
