"""A delta's published archive as a readable stream for the ordinary upload.

Promises:
- `Published` is the stream every way's publisher is (`_ways`): nothing is read or fetched
  before its first `read` (a re-run whose object is already there costs nothing); then the
  publisher prepares what its archive needs in a locked work directory (`_workdir`) and
  makes the archive on a thread of its own as it is read (`_pipe`); a refusal is raised
  again by every later `read`, so no reader takes what follows it for the end; the work
  directory is removed on every path out. A full disk is TemporaryFailure naming the work
  directory; nothing was published.
- `FromDelta` reads a delta blob: its parts are each checked against their signed sha256
  before anything inside the blob is read (a damaged part is named as such, not as a
  broken archive); every carried content is spooled once to one work file and checked
  against its sha256 and the file list's size, the file list (read entry by entry) against
  the signed tree. Memory does not grow with the site (`mirror.archive.spill`).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import IO, cast

from mirror.airgap import layout
from mirror.airgap.publish._base import Store, carry_whole, remedy_named
from mirror.airgap.publish._pipe import Pipe
from mirror.airgap.publish._workdir import locked_work_dir, remove_work_dir, work_root
from mirror.archive import ArchiveLimits, TreePaths
from mirror.archive.spill import FileList, SpillMap
from mirror.errors import IntegrityError, OperationFailed
from mirror.fsutil import disk_full, is_disk_full
from mirror.integrity import CHUNK_SIZE, Digest, require_digest
from mirror.transferset.delta import (
    Contents,
    DeltaContent,
    DeltaFileList,
    DeltaRecipePart,
    TreeFile,
    check_tree,
    read_chunks,
    read_delta_blob,
    read_file_list,
)
from mirror.transferset.format import ManifestItem
from mirror.transferset.reader import BlobReader, check_files

Member = DeltaContent | DeltaRecipePart | DeltaFileList


class Published:
    """The archive a delta item of set `sequence` publishes, as a readable stream (module
    docstring). A way's publisher gives `prepare` and `generate`."""

    def __init__(
        self,
        set_dir: Path,
        item: ManifestItem,
        store: Store,
        base: layout.VersionManifest,
        *,
        sequence: int,
        site: str | None = None,
        work_dir: Path | None = None,
    ) -> None:
        assert item.delta is not None
        self.set_dir, self.item, self.store, self.base = set_dir, item, store, base
        self.sequence, self.site = sequence, site
        self.root = work_root(work_dir)
        self.limits = ArchiveLimits()
        self.work: Path | None = None
        self._lock: int | None = None
        self._pipe: Pipe | None = None
        self._buffer = bytearray()
        self._done = False
        self._failed: BaseException | None = None

    def prepare(self, work: Path) -> None:
        """What the archive needs, read and checked, in the work directory."""

    def generate(self, put: Callable[[bytes], None]) -> None:
        raise NotImplementedError

    def release(self) -> None:
        """Close what `prepare` opened."""

    def __enter__(self) -> Published:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._pipe is not None:
            self._pipe.close()
            self._pipe = None
        self.release()
        if self.work is not None:
            remove_work_dir(self.work)
            self.work = None
        if self._lock is not None:
            os.close(self._lock)
            self._lock = None

    def read(self, size: int = -1, /) -> bytes:
        """Up to `size` bytes of the archive (b"" at its end); a refusal is raised again by
        every later call."""
        if self._failed is not None:
            raise self._failed
        try:
            return self._read(CHUNK_SIZE if size is None or size < 0 else size)
        except BaseException as exc:
            self._failed = exc
            raise

    def _read(self, want: int) -> bytes:
        if self._pipe is None and not self._done:
            self._start()
            self._pipe = Pipe(self.generate, name="rebuild")
        while len(self._buffer) < want and self._pipe is not None:
            piece = self._pipe.get()
            if piece is None:
                self._pipe.close()
                self._pipe = None
                self._done = True
                break
            if not self._buffer and len(piece) <= want:
                return piece
            self._buffer += piece
        with memoryview(self._buffer) as view:
            data = bytes(view[:want])
        del self._buffer[:want]
        return data

    def _start(self) -> None:
        try:
            self.work, self._lock = locked_work_dir(self.root)
            with remedy_named(self.sequence, self.site):
                self.prepare(self.work)
        except OSError as exc:
            if is_disk_full(exc):
                raise disk_full(self.root, None, "nothing was published") from None
            raise OperationFailed(
                f"cannot rebuild {self.item.label} in {self.root}: {exc.strerror or exc}"
            ) from None

    def refused(self, what: str) -> IntegrityError:
        """A refusal of this delta (not of the medium): carrying the version whole mends it."""
        return IntegrityError(
            f"{self.item.label}: {what}; nothing was published",
            hint=carry_whole(self.sequence, self.site),
        )

    def require(
        self, what: str, actual: Digest | str, sha256: str, size: int | None = None
    ) -> None:
        """mirror.integrity's one digest check, refused as this delta (carry it whole)."""
        try:
            require_digest(what, actual, sha256, size)
        except IntegrityError as exc:
            raise self.refused(exc.message) from None

    @property
    def base_label(self) -> str:
        return f"{self.base.domain} {self.base.version}"

    def read_blob(self, take: Callable[[Member], bool]) -> None:
        """Every member of the delta blob to `take`, which reads those it wants (True); the
        rest are read past. The parts are checked first; the blob's last part and its whole
        sha256 at its end (`BlobReader`)."""
        check_files(self.set_dir, [(p.name, p.size, p.sha256) for p in self.item.parts])
        with BlobReader(self.set_dir, self.item) as blob:
            for member in read_delta_blob(cast(IO[bytes], blob), label=self.item.label):
                if not take(member):
                    for _ in read_chunks(member.stream):
                        pass
            while blob.read(CHUNK_SIZE):
                pass


