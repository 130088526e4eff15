"""Transfer sets: the signed, sequenced directory that carries versions across the air gap.

A set is `manifest.json` (canonical JSON: sorted keys, UTF-8, no floats),
`manifest.json.sig` (Ed25519 over the manifest's exact bytes) and the blobs as
`blobs/<sha256>` or `blobs/<sha256>.partNNN`, each no larger than the set's
maximum part size, so every disk can be checked on its own. It may also carry the
mirror tool itself (`tool/mirror-tool-VERSION.tar`, listed in the signed manifest,
never published by import), and a `SHA256SUMS` of every other file, so that
`sha256sum -c SHA256SUMS` checks a set with standard tools.

Promises:
- `pack` builds the set under `OUT.partial-<nonce>` and renames it to OUT only
  when every byte is written and fsynced (blobs, manifest, signature, then
  SHA256SUMS): a set cut short by a full disk or a crash never carries the name OUT.
- `verify_set` trusts nothing in the directory before the signature has been
  checked against a trusted key; it then checks the chain fields, every path,
  every part's size and sha256, every blob's whole sha256 and the tool's, and
  that SHA256SUMS (when present) says exactly what the signed manifest implies;
  it names the first bad file (IntegrityError, exit 5).
- Memory does not grow with blob size: everything is streamed in CHUNK_SIZE
  pieces and hashed in the same pass.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import queue
import re
import secrets
import shutil
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError as SqlIntegrityError
from sqlalchemy.orm import Session

from mirror.config import Settings
from mirror.errors import (
    ConfigError,
    IntegrityError,
    NotFound,
    OperationFailed,
    TemporaryFailure,
)
from mirror.fsutil import CHUNK_SIZE, fsync_dir
from mirror.store.app import App
from mirror.store.models import Bundle, Transfer, TransferItem, Version
from mirror.timestamps import rfc3339, utcnow
from mirror.transferset.keys import PublicKey, SigningKey, load_signing_key, verify_signature_file
from mirror.units import format_size
from mirror.versions import label_key

FORMAT = 1
MANIFEST = "manifest.json"
SIGNATURE = "manifest.json.sig"
RECEIPT = "receipt.json"
RECEIPT_SIGNATURE = "receipt.json.sig"
BLOBS = "blobs"
TOOL_DIR = "tool"
SHA256SUMS = "SHA256SUMS"
MAX_MANIFEST_BYTES = 64 * 1024 * 1024
FREE_SPACE_MARGIN = 16 * 1024 * 1024
MIN_PART_SIZE = 1024 * 1024

HEX64 = re.compile(r"^[0-9a-f]{64}$")
HOSTNAME = re.compile(
    r"^(?=.{1,253}$)([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*$"
)
LABEL = re.compile(r"^[0-9A-Za-z][0-9A-Za-z._+-]{0,63}$")
ARCHIVE_FORMAT = re.compile(r"^[a-z0-9]{1,8}(\.[a-z0-9]{1,8}){0,2}$")
TOOL_NAME = re.compile(r"^mirror-tool-[0-9A-Za-z][0-9A-Za-z._+-]{0,63}\.tar$")
_RECEIPT_TEMP = re.compile(r"^\.receipt\.json(\.sig)?\..+\.tmp$")

Progress = Callable[[int], None]


# ---- the manifest ---------------------------------------------------------------------------


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


def parse_strict_json(data: bytes, name: str) -> Any:
    """JSON without duplicate keys, floats or NaN; IntegrityError names `name`."""

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        document: dict[str, Any] = {}
        for key, value in items:
            if key in document:
                raise ValueError(f"duplicate key {key!r}")
            document[key] = value
        return document

    def no_float(text: str) -> Any:
        raise ValueError(f"float {text} is not allowed")

    try:
        return json.loads(
            data.decode("utf-8"),
            object_pairs_hook=pairs,
            parse_float=no_float,
            parse_constant=no_float,
        )
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
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"not an ISO 8601 time: {value!r}") from None
    if parsed.tzinfo is None:
        raise ValueError(f"time without a zone: {value!r}")
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


class ManifestItem(_Strict):
    """One version in the set; its path components are checked before any path is built."""

    domain: str
    version: str
    sha256: str
    size: int = Field(ge=0)
    archive_format: str
    tree_sha256: str
    exported_at: str
    parts: list[PartEntry] = Field(min_length=1)

    @field_validator("domain")
    @classmethod
    def _domain(cls, value: str) -> str:
        if not HOSTNAME.match(value):
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
        return self

    @property
    def label(self) -> str:
        return f"{self.domain} {self.version}"


class ToolEntry(_Strict):
    """The mirror tool carried beside the versions: `tool/<name>`, one file, never split."""

    name: str
    size: int = Field(ge=0)
    sha256: Hex64

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not TOOL_NAME.match(value) or ".." in value:
            raise ValueError(f"not a tool artefact name: {value!r}")
        return value

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
        document = self.model_dump(mode="json")
        if document["tool"] is None:
            del document["tool"]
        return canonical_json(document)


def sha256sums_text(manifest: Manifest, manifest_bytes: bytes, signature_bytes: bytes) -> bytes:
    """The SHA256SUMS file of a set (`sha256sum -c` format), derived from the signed manifest:
    every part, the tool, the manifest and its signature, sorted by name."""
    sums = {part.name: part.sha256 for item in manifest.blobs() for part in item.parts}
    if manifest.tool is not None:
        sums[manifest.tool.path] = manifest.tool.sha256
    sums[MANIFEST] = hashlib.sha256(manifest_bytes).hexdigest()
    sums[SIGNATURE] = hashlib.sha256(signature_bytes).hexdigest()
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


# ---- verify ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class VerifiedSet:
    path: Path
    manifest: Manifest
    manifest_bytes: bytes
    manifest_sha256: str
    key_id: str

    @property
    def total_bytes(self) -> int:
        return sum(item.size for item in self.manifest.blobs())


def _regular_file(path: Path, name: str) -> os.stat_result:
    try:
        info = path.lstat()
    except FileNotFoundError:
        raise IntegrityError(f"{name} is missing from the transfer set") from None
    if not os.path.isfile(path) or os.path.islink(path):
        raise IntegrityError(f"{name} is not a regular file")
    return info


def read_manifest_bytes(set_dir: Path) -> bytes:
    if not set_dir.is_dir():
        raise NotFound(f"transfer set {set_dir} does not exist or is not a directory")
    info = _regular_file(set_dir / MANIFEST, MANIFEST)
    if info.st_size > MAX_MANIFEST_BYTES:
        raise IntegrityError(f"{MANIFEST} is larger than {format_size(MAX_MANIFEST_BYTES)}")
    with open(set_dir / MANIFEST, "rb") as handle:
        return handle.read(MAX_MANIFEST_BYTES + 1)


def verify_set(
    set_dir: Path,
    trusted: Mapping[str, PublicKey],
    *,
    check_blobs: bool = True,
    on_progress: Progress | None = None,
) -> VerifiedSet:
    """Check everything in a transfer set, offline; IntegrityError names the first bad file."""
    if not trusted:
        raise ConfigError(
            "no trusted public keys", hint="set target.trusted_keys or pass --key FILE.pub"
        )
    data = read_manifest_bytes(set_dir)
    _regular_file(set_dir / SIGNATURE, SIGNATURE)
    key = verify_signature_file(data, set_dir / SIGNATURE, trusted, what=MANIFEST)
    manifest = parse_manifest(data)
    if manifest.key_id != key.key_id:
        raise IntegrityError(
            f"{MANIFEST}: names key {manifest.key_id!r} but is signed by {key.key_id!r}"
        )
    _check_listing(set_dir, manifest)
    if check_blobs:
        for item in manifest.blobs():
            with BlobReader(set_dir, item) as reader:
                while chunk := reader.read(CHUNK_SIZE):
                    if on_progress is not None:
                        on_progress(len(chunk))
        if manifest.tool is not None:
            _check_tool(set_dir, manifest.tool, on_progress)
    _check_sha256sums(set_dir, manifest, data)
    return VerifiedSet(set_dir, manifest, data, hashlib.sha256(data).hexdigest(), key.key_id)


def set_bytes(set_dir: Path) -> int | None:
    """The bytes `verify_set` reads (and an import uploads): the sizes of the files under
    blobs/ and tool/, for a progress total before anything is verified; None when unreadable."""
    try:
        return sum(
            entry.stat(follow_symlinks=False).st_size
            for folder in (set_dir / BLOBS, set_dir / TOOL_DIR)
            if folder.is_dir()
            for entry in os.scandir(folder)
            if entry.is_file(follow_symlinks=False)
        )
    except OSError:
        return None


def _check_tool(set_dir: Path, tool: ToolEntry, on_progress: Progress | None) -> None:
    try:
        fd = os.open(set_dir / tool.path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        raise IntegrityError(f"{tool.path} is missing or not a regular file") from None
    with os.fdopen(fd, "rb", buffering=0) as handle:
        sha256, size = _stream_sha256(handle, on_progress)
    if size != tool.size or sha256 != tool.sha256:
        raise IntegrityError(f"{tool.path}: size or sha256 differs from the manifest (corrupt)")


def _check_sha256sums(set_dir: Path, manifest: Manifest, manifest_bytes: bytes) -> None:
    """SHA256SUMS is a convenience for standard tools; when present it must say exactly what
    the signed manifest implies, so `sha256sum -c` can never pass on a set verify refuses."""
    path = set_dir / SHA256SUMS
    if not path.exists() and not path.is_symlink():
        return
    _regular_file(path, SHA256SUMS)
    signature = (set_dir / SIGNATURE).read_bytes()
    with open(path, "rb") as handle:
        present = handle.read(MAX_MANIFEST_BYTES + 1)
    if present != sha256sums_text(manifest, manifest_bytes, signature):
        raise IntegrityError(f"{SHA256SUMS} does not match the signed manifest (changed or stale)")


def _check_listing(set_dir: Path, manifest: Manifest) -> None:
    """No missing, extra, linked or odd files; part sizes as the manifest says."""
    expected = {part.name: part for item in manifest.blobs() for part in item.parts}
    allowed_top = {MANIFEST, SIGNATURE, RECEIPT, RECEIPT_SIGNATURE, BLOBS, SHA256SUMS}
    if manifest.tool is not None:
        allowed_top.add(TOOL_DIR)
    for entry in sorted(os.scandir(set_dir), key=lambda e: e.name):
        if entry.name not in allowed_top and not _RECEIPT_TEMP.match(entry.name):
            raise IntegrityError(f"{entry.name}: not part of this transfer set (unexpected file)")
        if entry.is_symlink():
            raise IntegrityError(f"{entry.name} is a symbolic link; refused")
    blobs_dir = set_dir / BLOBS
    if blobs_dir.is_symlink() or not blobs_dir.is_dir():
        raise IntegrityError(f"{BLOBS}/ is missing from the transfer set")
    if manifest.tool is not None:
        _check_tool_listing(set_dir, manifest.tool)
    present: set[str] = set()
    for entry in sorted(os.scandir(blobs_dir), key=lambda e: e.name):
        name = f"{BLOBS}/{entry.name}"
        if name not in expected:
            raise IntegrityError(f"{name}: not part of this transfer set (unexpected file)")
        if entry.is_symlink() or not entry.is_file(follow_symlinks=False):
            raise IntegrityError(f"{name} is not a regular file")
        present.add(name)
    for item in manifest.blobs():
        for part in item.parts:
            if part.name not in present:
                raise IntegrityError(f"{part.name} is missing from the transfer set")
            size = (set_dir / part.name).stat().st_size
            if size != part.size:
                raise IntegrityError(
                    f"{part.name}: {size} bytes, the manifest says {part.size} "
                    "(truncated, padded or from another set)"
                )


def _check_tool_listing(set_dir: Path, tool: ToolEntry) -> None:
    tool_dir = set_dir / TOOL_DIR
    if tool_dir.is_symlink() or not tool_dir.is_dir():
        raise IntegrityError(f"{TOOL_DIR}/ is missing from the transfer set")
    for entry in os.scandir(tool_dir):
        if f"{TOOL_DIR}/{entry.name}" != tool.path:
            raise IntegrityError(
                f"{TOOL_DIR}/{entry.name}: not part of this transfer set (unexpected file)"
            )
        if entry.is_symlink() or not entry.is_file(follow_symlinks=False):
            raise IntegrityError(f"{tool.path} is not a regular file")
        size = entry.stat(follow_symlinks=False).st_size
        if size != tool.size:
            raise IntegrityError(f"{tool.path}: {size} bytes, the manifest says {tool.size}")
    if not (set_dir / tool.path).is_file():
        raise IntegrityError(f"{tool.path} is missing from the transfer set")


class BackgroundSha256:
    """A sha256 computed on another thread (hashlib releases the GIL), so a second digest of
    the same bytes costs no wall time on a machine with a spare core. Bounded queue: at
    most a few chunks wait in memory."""

    def __init__(self) -> None:
        self._digest = hashlib.sha256()
        self._queue: queue.Queue[bytes | None] = queue.Queue(maxsize=8)
        self._thread = threading.Thread(target=self._run, name="sha256", daemon=True)
        self._thread.start()
        self._closed = False

    def _run(self) -> None:
        while (chunk := self._queue.get()) is not None:
            self._digest.update(chunk)

    def update(self, chunk: bytes) -> None:
        self._queue.put(chunk)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._queue.put(None)
            self._thread.join()

    def hexdigest(self) -> str:
        self.close()
        return self._digest.hexdigest()


class BlobReader:
    """Reads one blob by joining its parts, checking each part and the whole as it goes.

    Raises IntegrityError naming the part as soon as a part ends with the wrong
    size or hash, and at the end when the joined bytes do not match the item.
    `check_whole=False` leaves the joined hash to a consumer that checks it anyway
    (the object store's upload does), saving one sha256 pass.
    """

    def __init__(self, set_dir: Path, item: ManifestItem, *, check_whole: bool = True) -> None:
        self.set_dir = set_dir
        self.item = item
        self._parts = list(item.parts)
        self._index = -1
        self._handle: Any = None
        self._part_digest = hashlib.sha256()
        self._part_bytes = 0
        self._check_whole = check_whole
        self._whole = BackgroundSha256() if check_whole and len(self._parts) > 1 else None
        self._total = 0
        self._done = False

    def __enter__(self) -> BlobReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._close_part()
        if self._whole is not None:
            self._whole.close()

    def _close_part(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None

    def _next_part(self) -> bool:
        self._close_part()
        self._index += 1
        if self._index >= len(self._parts):
            return False
        part = self._parts[self._index]
        path = self.set_dir / part.name
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        except FileNotFoundError:
            raise IntegrityError(f"{part.name} is missing from the transfer set") from None
        except OSError:
            raise IntegrityError(f"{part.name} is not a regular file") from None
        self._handle = os.fdopen(fd, "rb", buffering=0)
        self._part_digest = hashlib.sha256()
        self._part_bytes = 0
        return True

    def _finish_part(self) -> None:
        part = self._parts[self._index]
        if self._part_bytes != part.size:
            raise IntegrityError(
                f"{part.name}: {self._part_bytes} bytes, the manifest says {part.size}"
            )
        if self._part_digest.hexdigest() != part.sha256:
            raise IntegrityError(f"{part.name}: sha256 differs from the manifest (corrupt part)")

    def _finish_blob(self) -> None:
        name = f"{BLOBS}/{self.item.sha256}"
        if self._total != self.item.size:
            raise IntegrityError(f"{name}: joined parts hold {self._total} bytes, expected size")
        if not self._check_whole:
            return
        whole = (
            self._whole.hexdigest() if self._whole is not None else self._part_digest.hexdigest()
        )
        if whole != self.item.sha256:
            raise IntegrityError(f"{name}: the joined parts do not hash to the blob's sha256")

    def read(self, size: int = -1, /) -> bytes:
        if self._done:
            return b""
        want = CHUNK_SIZE if size is None or size < 0 else size
        if self._handle is None and not self._next_part():
            self._done = True
            self._finish_blob()
            return b""
        while True:
            part = self._parts[self._index]
            limit = min(want, part.size + 1 - self._part_bytes)
            chunk = self._handle.read(limit) if limit > 0 else b""
            if chunk:
                self._part_bytes += len(chunk)
                if self._part_bytes > part.size:
                    raise IntegrityError(
                        f"{part.name}: longer than the {part.size} bytes the manifest says"
                    )
                self._part_digest.update(chunk)
                if self._whole is not None:
                    self._whole.update(chunk)
                self._total += len(chunk)
                return chunk
            self._finish_part()
            if not self._next_part():
                self._done = True
                self._finish_blob()
                return b""


# ---- pack -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class PackedItem:
    domain: str
    version: str
    sha256: str
    size: int
    parts: int


@dataclass(frozen=True)
class PackResult:
    path: Path | None
    sequence: int | None
    manifest_sha256: str | None
    key_id: str | None
    items: list[PackedItem] = field(default_factory=list)
    total_bytes: int = 0
    part_count: int = 0
    tool: str | None = None

    @property
    def nothing(self) -> bool:
        return not self.items

    def as_dict(self) -> dict[str, Any]:
        return {
            "path": str(self.path) if self.path else None,
            "sequence": self.sequence,
            "manifest_sha256": self.manifest_sha256,
            "key_id": self.key_id,
            "total_bytes": self.total_bytes,
            "part_count": self.part_count,
            "tool": self.tool,
            "items": [item.__dict__ for item in self.items],
        }


def signing_key_from(app: App) -> SigningKey:
    return signing_key_from_settings(app.settings)


def signing_key_from_settings(settings: Settings) -> SigningKey:
    path = settings.transfer.signing_key
    if path is None:
        raise ConfigError(
            "transfer.signing_key is not set",
            hint="create a key with `mirror keys generate --out PREFIX` and set it",
        )
    return load_signing_key(Path(path))


def select_versions(
    session: Session, *, domain: str | None, include_all: bool
) -> list[tuple[Version, Bundle]]:
    """Versions to pack: not delivered and never packed (or every one with include_all)."""
    query = select(Version, Bundle).join(Bundle, Bundle.sha256 == Version.bundle_sha256)
    if domain:
        query = query.where(Version.domain == domain.lower())
    if not include_all:
        packed = select(TransferItem.version_id)
        query = query.where(Version.delivered_at.is_(None), Version.id.not_in(packed))
    rows = [(version, bundle) for version, bundle in session.execute(query).all()]
    return sorted(rows, key=lambda row: (row[0].domain, label_key(row[0].label)))


def disk_free(path: Path) -> int:
    return shutil.disk_usage(path).free


def _check_out(out: Path) -> None:
    if out.is_symlink() or (out.exists() and (not out.is_dir() or any(out.iterdir()))):
        raise ConfigError(f"{out} already exists and is not empty; choose a new directory")
    if not out.parent.is_dir():
        raise ConfigError(f"directory {out.parent} does not exist")


def pack(
    app: App,
    out: Path,
    *,
    domain: str | None = None,
    include_all: bool = False,
    max_size: int | None = None,
    signing_key: SigningKey | None = None,
    now: Callable[[], datetime] = utcnow,
    on_progress: Progress | None = None,
    free_space: Callable[[Path], int] | None = None,
    on_total: Callable[[int], None] | None = None,
    tool: Path | None = None,
) -> PackResult:
    """Write a signed transfer set to `out` and record it; nothing to pack is not an error.

    `on_total` hears the bytes `on_progress` will count, before the first of them. `tool`
    (a `mirror-tool-VERSION.tar` from `mirror bundle-self`) is carried as `tool/<name>`,
    listed and signed in the manifest like a blob."""
    out = out.absolute()
    part_limit = max_size if max_size is not None else app.settings.transfer.max_size
    if part_limit < MIN_PART_SIZE:
        raise ConfigError(f"--max-size must be at least {format_size(MIN_PART_SIZE)}")
    _check_out(out)
    key = signing_key or signing_key_from(app)
    with app.db.session() as session:
        rows = select_versions(session, domain=domain, include_all=include_all)
        newest = session.execute(
            select(Transfer).where(
                Transfer.sequence == select(func.max(Transfer.sequence)).scalar_subquery()
            )
        ).scalar_one_or_none()
    if not rows:
        return PackResult(None, None, None, key.key_id)
    sequence = (newest.sequence + 1) if newest else 1
    blobs = {bundle.sha256: bundle for _, bundle in rows}
    total = sum(bundle.size for bundle in blobs.values())
    needed = total + (_tool_size(tool) if tool is not None else 0)
    if on_total is not None:
        on_total(needed)
    free = (free_space or disk_free)(out.parent)
    if free < needed + FREE_SPACE_MARGIN:
        raise OperationFailed(
            f"not enough free space in {out.parent}: the set needs {format_size(needed)}, "
            f"{format_size(free)} is free",
            hint="use a larger medium, or --domain to pack less",
        )
    staging = out.parent / f"{out.name}.partial-{secrets.token_hex(4)}"
    try:
        staging.mkdir()
        (staging / BLOBS).mkdir()
        parts: dict[str, list[PartEntry]] = {}
        for sha256, bundle in blobs.items():
            parts[sha256] = _write_blob(app, staging, bundle, part_limit, on_progress)
        fsync_dir(staging / BLOBS)
        tool_entry = _copy_tool(tool, staging, on_progress) if tool is not None else None
        manifest = Manifest(
            format=1,
            sequence=sequence,
            previous_sequence=newest.sequence if newest else None,
            previous_manifest_sha256=newest.manifest_sha256 if newest else None,
            created_at=iso_time(now()),
            source_id=app.settings.transfer.source_id,
            key_id=key.key_id,
            max_part_size=part_limit,
            items=[
                ManifestItem(
                    domain=version.domain,
                    version=version.label,
                    sha256=bundle.sha256,
                    size=bundle.size,
                    archive_format=bundle.format,
                    tree_sha256=version.tree_sha256,
                    exported_at=iso_time(version.created_at),
                    parts=parts[bundle.sha256],
                )
                for version, bundle in rows
            ],
            tool=tool_entry,
        )
        data = manifest.to_bytes()
        signature = key.signature_document(data)
        _write_new(staging / MANIFEST, data)
        _write_new(staging / SIGNATURE, signature)
        _write_new(staging / SHA256SUMS, sha256sums_text(manifest, data, signature))
        fsync_dir(staging)
        os.rename(staging, out)
        fsync_dir(out.parent)
    except OSError as exc:
        shutil.rmtree(staging, ignore_errors=True)
        raise OperationFailed(
            f"writing the transfer set in {out.parent} failed: {exc.strerror or exc}; "
            "nothing was left behind"
        ) from None
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    manifest_sha256 = hashlib.sha256(data).hexdigest()
    try:
        _record(app, manifest, manifest_sha256, out, [version.id for version, _ in rows])
    except SqlIntegrityError:
        shutil.rmtree(out, ignore_errors=True)
        raise TemporaryFailure(
            f"another pack took sequence {sequence} at the same time; run again"
        ) from None
    return PackResult(
        path=out,
        sequence=sequence,
        manifest_sha256=manifest_sha256,
        key_id=key.key_id,
        items=[
            PackedItem(v.domain, v.label, b.sha256, b.size, len(parts[b.sha256])) for v, b in rows
        ],
        total_bytes=total,
        part_count=sum(len(p) for p in parts.values()),
        tool=tool_entry.path if tool_entry is not None else None,
    )


def _tool_size(tool: Path) -> int:
    if not TOOL_NAME.match(tool.name) or not tool.is_file():
        raise ConfigError(
            f"{tool} is not a mirror tool artefact (mirror-tool-VERSION.tar)",
            hint="build one with `mirror bundle-self DIR`",
        )
    return tool.stat().st_size


def _copy_tool(tool: Path, staging: Path, on_progress: Progress | None) -> ToolEntry:
    (staging / TOOL_DIR).mkdir()
    with open(tool, "rb") as reader, open(staging / TOOL_DIR / tool.name, "xb") as writer:
        sha256, size = _stream_sha256(reader, on_progress, writer)
        writer.flush()
        os.fsync(writer.fileno())
    fsync_dir(staging / TOOL_DIR)
    return ToolEntry(name=tool.name, size=size, sha256=sha256)


def _stream_sha256(
    reader: Any, on_progress: Progress | None, writer: Any = None
) -> tuple[str, int]:
    """(sha256, size) of everything `reader` yields, copied to `writer` when given."""
    digest = hashlib.sha256()
    size = 0
    while chunk := reader.read(CHUNK_SIZE):
        if writer is not None:
            writer.write(chunk)
        digest.update(chunk)
        size += len(chunk)
        if on_progress is not None:
            on_progress(len(chunk))
    return digest.hexdigest(), size


def _record(
    app: App, manifest: Manifest, manifest_sha256: str, out: Path, version_ids: list[int]
) -> None:
    with app.db.session() as session:
        transfer = Transfer(
            sequence=manifest.sequence,
            previous_sequence=manifest.previous_sequence,
            manifest_sha256=manifest_sha256,
            path=str(out),
            item_count=len(manifest.items),
            total_bytes=sum(item.size for item in manifest.blobs()),
        )
        session.add(transfer)
        session.flush()
        for version_id in version_ids:
            session.add(TransferItem(transfer_id=transfer.id, version_id=version_id))


def forget_transfer(app: App, sequence: int) -> None:
    """Drop the record of a packed set that never left this host (a failed push)."""
    with app.db.session() as session:
        transfer = session.execute(
            select(Transfer).where(Transfer.sequence == sequence)
        ).scalar_one_or_none()
        if transfer is None:
            return
        for item in session.execute(
            select(TransferItem).where(TransferItem.transfer_id == transfer.id)
        ).scalars():
            session.delete(item)
        session.flush()
        session.delete(transfer)


def _write_new(path: Path, data: bytes) -> None:
    with open(path, "xb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())


def _write_blob(
    app: App, staging: Path, bundle: Bundle, part_limit: int, on_progress: Progress | None
) -> list[PartEntry]:
    """Copy one stored blob into parts, hashing each part and the whole in the same pass."""
    source = app.store.open(bundle.sha256)
    count = max(1, -(-bundle.size // part_limit))
    names = part_names(bundle.sha256, count)
    whole = BackgroundSha256() if count > 1 else None
    entries: list[PartEntry] = []
    try:
        whole_hex = _copy_parts(source, staging, names, part_limit, whole, entries, on_progress)
    finally:
        if whole is not None:
            whole.close()
    copied = sum(entry.size for entry in entries)
    if copied != bundle.size or whole_hex != bundle.sha256:
        raise IntegrityError(
            f"stored blob {bundle.sha256[:12]}… does not match its index entry",
            hint="run `mirror store verify`",
        )
    return entries


def _copy_parts(
    source: Path,
    staging: Path,
    names: list[str],
    part_limit: int,
    whole: BackgroundSha256 | None,
    entries: list[PartEntry],
    on_progress: Progress | None,
) -> str:
    """Write the parts; returns the whole blob's sha256 (or "" when the source is too long)."""
    with open(source, "rb") as reader:
        for name in names:
            digest = hashlib.sha256()
            written = 0
            with open(staging / name, "xb") as writer:
                while written < part_limit:
                    chunk = reader.read(min(CHUNK_SIZE, part_limit - written))
                    if not chunk:
                        break
                    writer.write(chunk)
                    digest.update(chunk)
                    if whole is not None:
                        whole.update(chunk)
                    written += len(chunk)
                    if on_progress is not None:
                        on_progress(len(chunk))
                writer.flush()
                os.fsync(writer.fileno())
            entries.append(PartEntry(name=name, size=written, sha256=digest.hexdigest()))
        if reader.read(1):
            return ""
    return whole.hexdigest() if whole is not None else entries[0].sha256


@contextlib.contextmanager
def temporary_set_dir(root: Path, prefix: str) -> Iterator[Path]:
    """A not-yet-existing path under `root` for a set; it and its staging dirs go away after."""
    root.mkdir(parents=True, exist_ok=True)
    path = root / f"{prefix}-{secrets.token_hex(6)}"
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
        for stale in root.glob(f"{path.name}.partial-*"):
            shutil.rmtree(stale, ignore_errors=True)
