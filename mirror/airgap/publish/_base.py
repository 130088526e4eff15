"""What every publisher shares: the bucket it reads, the remedy it names, the base it uses.

Promises:
- Every refusal of a delta this side cannot publish (its base missing, another version,
  damaged or holding another tree; a content neither carried nor in the base; a delta
  whose blob, file list or contents are wrong, or that does not make the signed archive)
  names one remedy, `carry_whole`: pack the refused set's versions again, whole
  (`mirror transfer pack --full --from-set N OUT`), and import that set. The import
  accepts it in its new sequence, whatever was published before (mirror.airgap.importer:
  a version already there with the same tree is there).
- `base_manifest` proves the bucket's base version is the signed base (its tree), and is
  not another item of the same set.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import IO, Any, Protocol, cast

from mirror.airgap import layout
from mirror.archive import ArchiveLimits, read_archive_stream
from mirror.errors import IntegrityError
from mirror.integrity import CHUNK_SIZE, Digest, HashingWriter
from mirror.transferset.format import ManifestItem

Bases = Mapping[tuple[str, str], layout.VersionManifest]
"""Base manifests by (domain, version), as `check_deltas` proved them."""


class Store(layout.Bucket, Protocol):
    """What a publisher needs of mirror.airgap.s3.objectstore.ObjectStore."""

    @property
    def prefix(self) -> str: ...

    def open_stream(self, key: str) -> Iterator[bytes]: ...

    def head(self, key: str) -> dict[str, Any] | None: ...


def carry_whole(sequence: int, site: str | None = None) -> str:
    """The remedy for a delta set this side cannot publish: its versions again, whole, in a
    new set (the connected side knows which versions set `sequence` carried). A set packed
    for a named site names it: with several sites the pack refuses to guess."""
    for_site = f"--site {site} " if site else ""
    return (
        f"run `mirror transfer pack {for_site}--full --from-set {sequence} OUT` on the "
        "connected side and import that set"
    )


@contextlib.contextmanager
def remedy_named(sequence: int, site: str | None) -> Iterator[None]:
    """A refusal of what a delta's blob holds names the remedy (`carry_whole`)."""
    try:
        yield
    except IntegrityError as exc:
        if exc.hint is not None:
            raise
        raise IntegrityError(exc.message, hint=carry_whole(sequence, site)) from None


def where(store: Store) -> str:
    return f"{store.bucket}/{store.prefix}" if store.prefix else store.bucket


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
    if base is None:
        raise IntegrityError(
            f"{item.label} is a delta against {item.domain} {base_version}, which is not in "
            f"{where(store)}; nothing was published",
            hint=remedy,
        )
    if base.tree_sha256 != item.delta.base_tree_sha256:
        raise IntegrityError(
            f"{item.label}: wrong base: {item.domain} {base_version} in {where(store)} holds "
            f"tree {base.tree_sha256[:12]}, the delta was made against tree "
            f"{item.delta.base_tree_sha256[:12]}; nothing was published",
            hint=remedy,
        )
    return base


def require_base_object(
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


def read_back(store: Store, key: str, size: int) -> tuple[str, Digest]:
    """The tree and digest of the tar.gz object at `key` (of `size` bytes), read once (as a
    rebuild reads its base): an object in place is what its identity metadata claims only
    once its bytes say so. IntegrityError when it is no safe archive."""
    source = HashingStream(store.open_stream(key))
    stream = cast(IO[bytes], source)
    name = f"{store.bucket}/{key}"
    report = read_archive_stream(stream, "tar.gz", size, None, ArchiveLimits(), name=name)
    source.drain()
    return report.tree_sha256, source.digest


def manifest_fields(item: ManifestItem) -> dict[str, Any]:
    """The extra fields of a per-version manifest: for a version carried as a delta, its base;
    for one carried with a provenance, the bundle the statement is about (for a delta the one
    it was made from), so that `mirror serve` sees a statement gone from the bucket as a
    downgrade, never as a version imported without one."""
    fields: dict[str, Any] = {}
    if item.delta is not None:
        fields |= {"delta_base": item.delta.base_version, "delta_sha256": item.sha256}
    if item.provenance is not None:
        fields["provenance_subject"] = item.provenance.subject_sha256
    return fields


class HashingStream:
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

    def drain(self) -> None:
        while self.read(CHUNK_SIZE):
            pass

    def matches(self, sha256: str, size: int) -> bool:
        return self._hashing.result == Digest(sha256, size)

    @property
    def digest(self) -> Digest:
        return self._hashing.result
