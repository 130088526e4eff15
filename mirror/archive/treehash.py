"""The tree hash (`tree_sha256`), the content identity of a site, independent of the
archive format, member order, timestamps, owners, modes and compression:

- take every regular file; directories are ignored;
- its path is the member name split on "/", without empty and "." components
  (so no leading "./", no trailing "/"), ".." resolved, joined with "/";
- sort the files by the UTF-8 bytes of that path;
- ``tree_sha256 = sha256( for each file: path_utf8 + b"\\0" + sha256_hex + b"\\n" )``
  where ``sha256_hex`` is the file content's lowercase hex digest in ASCII.

An archive holding no files hashes to sha256 of the empty string.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

from mirror.archive.spill import FileList, SpillMap


def tree_hash(files: Iterable[tuple[str, str]]) -> str:
    """The tree hash (module docstring) of `(normalised_path, file_sha256_hex)` pairs, sorted
    on disk past `spill.SPILL_AT` of them (a pair given twice counts once)."""
    digest = hashlib.sha256()
    with SpillMap() as ordered:
        for path, hex_digest in files:
            ordered[f"{path}\0{hex_digest}"] = ""
        for key, _ in ordered.sorted_items():
            digest.update(key.encode("utf-8") + b"\n")
    return digest.hexdigest()


def tree_of(files: SpillMap) -> tuple[str, FileList]:
    """The tree hash of {path: "sha256 size [sha1]"} and its files in that order, in one pass."""
    digests = FileList()
    hashed = hashlib.sha256()
    for path, value in files.sorted_items():
        sha256, length, *sha1 = value.split(" ")
        hashed.update(path.encode("utf-8") + b"\0" + sha256.encode("ascii") + b"\n")
        digests.append(path, int(length), sha256, sha1[0] if sha1 else None)
    return hashed.hexdigest(), digests


def has_index_html(files: SpillMap) -> bool:
    if "index.html" in files:
        return True
    tops: set[str] = set()
    for path, _ in files.sorted_items():
        tops.add(path.partition("/")[0])
        if len(tops) > 1:
            return False
    return len(tops) == 1 and f"{tops.pop()}/index.html" in files
