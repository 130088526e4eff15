"""The splice's plan: which base member the spliced archive keeps, replaces or drops.

`SplicePlan` decides each base file from the signed file list alone, in one pass of the
base: a path the list lacks is dropped; a second member at a path already written is
dropped; a listed path whose content the delta carries gets that content in its place; any
other listed path is kept, and its bytes, hashed as they pass, must be the listed content
(else IntegrityError). The listed files the base does not hold are appended in file-list
order and must be carried (else IntegrityError). So the archive holds every listed file
once, with its listed content, beside the base's directories. The import splices with it
(`mirror.airgap.publish`); the pack makes the same archive with it to record its recipe
(`mirror.outbound.recipe`). Memory does not grow with the site: the maps are `mirror.archive.spill`.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from typing import Protocol

from mirror.archive.spill import FileList, SpillMap
from mirror.errors import IntegrityError
from mirror.transferset.delta._splice import NewFile

_BATCH = 8192


class Carried(Protocol):
    """The contents the delta carried, checked and spooled (`Contents`)."""

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
