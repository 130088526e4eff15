"""Each stored bundle's file digests, kept beside it, so a delta pack takes the base's files
from here, not from reading its bundle.

The listing of blob `sha256` is `ROOT/digests/sha256/ab/<sha256>.gz` (`BlobStore.digests_path`):
gzip of a first line ``mirror-file-digests 2 <tree_sha256>`` then one line per regular file,
``<sha256> <size> <sha1> <path>`` (`-` for a SHA-1 not known), in the tree hash's order (paths
by their UTF-8 bytes). A checked path holds no line break (control characters are refused),
so a line is a file. Format 1 (kept before the SPDX inventory needed each file's SHA-1) has
no SHA-1 field; it is still read.

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
- `files_of` is the one way a pack gets a version's files: from its listing, or, for a
  bundle stored before listings (or their SHA-1s, when `sha1` is asked) were kept, or whose
  listing is damaged, from reading the bundle once (logged), whose listing is kept then, so
  the next pack reads none. A bundle whose tree is not the index's is IntegrityError.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import logging
import os
import zlib
from collections.abc import Iterable

from mirror.archive import ArchiveLimits, ArchiveReport, inspect_archive
from mirror.archive.spill import FileList
from mirror.integrity import mismatch
from mirror.store.blobs import BlobStore

MAGIC = "mirror-file-digests"
FORMAT = 2
READ_FORMATS = ("1", "2")
log = logging.getLogger(__name__)


def keep(
    store: BlobStore,
    sha256: str,
    tree_sha256: str,
    files: Iterable[tuple[str, int, str] | tuple[str, int, str, str | None]],
) -> bool:
    """Write the listing of blob `sha256` (files in tree order, each with its SHA-1 when
    known); whether it was written."""
    target = store.digests_path(sha256)
    temp = store.temp_path(f"digests-{os.getpid()}-{sha256}")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(temp, "wb") as raw:
            with gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=1, mtime=0) as out:
                out.write(f"{MAGIC} {FORMAT} {tree_sha256}\n".encode())
                for path, size, digest, *sha1 in files:
                    out.write(f"{digest} {size} {(sha1 or [None])[0] or '-'} {path}\n".encode())
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
    return keep(store, sha256, report.tree_sha256, report.digests.with_sha1())


def load(
    store: BlobStore, sha256: str, tree_sha256: str, directory: str | None = None
) -> FileList | None:
    """The files of blob `sha256` from its listing, proven against `tree_sha256`; None
    when there is no whole listing of that tree (module docstring)."""
    path = store.digests_path(sha256)
    files = FileList(directory)
    try:
        with gzip.open(path, "rb") as listing:
            magic, version, tree = listing.readline().decode().split()
            if magic != MAGIC or version not in READ_FORMATS or tree != tree_sha256:
                raise ValueError("another tree or format")
            hashed = hashlib.sha256()
            for raw in listing:
                digest, size, sha1, name = _line(raw, version)
                hashed.update(name.encode() + b"\0" + digest.encode("ascii") + b"\n")
                files.append(name, int(size), digest, sha1)
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


def _line(raw: bytes, version: str) -> tuple[str, str, str | None, str]:
    """(sha256, size, sha1 or None, path) of one listing line of format `version`."""
    text = raw.decode().rstrip("\n")
    if version == "1":
        digest, size, name = text.split(" ", 2)
        return digest, size, None, name
    digest, size, sha1, name = text.split(" ", 3)
    return digest, size, None if sha1 == "-" else sha1, name


def files_of(
    store: BlobStore,
    label: str,
    bundle_sha256: str,
    tree_sha256: str,
    limits: ArchiveLimits,
    *,
    sha1: bool = False,
) -> FileList:
    """A version's files in the tree's order (module docstring): from the listing kept
    beside its bundle, or from reading the bundle once (then kept). With `sha1`, a listing
    that lacks any file's SHA-1 (format 1) counts as none."""
    listing = load(store, bundle_sha256, tree_sha256, str(store.tmp_dir))
    if listing is not None and (not sha1 or all(s for *_, s in listing.with_sha1())):
        return listing
    if listing is not None:
        listing.close()
    log.info("version %s: no file digests kept beside its bundle; reading the bundle", label)
    report = inspect_archive(store.open(bundle_sha256), limits)
    if report.tree_sha256 != tree_sha256:
        raise mismatch(
            f"version {label}: the tree of its stored bundle",
            report.tree_sha256,
            tree_sha256,
            hint="the store is inconsistent with its index: run `mirror store verify`, "
            "or pack with --full",
        )
    assert report.digests is not None
    keep_report(store, bundle_sha256, report)
    return report.digests
