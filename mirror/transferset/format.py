"""The transfer-set format both sides of the gap share: canonical JSON, the signed manifest.

A set is `manifest.json` (canonical JSON: sorted keys, UTF-8, no floats),
`manifest.json.sig` (Ed25519 over the manifest's exact bytes) and the blobs as
`blobs/<sha256>` or `blobs/<sha256>.partNNN`, each no larger than the set's
maximum part size, so every disk can be checked on its own. It may also carry the
mirror tool itself (`tool/mirror-tool-VERSION.tar`, listed in the signed manifest,
never published by import), and a `SHA256SUMS` of every other file, so that
`sha256sum -c SHA256SUMS` checks a set with standard tools.

Promises:
- `canonical_json` gives one byte string per document (floats refused), so a
  signature over it is reproducible; `parse_strict_json` refuses duplicate keys,
  floats and NaN, naming the document.
- `parse_manifest` accepts only a manifest whose every path component, hash,
  part name and size is valid; IntegrityError (exit 5) names the first bad field.
- `sha256sums_text` derives SHA256SUMS from the signed manifest alone.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from datetime import datetime
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from mirror.errors import IntegrityError
from mirror.hostnames import is_domain
from mirror.integrity import hash_bytes
from mirror.sites import check_site_name
from mirror.timestamps import parse_zoned, rfc3339

FORMAT = 1
MANIFEST = "manifest.json"
SIGNATURE = "manifest.json.sig"
RECEIPT = "receipt.json"
RECEIPT_SIGNATURE = "receipt.json.sig"
BLOBS = "blobs"
TOOL_DIR = "tool"
SHA256SUMS = "SHA256SUMS"
MAX_MANIFEST_BYTES = 64 * 1024 * 1024
MIN_PART_SIZE = 1024 * 1024
DELTA_ARCHIVE_FORMAT = "tar.gz"

HEX64 = re.compile(r"^[0-9a-f]{64}$")
LABEL = re.compile(r"^[0-9A-Za-z][0-9A-Za-z._+-]{0,63}$")
ARCHIVE_FORMAT = re.compile(r"^[a-z0-9]{1,8}(\.[a-z0-9]{1,8}){0,2}$")
TOOL_NAME = re.compile(r"^mirror-tool-[0-9A-Za-z][0-9A-Za-z._+-]{0,63}\.tar$")
RECEIPT_TEMP = re.compile(r"^\.receipt\.json(\.sig)?\..+\.tmp$")

Progress = Callable[[int], None]


def canonical_json(document: Any) -> bytes:
    """Sorted keys, no spaces, UTF-8; refuses floats so the bytes never depend on rounding."""
    _refuse_floats(document)
    return json.dumps(
        document, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode("utf-8")


def _refuse_floats(value: Any) -> None:
    if isinstance(value, float):
        raise ValueError("floats are not allowed in canonical JSON")
    if isinstance(value, dict):
        for item in value.values():
            _refuse_floats(item)
    elif isinstance(value, list):
        for item in value:
            _refuse_floats(item)


def strict_decoder() -> json.JSONDecoder:
    """The decoder of `parse_strict_json`: no duplicate keys, floats or NaN (ValueError)."""

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        document: dict[str, Any] = {}
        for key, value in items:
            if key in document:
                raise ValueError(f"duplicate key {key!r}")
            document[key] = value
        return document

    def no_float(text: str) -> Any:
        raise ValueError(f"float {text} is not allowed")

    return json.JSONDecoder(object_pairs_hook=pairs, parse_float=no_float, parse_constant=no_float)


def parse_strict_json(data: bytes, name: str) -> Any:
    """JSON without duplicate keys, floats or NaN; IntegrityError names `name`."""
    try:
        return strict_decoder().decode(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise IntegrityError(f"{name}: not UTF-8") from None
    except ValueError as exc:
        raise IntegrityError(f"{name}: not valid strict JSON ({exc})") from None
    except RecursionError:
        raise IntegrityError(f"{name}: nested too deeply to be a mirror document") from None


def part_names(sha256: str, count: int) -> list[str]:
    """The only valid part names of a blob split into `count` parts."""
    if count == 1:
        return [f"{BLOBS}/{sha256}"]
    width = max(3, len(str(count)))
    return [f"{BLOBS}/{sha256}.part{number:0{width}d}" for number in range(1, count + 1)]


def _iso(value: str) -> str:
    parse_zoned(value)
    return value


def iso_time(moment: datetime) -> str:
    return rfc3339(moment)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


def _hex64(value: str) -> str:
    if not HEX64.match(value):
        raise ValueError("must be 64 lowercase hex digits")
    return value


Hex64 = Annotated[str, AfterValidator(_hex64)]


class PartEntry(_Strict):
    name: str
    size: int = Field(ge=0)
    sha256: Hex64


class Compression(_Strict):
    """The compressor a delta's changed regions are compressed with: named in the signed
    manifest (`delta.compression`; a tree archive of an earlier release named its own)."""

    library: Literal["deflate"]
    version: str = Field(pattern=r"^[0-9][0-9A-Za-z.+-]{0,40}$")
    level: int = Field(ge=1, le=12)
    chunk_size: int = Field(ge=65536, le=64 * 1024 * 1024)

    def describe(self) -> str:
        pieces = f"{self.chunk_size} B pieces"
        return f"libdeflate ({self.library}=={self.version}) level {self.level}, {pieces}"


class SpliceRecipe(_Strict):
    """A spliced delta's archive as the pack made it (`transferset/delta/_recipe.py`): replayed
    over a base object of `base_sha256` and `base_size`, it is `size` bytes hashing to
    `sha256`."""

    base_sha256: Hex64
    base_size: int = Field(ge=0)
    sha256: Hex64
    size: int = Field(ge=0)


class DeltaEntry(_Strict):
    """What makes an item a delta: its blob is a delta blob (`mirror.transferset.delta`)
    against `base_version`, whose tree must hash to `base_tree_sha256` in the bucket. Which
    fields go together, and so how the import publishes it (a splice, a replay of its
    `recipe`, or, for an earlier release's tree archive with its `archive_sha256`, not at
    all), is
    `mirror.transferset.delta.publication`'s one decision (docs/delta.md)."""

    base_version: str
    base_tree_sha256: Hex64
    archive_sha256: Hex64 | None = None
    archive_size: int | None = Field(default=None, ge=0)
    file_count: int = Field(ge=0)
    carried_files: int = Field(ge=0)
    compression: Compression | None = None
    spliced: bool = False
    recipe: SpliceRecipe | None = None

    @field_validator("base_version")
    @classmethod
    def _base_version(cls, value: str) -> str:
        if not LABEL.match(value) or ".." in value:
            raise ValueError(f"not a version label: {value!r}")
        return value

    @model_validator(mode="after")
    def _one_way(self) -> DeltaEntry:
        from mirror.transferset.delta._publication import check_entry

        check_entry(self)
        return self