class FromDelta(Published):
    """A publisher made of the delta's carried contents and file list (module docstring)."""

    contents: Contents | None = None
    files: FileList | None = None

    def prepare(self, work: Path) -> None:
        self.contents = Contents(work / "contents")
        self.files = FileList(str(work))
        self.listed = TreePaths(self.limits)  # the list's paths, beside which a splice writes
        with SpillMap() as carried:
            self.read_blob(lambda member: self._take(member, carried))
            check_tree(
                (TreeFile(p, s, h) for p, s, h in self.files),
                self.item.tree_sha256,
                label=self.item.label,
            )
            self._check_carried(carried)

    def release(self) -> None:
        for held in (self.contents, self.files, getattr(self, "listed", None)):
            if held is not None:
                held.close()
        self.contents = self.files = None

    def _take(self, member: Member, carried: SpillMap) -> bool:
        assert self.contents is not None and self.files is not None
        if isinstance(member, DeltaContent):
            with self.contents.adding() as content:
                for chunk in read_chunks(member.stream):
                    content.write(chunk)
                content.finish({member.sha256})
            what = f"content {member.sha256[:12]} from the delta"
            self.require(what, content.result, member.sha256, member.size)
            carried[member.sha256] = str(member.size)
            return True
        if isinstance(member, DeltaFileList):
            entries = read_file_list(member.stream, label=self.item.label, paths=self.listed)
            self.files.extend((e.path, e.size, e.sha256) for e in entries)
            return True
        return False  # a recipe: not replayed, this base object is not the recipe's

    def _check_carried(self, carried: SpillMap) -> None:
        assert self.files is not None
        with SpillMap() as sizes:
            for _, length, sha256 in self.files:
                sizes[sha256] = str(length)
            for sha256, size in carried.sorted_items():
                listed = sizes.get(sha256)
                if listed is None:
                    raise self.refused(
                        f"the delta carries content {sha256[:12]}, which no file uses"
                    )
                if listed != size:
                    raise self.refused(
                        f"content {sha256[:12]} holds {size} bytes, the file list says {listed}"
                    )
