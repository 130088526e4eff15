"""Each stored bundle's file digests, kept beside it, so a delta pack takes the base's files
from here, not from reading its bundle.

The listing of blob `sha256` is `ROOT/digests/sha256/ab/<sha256>.gz` (`BlobStore.digests_path`):
gzip of a first line ``mirror-file-digests 1 <tree_sha256>`` then one line per regular file,
``<sha256> <size> <path>``, in the tree hash's order (paths by their UTF-8 bytes). A checked
path holds no line break (control characters are refused), so a line is a file.

Why a sidecar and not rows of the SQL index: a site of 200,000 files is one 4 MiB file
written in one sequential pass (about 0.3 s) and read back as a stream, where 200,000 rows
would grow the index (and every backup of it) by tens of MiB for data that only deltas use
and that the bundle itself can always give again.

Promises:
- `keep` writes a listing from an inspection's report (`ArchiveReport.digests`) or from any
  (path, size, sha256) list in tree order: a temp file renamed into place, so a listing path
  exists only whole. It never fails the caller's work: a listing that cannot be written is
  logged and skipped (the pack then reads the bundle, as for versions stored before
  listings existed).
- `load` gives a bundle's files only when its listing is whole and hashes to the tree the
  index records for the bundle; otherwise None (missing, damaged or another tree: a
  damaged listing is removed), and the caller scans the bundle.
- `BlobStore.remove` removes a blob's listing with it.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import logging
import os
import zlib
from collections.abc import Iterable

from mirror.archive import ArchiveReport
from mirror.archive.spill import FileList
from mirror.store.blobs import BlobStore

MAGIC = "mirror-file-digests"
FORMAT = 1
log = logging.getLogger(__name__)


def keep(
    store: BlobStore, sha256: str, tree_sha256: str, files: Iterable[tuple[str, int, str]]
) -> bool:
    """Write the listing of blob `sha256` (files in tree order); whether it was written."""
    target = store.digests_path(sha256)
    temp = store.temp_path(f"digests-{os.getpid()}-{sha256}")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(temp, "wb") as raw:
            with gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=1, mtime=0) as out:
                out.write(f"{MAGIC} {FORMAT} {tree_sha256}\n".encode())
                for path, size, digest in files:
                    out.write(f"{digest} {size} {path}\n".encode())
            raw.flush()
            os.fsync(raw.fileno())
        os.replace(temp, target)
        return True
    except OSError as exc:
        log.warning("cannot keep the file digests of bundle %s: %s", sha256[:12], exc)
        with contextlib.suppress(OSError):
            temp.unlink()
        return False


def keep_report(store: BlobStore, sha256: str, report: ArchiveReport) -> bool:
    """Keep the listing of a checked archive stored as blob `sha256`, from its inspection;
    False when the report lists no files (made elsewhere) or it could not be written."""
    if report.digests is None:
        return False
    return keep(store, sha256, report.tree_sha256, report.digests)


def load(
    store: BlobStore, sha256: str, tree_sha256: str, directory: str | None = None
) -> FileList | None:
    """The files of blob `sha256` from its listing, proven against `tree_sha256`; None
    when there is no whole listing of that tree (module docstring)."""
    path = store.digests_path(sha256)
    files = FileList(directory)
    try:
        with gzip.open(path, "rb") as listing:
            header = listing.readline().decode().split()
            if header != [MAGIC, str(FORMAT), tree_sha256]:
                raise ValueError("another tree or format")
            hashed = hashlib.sha256()
            for raw in listing:
                digest, size, name = raw.decode().rstrip("\n").split(" ", 2)
                hashed.update(name.encode() + b"\0" + digest.encode("ascii") + b"\n")
                files.append(name, int(size), digest)
            if hashed.hexdigest() != tree_sha256:
                raise ValueError("its lines do not hash to the tree")
    except FileNotFoundError:
        files.close()
        return None
    except (OSError, EOFError, ValueError, UnicodeError, zlib.error) as exc:
        files.close()
        log.warning("the file digests of bundle %s are unusable (%s); removed", sha256[:12], exc)
        with contextlib.suppress(OSError):
            path.unlink()
        return None
    return files