PROVENANCE_DIR = "provenance"
PROVENANCE_NAME = re.compile(
    r"^provenance/[0-9a-z.-]{1,253}/[0-9A-Za-z][0-9A-Za-z._+-]{0,63}\.intoto\.json$"
)


class ProvenanceEntry(_Strict):
    """The version's signed provenance (`transferset/provenance.py`) carried as `name`: its
    statement is about bundle `subject_sha256` (a delta's rebuilt archive carries the
    statement of the bundle it was made from, whose tree is the item's `tree_sha256`)."""

    name: str
    size: int = Field(ge=0)
    sha256: Hex64
    subject_sha256: Hex64

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not PROVENANCE_NAME.match(value) or ".." in value:
            raise ValueError(f"not a provenance file name: {value!r}")
        return value


INVENTORY_NAME = re.compile(
    r"^provenance/[0-9a-z.-]{1,253}/[0-9A-Za-z][0-9A-Za-z._+-]{0,63}\.spdx\.json$"
)


class _CarriedFile(_Strict):
    """One file carried whole beside the versions, named by a pattern of its kind."""

    NAMED: ClassVar[re.Pattern[str]]
    KIND: ClassVar[str]

    name: str
    size: int = Field(ge=0)
    sha256: Hex64

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not cls.NAMED.match(value) or ".." in value:
            raise ValueError(f"not {cls.KIND} name: {value!r}")
        return value


