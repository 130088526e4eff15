"""Reading a transfer set from disk: verify every file, and read blobs back from their parts.

Promises:
- `verify_set` trusts nothing in the directory before the signature has been
  checked against a trusted key (by the trust core, on the bytes); it then checks
  every path, every part's size and sha256, every blob's whole sha256 and the
  tool's, and that SHA256SUMS (when present) says exactly what the signed manifest
  implies; it names the first bad file (IntegrityError, exit 5).
- Memory does not grow with blob size: everything is streamed in CHUNK_SIZE
  pieces and hashed in the same pass.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mirror.errors import IntegrityError, NotFound
from mirror.fsutil import CHUNK_SIZE
from mirror.transferset.format import (
    BLOBS,
    MANIFEST,
    MAX_MANIFEST_BYTES,
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
from mirror.transferset.hashing import BackgroundSha256, stream_sha256
from mirror.transferset.keys import PublicKey, read_signature_bytes
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
    require_trusted(trusted)
    data = read_manifest_bytes(set_dir)
    _regular_file(set_dir / SIGNATURE, SIGNATURE)
    signature = read_signature_bytes(set_dir / SIGNATURE)
    checked = verify_manifest(data, signature, trusted)
    manifest = checked.manifest
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
    return VerifiedSet(set_dir, manifest, data, checked.manifest_sha256, checked.key_id)


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
        sha256, size = stream_sha256(handle, on_progress)
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
