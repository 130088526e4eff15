"""The import's side of a spliced delta: the base object edited, proved against the file list.

A spliced delta (`DeltaEntry.spliced`) signs no archive digest: the archive is the base
object the bucket holds, edited (`mirror.transferset.splice`), and what is proved is its tree.

Promises:
- `SplicePlan` (which the pack uses too, to make the archive it records as a recipe:
  `mirror.outbound.recipe`) decides each base file from the signed file list alone, in one
  pass of the base: a path the list lacks is dropped; a second member at a path already written is
  dropped; a listed path whose content the delta carries gets that content in its place;
  any other listed path is kept, and its bytes, hashed as they pass, must be the listed
  content (else IntegrityError). The listed files the base does not hold are appended in
  file-list order and must be carried (else IntegrityError: neither carried nor in the base
  at that path). So the archive holds every listed file once, with its listed content,
  beside the base's directories. A base member that is neither a regular file nor a
  directory is IntegrityError (no bundle holds one: the base is not what was imported).
- `splice_base` streams the base object from the bucket through the splice to `write`, and
  checks the base's bytes against its version manifest (sha256 and size) once read. When
  the splice refuses anything, the caller names the cause by reading the base once more
  (`rebuild.RebuiltArchive`: a base damaged, replaced or holding another tree is refused as
  such, whatever the splice met first).
- Memory does not grow with the site: the list's paths and the paths written are
  `mirror.spill` maps.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Protocol

from mirror.airgap import layout
from mirror.airgap.pipe import Pipe
from mirror.archive import TreePaths
from mirror.errors import IntegrityError
from mirror.integrity import Digest, HashingWriter
from mirror.spill import FileList, SpillMap
from mirror.transferset.splice import NewFile, splice_tree

SPLICEABLE_FORMAT = "tar.gz"
_BATCH = 8192


class Carried(Protocol):
    """The contents the delta carried, checked and spooled (`rebuild.Contents`)."""

    def __contains__(self, sha256: str) -> bool: ...

    def chunks(self, sha256: str) -> Iterator[bytes]: ...


class SplicePlan:
    """The `TreePlan` of an import (module docstring); a context manager (its maps)."""

    def __init__(self, files: FileList, carried: Carried) -> None:
        self._files = files
        self._carried = carried
        self._listed = SpillMap()
        self._written = SpillMap()
        listed = ((path, f"{sha256} {size}") for path, size, sha256 in files)
        while batch := list(itertools.islice(listed, _BATCH)):
            self._listed.insert(batch)  # the list's paths are distinct (read_file_list)

    def __enter__(self) -> SplicePlan:
        return self

    def __exit__(self, *exc: object) -> None:
        self._listed.close()
        self._written.close()

    def member(self, path: str, size: int) -> NewFile | bool:
        listed = self._listed.get(path)
        if listed is None or not self._written.add(path):
            return False
        sha256, listed_size = listed.split()
        if sha256 in self._carried:
            return self._carried_file(path, int(listed_size), sha256)
        if int(listed_size) != size:
            raise IntegrityError(
                f"{path}: the base holds {size} bytes there, the file list {listed_size}, "
                "and the delta does not carry its content"
            )
        return True

    def kept(self, path: str, sha256: str, size: int) -> None:
        listed = self._listed.get(path)
        assert listed is not None  # only listed paths are kept
        if listed.split()[0] != sha256:
            raise IntegrityError(
                f"{path}: the base holds content {sha256[:12]} there, the file list "
                f"{listed.split()[0][:12]}, and the delta does not carry it"
            )

    def added(self) -> Iterable[NewFile]:
        for path, size, sha256 in self._files:
            if path in self._written:
                continue
            if sha256 not in self._carried:
                raise IntegrityError(
                    f"{path}: its content {sha256[:12]} is neither in the delta nor in the "
                    "base at that path"
                )
            self._written.add(path)
            yield self._carried_file(path, size, sha256)

    def _carried_file(self, path: str, size: int, sha256: str) -> NewFile:
        return NewFile(path, size, lambda: self._carried.chunks(sha256))


class BaseObjects(Protocol):
    """What `splice_base` needs of the bucket."""

    @property
    def bucket(self) -> str: ...

    def open_stream(self, key: str) -> Iterator[bytes]: ...


def splice_base(
    store: BaseObjects,
    base: layout.VersionManifest,
    plan: SplicePlan,
    write: Callable[[bytes], Any],
    *,
    mtime: int,
    level: int,
    listed: TreePaths,
) -> None:
    """The spliced archive of `base` (its object streamed from `store`) under `plan`, to
    `write`; IntegrityError naming the base when its object is not spliceable, or not the
    bytes its manifest names. `listed` holds the checked paths of the plan's file list
    (`read_file_list`): the base's directories must stand beside them. The base is fetched
    and hashed on a thread of its own (`Pipe`), a few pieces ahead of the splice."""
    where = f"{store.bucket}/{base.object}"
    if base.archive_format != SPLICEABLE_FORMAT:
        raise IntegrityError(f"{where} is a {base.archive_format} archive; a splice needs tar.gz")
    read = HashingWriter()

    def fetch(put: Callable[[bytes], None]) -> None:
        for chunk in store.open_stream(base.object):
            read.write(chunk)
            put(chunk)

    pipe = Pipe(fetch, name="base")
    try:
        source = iter(pipe.get, None)
        splice_tree(source, plan, write, mtime=mtime, level=level, label=where, listed=listed)
        for _ in source:
            pass
    finally:
        pipe.close()
    if read.result != Digest(base.sha256, base.size):
        raise IntegrityError(
            f"{where} does not match its manifest (damaged or replaced; "
            "`mirror chart check` finds such versions)"
        )