class InventoryEntry(_CarriedFile):
    """The version's SPDX inventory (`outbound/inventory.py`) carried as `name` beside its
    provenance, whose predicate signs the same sha256 (`inventory.sha256`)."""

    NAMED = INVENTORY_NAME
    KIND = "an inventory file"


class ManifestItem(_Strict):
    """One version in the set; its path components are checked before any path is built.

    A full item carries the bundle: `sha256`, `size` and `parts` are the bundle's, and it is
    published as it is. A delta item (`delta` set) carries a delta blob: `sha256`, `size` and
    `parts` are the delta blob's, `archive_format` and `tree_sha256` describe the archive the
    import makes and publishes (`mirror.transferset.delta.publication`)."""

    domain: str
    version: str
    sha256: str
    size: int = Field(ge=0)
    archive_format: str
    tree_sha256: str
    exported_at: str
    parts: list[PartEntry] = Field(min_length=1)
    delta: DeltaEntry | None = None
    provenance: ProvenanceEntry | None = None
    inventory: InventoryEntry | None = None

    @field_validator("domain")
    @classmethod
    def _domain(cls, value: str) -> str:
        if not is_domain(value):
            raise ValueError(f"not a hostname: {value!r}")
        return value

    @field_validator("version")
    @classmethod
    def _version(cls, value: str) -> str:
        if not LABEL.match(value) or ".." in value:
            raise ValueError(f"not a version label: {value!r}")
        return value

    @field_validator("sha256", "tree_sha256")
    @classmethod
    def _hex(cls, value: str) -> str:
        if not HEX64.match(value):
            raise ValueError("must be 64 lowercase hex digits")
        return value

    @field_validator("archive_format")
    @classmethod
    def _format(cls, value: str) -> str:
        if not ARCHIVE_FORMAT.match(value):
            raise ValueError(f"not an archive format: {value!r}")
        return value

    @field_validator("exported_at")
    @classmethod
    def _time(cls, value: str) -> str:
        return _iso(value)

    @model_validator(mode="after")
    def _parts(self) -> ManifestItem:
        expected = part_names(self.sha256, len(self.parts))
        for part, name in zip(self.parts, expected, strict=True):
            if part.name != name:
                raise ValueError(f"part name {part.name!r} is not the expected {name!r}")
            if part.size == 0 and len(self.parts) > 1:
                raise ValueError(f"part {part.name!r} is empty")
        if sum(part.size for part in self.parts) != self.size:
            raise ValueError("the part sizes do not add up to the blob's size")
        if len(self.parts) == 1 and self.parts[0].sha256 != self.sha256:
            raise ValueError("a single part must hash to the blob's sha256")
        if self.delta is not None:
            if self.delta.base_version == self.version:
                raise ValueError(f"{self.label} is a delta against itself")
            if self.archive_format != DELTA_ARCHIVE_FORMAT:
                raise ValueError(f"a delta rebuilds a {DELTA_ARCHIVE_FORMAT} archive")
        return self

    @model_validator(mode="after")
    def _inventory(self) -> ManifestItem:
        """An inventory lies beside the item's provenance, which signs it: none without one."""
        if self.inventory is not None:
            if self.provenance is None:
                raise ValueError(f"{self.label} carries an inventory and no provenance")
            if self.inventory.name != f"{PROVENANCE_DIR}/{self.domain}/{self.version}.spdx.json":
                raise ValueError(f"{self.inventory.name!r} is not {self.label}'s inventory")
        return self

    @property
    def label(self) -> str:
        return f"{self.domain} {self.version}"

    @property
    def published_sha256(self) -> str | None:
        """The sha256 the archive the import publishes for this item must have, as the signed
        manifest alone says it (`mirror.transferset.delta.publication`, the one decision);
        None for a spliced delta, whose digest depends on the base the bucket holds."""
        from mirror.transferset.delta._publication import publication

        return publication(self).sha256

    @property
    def published_size(self) -> int | None:
        from mirror.transferset.delta._publication import publication

        return publication(self).size


class ToolEntry(_CarriedFile):
    """The mirror tool carried beside the versions: `tool/<name>`, one file, never split."""

    NAMED = TOOL_NAME
    KIND = "a tool artefact"

    @property
    def path(self) -> str:
        return f"{TOOL_DIR}/{self.name}"


