"""A whole item's blob as the import uploads it, its archive's tree hashed in the same read.

The signed manifest says which tree each item holds (`tree_sha256`), and its statement
agrees with it; but a signature proves who said it, not that it is true of the bytes. The
bucket's manifest then vouches for that tree, and `chart check`, `mirror serve` and a
later delta against this version all trust it. So the import proves it: every byte the
upload reads also goes to the archive inspection (`mirror.archive.ArchiveFeed`, on a
second thread, as a download's bytes do), and the read that ends the blob refuses
(IntegrityError, exit 5) an archive that breaks a rule or holds another tree. The upload
is staged, not completed: nothing of the set is published (`Staging` aborts them all).

Promises:
- The blob is read once: the sha256 of the upload and the tree hash see the same bytes.
  A zip's directory is at its end, so a zip is inspected from its file once read: a
  single-part blob from its part in the set, a blob of several parts from a copy written
  as it passes into a temporary file (in the import's work directory), removed after.
- `finish` proves the tree even when the upload did not read the blob (its object was
  already in the bucket, a re-run): it reads what is left, from the set.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import IO

from mirror.airgap.publish._workdir import work_root
from mirror.archive import ArchiveFeed, ArchiveLimits
from mirror.errors import IntegrityError
from mirror.integrity import CHUNK_SIZE
from mirror.transferset.format import ManifestItem
from mirror.transferset.reader import BlobReader

ZIP = "zip"


class TreeChecked:
    """Reads a whole item's blob (`BlobReader`) and proves its tree as it passes."""

    def __init__(self, set_dir: Path, item: ManifestItem, work_dir: Path | None) -> None:
        self.item = item
        self.blob = BlobReader(set_dir, item, check_parts=False)  # the upload hashes the whole
        self.copy: IO[bytes] | None = None
        path = set_dir / item.parts[0].name if item.parts else Path(item.label)
        if item.archive_format == ZIP and len(item.parts) > 1:
            self.copy = tempfile.NamedTemporaryFile(  # noqa: SIM115  (closed by `close`)
                dir=work_root(work_dir), prefix="mirror-zip-", suffix=".zip"
            )
            path = Path(self.copy.name)
        self.feed = ArchiveFeed(path, item.size, ArchiveLimits())
        self.proven = False

    def __enter__(self) -> TreeChecked:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.feed.close()
        self.blob.close()
        if self.copy is not None:
            self.copy.close()

    def read(self, size: int = -1, /) -> bytes:
        data = self.blob.read(size)
        if data:
            self.feed.feed(data)
            if self.copy is not None:
                self.copy.write(data)
        elif not self.proven:
            self._prove()
        return data

    def finish(self) -> None:
        """Read what the upload did not (all of it for an object already there) and prove
        the tree; nothing when the upload read the blob to its end."""
        while not self.proven:
            self.read(CHUNK_SIZE)

    def _prove(self) -> None:
        self.proven = True
        if self.copy is not None:
            self.copy.flush()
        item = self.item
        try:
            tree = self.feed.result(self.feed.fed).tree_sha256
        except IntegrityError as exc:
            raise IntegrityError(
                f"{item.label}: its bundle is no archive this side accepts: {exc}; "
                "refused, nothing was published"
            ) from None
        if tree != item.tree_sha256:
            raise IntegrityError(
                f"{item.label}: its bundle holds tree {tree[:12]}, and the signed manifest "
                f"(and its statement) name tree {item.tree_sha256[:12]}; refused, nothing "
                "was published",
                hint="the set says one site and carries another: run `mirror store verify` "
                "on the connected side, then pack the version again",
            )
