"""Reading a transfer set from disk: verify every file, and read blobs back from their parts.

Promises:
- `verify_set` trusts nothing in the directory before the signature has been
  checked against a trusted key (by the trust core, on the bytes); it then checks
  every path, every part's size and sha256 and the tool's, and that SHA256SUMS
  (when present) says exactly what the signed manifest implies; it names the first
  bad file in manifest order (IntegrityError, exit 5).
- Each byte is read and hashed once, the files spread over one thread per core:
  the part hashes are signed, so parts that match them are the bytes the source
  packed. A blob's whole sha256 is the source's own claim (a single part must
  equal it, `parse_manifest` checks that); the import hashes every blob whole as
  it uploads it and publishes nothing whose bytes do not match it.
- Memory does not grow with blob size: everything is streamed in CHUNK_SIZE pieces.
- `BlobReader` joins a blob's parts for a consumer, checking each part's size and
  sha256 as it passes.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from mirror.errors import IntegrityError, NotFound
from mirror.fsutil import map_on_cores
from mirror.integrity import (
    CHUNK_SIZE,
    Digest,
    HashingWriter,
    hash_bytes,
    hash_stream,
    require_digest,
)
from mirror.transferset.format import (
    BLOBS,
    MANIFEST,
    MAX_MANIFEST_BYTES,
    PROVENANCE_DIR,
    RECEIPT,
    RECEIPT_SIGNATURE,
    RECEIPT_TEMP,
    SHA256SUMS,
    SIGNATURE,
    TOOL_DIR,
    Manifest,
    ManifestItem,
    Progress,
    ToolEntry,
    sha256sums_text,
)
from mirror.transferset.keys import PublicKey, read_signature_bytes
from mirror.transferset.provenance import Provenance, check_item
from mirror.transferset.trust import require_trusted, verify_manifest
from mirror.units import format_size


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

    def as_dict(self) -> dict[str, Any]:
        """The `transfer verify` document (docs/json.md)."""
        manifest = self.manifest
        return {
            "path": str(self.path),
            "valid": True,
            "sequence": manifest.sequence,
            "site": manifest.site,
            "previous_sequence": manifest.previous_sequence,
            "manifest_sha256": self.manifest_sha256,
            "key_id": self.key_id,
            "source_id": manifest.source_id,
            "created_at": manifest.created_at,
            "total_bytes": self.total_bytes,
            "items": [
                {"domain": i.domain, "version": i.version, "sha256": i.sha256, "size": i.size}
                for i in manifest.items
            ],
            "tool": manifest.tool.model_dump() if manifest.tool else None,
        }

    def lines(self) -> list[str]:
        """What `transfer verify` prints for a person."""
        manifest = self.manifest
        site = f" for site {manifest.site}" if manifest.site else ""
        return [
            f"{self.path}: valid set {manifest.sequence}{site} from {manifest.source_id}, "
            f"signed by key {self.key_id}, {len(manifest.items)} version(s), "
            f"{format_size(self.total_bytes)}",
            *[f"  {i.domain} {i.version}  {i.sha256[:12]}" for i in manifest.items],
            *([f"  the mirror tool {manifest.tool.path}"] if manifest.tool else []),
        ]


def _regular_file(path: Path, name: str) -> os.stat_result:
    try:
        info = path.lstat()
    except FileNotFoundError:
        raise IntegrityError(f"{name} is missing from the transfer set") from None
    if not os.path.isfile(path) or os.path.islink(path):
        raise IntegrityError(f"{name} is not a regular file")
    return info


def read_manifest_bytes(set_dir: Path) -> bytes:
    """The manifest's bytes. A directory that is not there, or holds none of a set's files
    (a wrong path, not a damaged set), is NotFound (exit 3); a set missing its manifest
    beside its other files is damaged (IntegrityError)."""
    if not set_dir.is_dir():
        raise NotFound(f"transfer set {set_dir} does not exist or is not a directory")
    if not any(
        os.path.lexists(set_dir / name) for name in (MANIFEST, SIGNATURE, SHA256SUMS, BLOBS)
    ):
        raise NotFound(
            f"{set_dir} is not a transfer set (no {MANIFEST})",
            hint="name the directory `mirror transfer pack` wrote",
        )
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
    require_trusted(trusted)
    data = read_manifest_bytes(set_dir)
    _regular_file(set_dir / SIGNATURE, SIGNATURE)
    signature = read_signature_bytes(set_dir / SIGNATURE)
    checked = verify_manifest(data, signature, trusted)
    manifest = checked.manifest
    _check_listing(set_dir, manifest)
    if check_blobs:
        files = [
            (part.name, part.size, part.sha256) for item in manifest.blobs() for part in item.parts
        ]
        check_files(set_dir, files, on_progress)
    verify_tool(set_dir, manifest, on_progress)
    verify_provenance_files(set_dir, manifest, trusted)
    _check_sha256sums(set_dir, manifest, data)
    return VerifiedSet(set_dir, manifest, data, checked.manifest_sha256, checked.key_id)


def verify_tool(set_dir: Path, manifest: Manifest, on_progress: Progress | None = None) -> None:
    """Hash the carried tool (when the manifest lists one) against the signed manifest."""
    if manifest.tool is not None:
        tool = manifest.tool
        check_files(set_dir, [(tool.path, tool.size, tool.sha256)], on_progress)


def verify_provenance_files(
    set_dir: Path, manifest: Manifest, trusted: Mapping[str, PublicKey]
) -> dict[tuple[str, str], bytes]:
    """Each carried provenance statement, hashed against the signed manifest and verified
    (`provenance.check_item`), and the inventory beside it (`check_inventory`); the
    envelopes by (domain, version)."""
    carried: dict[tuple[str, str], bytes] = {}
    for item in manifest.items:
        entry = item.provenance
        if entry is None:
            continue
        with _open_member(set_dir, entry.name) as handle:
            envelope = handle.read(entry.size + 1)
        require_digest(
            entry.name, Digest(hash_bytes(envelope), len(envelope)), entry.sha256, entry.size
        )
        check_inventory(set_dir, item, check_item(envelope, item, trusted))
        carried[(item.domain, item.version)] = envelope
    return carried


def check_inventory(set_dir: Path, item: ManifestItem, proven: Provenance) -> None:
    """The item's SPDX inventory is the one its verified statement signs (predicate
    `inventory.sha256`), and its bytes hash to it: IntegrityError (exit 5) otherwise, and for
    a statement that signs an inventory the set does not carry."""
    said = proven.predicate.get("inventory")
    signed = said.get("sha256") if isinstance(said, dict) else None
    entry = item.inventory
    if entry is None and signed is None:
        return
    if entry is None or signed != entry.sha256:
        what = entry.name if entry is not None else f"the inventory of {item.label}"
        raise IntegrityError(f"{what} is not the inventory {item.label}'s provenance signs")
    check_files(set_dir, [(entry.name, entry.size, entry.sha256)])


def read_inventory(set_dir: Path, item: ManifestItem) -> bytes:
    """The item's carried inventory, read once more to publish it and hashed against the
    signed manifest again (the media may have changed since `verify_set`)."""
    entry = item.inventory
    assert entry is not None
    with _open_member(set_dir, entry.name) as handle:
        data = handle.read(entry.size + 1)
    require_digest(entry.name, Digest(hash_bytes(data), len(data)), entry.sha256, entry.size)
    return data


def check_files(
    set_dir: Path, files: list[tuple[str, int, str]], on_progress: Progress | None = None
) -> None:
    """Hash each (name, size, sha256) file of the set once, one thread per core; IntegrityError
    names the first bad one in the order given."""

    def check(file: tuple[str, int, str]) -> None:
        name, size, sha256 = file
        with _open_member(set_dir, name) as handle:
            digest = hash_stream(handle, on_progress=on_progress, limit=size + 1)
        require_digest(name, digest, sha256, size)

    for _ in map_on_cores(check, files):
        pass


def _open_member(set_dir: Path, name: str) -> BinaryIO:
    """A file of the set, opened without following a link; IntegrityError names it."""
    try:
        fd = os.open(set_dir / name, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        raise IntegrityError(f"{name} is missing from the transfer set") from None
    except OSError:
        raise IntegrityError(f"{name} is missing or not a regular file") from None
    return os.fdopen(fd, "rb", buffering=0)


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
    if any(item.provenance is not None for item in manifest.items):
        allowed_top.add(PROVENANCE_DIR)
    for entry in sorted(os.scandir(set_dir), key=lambda e: e.name):
        if entry.name not in allowed_top and not RECEIPT_TEMP.match(entry.name):
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


class BlobReader:
    """Reads one blob by joining its parts, checking each part as it passes.

    Raises IntegrityError naming the part as soon as a part ends with the wrong
    size or sha256, or is longer than the manifest says. The joined bytes' own
    sha256 is the consumer's to check (the import's staged upload hashes them).
    With `check_parts=False` only the sizes are checked as the bytes pass: a consumer
    that hashes the whole blob anyway saves a second sha256 of every byte, and names
    the damaged part with `find_damaged_part` only when the whole does not match.
    """

    def __init__(self, set_dir: Path, item: ManifestItem, *, check_parts: bool = True) -> None:
        self.set_dir = set_dir
        self.item = item
        self.check_parts = check_parts
        self._parts = list(item.parts)
        self._index = -1
        self._handle: BinaryIO | None = None
        self._part_digest: HashingWriter | None = None
        self._part_bytes = 0
        self._done = False

    def __enter__(self) -> BlobReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None

    def _next_part(self) -> BinaryIO | None:
        self.close()
        self._index += 1
        if self._index >= len(self._parts):
            self._done = True
            return None
        self._handle = _open_member(self.set_dir, self._parts[self._index].name)
        self._part_digest = HashingWriter() if self.check_parts else None
        self._part_bytes = 0
        return self._handle

    def _finish_part(self) -> None:
        part = self._parts[self._index]
        if self._part_bytes != part.size:
            raise IntegrityError(
                f"{part.name}: {self._part_bytes} bytes, the manifest says {part.size}"
            )
        if self._part_digest is not None:
            require_digest(part.name, self._part_digest.result, part.sha256)

    def read(self, size: int = -1, /) -> bytes:
        want = CHUNK_SIZE if size is None or size < 0 else size
        handle = self._handle
        while not self._done:
            if handle is None:
                handle = self._next_part()
                continue
            part = self._parts[self._index]
            limit = min(want, part.size + 1 - self._part_bytes)
            chunk = handle.read(limit) if limit > 0 else b""
            if chunk:
                self._part_bytes += len(chunk)
                if self._part_bytes > part.size:
                    raise IntegrityError(
                        f"{part.name}: longer than the {part.size} bytes the manifest says"
                    )
                if self._part_digest is not None:
                    self._part_digest.write(chunk)
                return chunk
            self._finish_part()
            handle = self._next_part()
        return b""


def find_damaged_part(set_dir: Path, item: ManifestItem) -> IntegrityError | None:
    """The error naming the first of `item`'s parts whose bytes differ from the manifest,
    or None when every part matches (read again: only after the whole blob did not)."""
    try:
        with BlobReader(set_dir, item) as reader:
            while reader.read(CHUNK_SIZE):
                pass
    except IntegrityError as exc:
        return exc
    return None