class Manifest(_Strict):
    format: Literal[1]
    sequence: int = Field(ge=1)
    previous_sequence: int | None = Field(ge=1)
    previous_manifest_sha256: str | None
    created_at: str
    source_id: str = Field(min_length=1, max_length=253)
    key_id: str = Field(min_length=1, max_length=64)
    max_part_size: int = Field(ge=1)
    items: list[ManifestItem] = Field(min_length=1)
    tool: ToolEntry | None = None
    site: str | None = None
    """The air-gapped site the set was packed for (issue 22): its sequence is that site's.
    Absent for the implicit single site, so such a set has the bytes it always had."""

    @field_validator("site")
    @classmethod
    def _site(cls, value: str | None) -> str | None:
        return None if value is None else check_site_name(value)

    @field_validator("created_at")
    @classmethod
    def _time(cls, value: str) -> str:
        return _iso(value)

    @model_validator(mode="after")
    def _chain_and_items(self) -> Manifest:
        if (self.previous_sequence is None) != (self.previous_manifest_sha256 is None):
            raise ValueError("previous_sequence and previous_manifest_sha256 go together")
        if self.previous_sequence is not None and self.previous_sequence >= self.sequence:
            raise ValueError("previous_sequence must be lower than sequence")
        if self.previous_manifest_sha256 is not None and not HEX64.match(
            self.previous_manifest_sha256
        ):
            raise ValueError("previous_manifest_sha256 must be 64 lowercase hex digits")
        seen: set[tuple[str, str]] = set()
        blobs: dict[str, ManifestItem] = {}
        for item in self.items:
            if (item.domain, item.version) in seen:
                raise ValueError(f"{item.label} is listed twice")
            seen.add((item.domain, item.version))
            other = blobs.setdefault(item.sha256, item)
            if other.parts != item.parts:
                raise ValueError(f"{item.label} and {other.label} list different parts")
            if any(part.size > self.max_part_size for part in item.parts):
                raise ValueError(f"{item.label} has a part larger than max_part_size")
        return self

    def blobs(self) -> list[ManifestItem]:
        """One item per distinct blob, in manifest order."""
        unique: dict[str, ManifestItem] = {}
        for item in self.items:
            unique.setdefault(item.sha256, item)
        return list(unique.values())

    def to_bytes(self) -> bytes:
        """Optional fields that are unset are left out, so a set with neither a tool nor
        deltas has the bytes it had before either existed."""
        document = self.model_dump(mode="json")
        for optional in ("tool", "site"):
            if document[optional] is None:
                del document[optional]
        for item in document["items"]:
            if item["delta"] is None:
                del item["delta"]
            else:
                _drop_unset(item["delta"])
            for optional in ("provenance", "inventory"):
                if item[optional] is None:
                    del item[optional]
        return canonical_json(document)


def _drop_unset(delta: dict[str, Any]) -> None:
    """A tree-archive delta has the bytes it had before spliced deltas existed."""
    for optional in ("compression", "archive_sha256", "archive_size", "recipe"):
        if delta[optional] is None:
            del delta[optional]
    if not delta["spliced"]:
        del delta["spliced"]


def sha256sums_text(manifest: Manifest, manifest_bytes: bytes, signature_bytes: bytes) -> bytes:
    """The SHA256SUMS file of a set (`sha256sum -c` format), derived from the signed manifest:
    every part, the tool, the manifest and its signature, sorted by name."""
    sums = {part.name: part.sha256 for item in manifest.blobs() for part in item.parts}
    if manifest.tool is not None:
        sums[manifest.tool.path] = manifest.tool.sha256
    for item in manifest.items:
        if item.provenance is not None:
            sums[item.provenance.name] = item.provenance.sha256
        if item.inventory is not None:
            sums[item.inventory.name] = item.inventory.sha256
    sums[MANIFEST] = hash_bytes(manifest_bytes)
    sums[SIGNATURE] = hash_bytes(signature_bytes)
    return "".join(f"{sums[name]}  {name}\n" for name in sorted(sums)).encode("ascii")


def parse_manifest(data: bytes) -> Manifest:
    document = parse_strict_json(data, MANIFEST)
    try:
        return Manifest.model_validate(document)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "(top level)"
        message = first["msg"].removeprefix("Value error, ")
        raise IntegrityError(f"{MANIFEST}: {where}: {message}") from None
