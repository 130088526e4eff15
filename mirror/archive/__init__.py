"""Bundle archives: what format they are, whether they are safe to unpack, what they contain.

A vendor bundle is checked before anything is stored or published. Promises:

- the format is decided by the file's first bytes, never by its name;
- an archive is accepted only if unpacking it can create nothing but regular
  files and directories strictly inside the target, each path exactly once,
  within the size and count limits; anything else raises `IntegrityError`
  (exit 5) with a one-line message naming the member and the rule it breaks;
- reading is streamed in 1 MiB chunks: memory does not grow with member or
  archive size (only with the number of members, which `max_files` bounds);
- sizes are counted on the bytes actually read, so lying headers gain nothing;
- damaged input (truncation, bad checksums, trailing data after the tar
  end-of-archive marker) is refused as `corrupt archive`.

The package by concern: `formats` (sniffing), `paths` (the path rules), `treehash` (the tree
hash), `members` (a member, the sink, the tally), `check` (the one inspection), `tarreader` and
`zipreader` (the format readers), `feed` (the inspection on bytes as they arrive), `extract`
(unpacking). What other packages use is re-exported here; the tree hash is defined in
`mirror.archive.treehash`.
"""

from __future__ import annotations

from mirror.archive.check import (
    ArchiveReport,
    inspect_archive,
    read_archive,
    read_archive_stream,
)
from mirror.archive.extract import extract_archive
from mirror.archive.feed import FEED_DEPTH, ArchiveFeed
from mirror.archive.formats import Format, detect_format, file_extension
from mirror.archive.members import RATIO_FLOOR, FileSink
from mirror.archive.paths import (
    MAX_NAME_COMPONENT_BYTES,
    ArchiveLimits,
    TreePaths,
    check_tree_paths,
    file_at_the_root,
    member_path,
)
from mirror.archive.tarreader import MAX_TAR_EXTENDED_HEADER
from mirror.archive.treehash import tree_hash

__all__ = [
    "FEED_DEPTH",
    "MAX_NAME_COMPONENT_BYTES",
    "MAX_TAR_EXTENDED_HEADER",
    "RATIO_FLOOR",
    "ArchiveFeed",
    "ArchiveLimits",
    "ArchiveReport",
    "FileSink",
    "Format",
    "TreePaths",
    "check_tree_paths",
    "detect_format",
    "extract_archive",
    "file_at_the_root",
    "file_extension",
    "inspect_archive",
    "member_path",
    "read_archive",
    "read_archive_stream",
    "tree_hash",
]
