"""The path rules of an archive's members: safe, normalised, each path once, no twins.

A member is accepted only if unpacking it creates nothing outside the target; `normalise`
spells every path as every check and listing does. `unsafe` makes the one refusal.
"""

from __future__ import annotations

import contextlib
import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass, field

from mirror.archive.spill import SpillMap
from mirror.errors import IntegrityError

MAX_NAME_COMPONENT_BYTES = 255


_RECENT_DIRECTORIES = 4096
_CONTROL = re.compile("[\x00-\x1f\x7f]")


@dataclass(frozen=True)
class ArchiveLimits:
    """Refusal thresholds. The ratio guard applies only once the total passes 64 MiB."""

    max_files: int = 200_000
    max_total_bytes: int = 32 * 1024**3
    max_member_bytes: int = 8 * 1024**3
    max_ratio: float = 200.0
    max_path_length: int = 1024
    allow_case_twins: bool = False


def check_tree_paths(paths: Iterable[str], limits: ArchiveLimits = ArchiveLimits()) -> None:
    """Refuse a list of file paths that an archive checked by this module could not hold:
    not already normalised, unsafe, duplicated, a file below a file, or name twins.
    IntegrityError (exit 5) names the first bad path."""
    with contextlib.closing(TreePaths(limits)) as checker:
        for path in paths:
            checker.check(path)


class TreePaths:
    """`check_tree_paths` one path at a time, as a list streams past (memory flat: the
    tables move to disk as they grow); `close` frees them."""

    def __init__(self, limits: ArchiveLimits = ArchiveLimits()) -> None:
        self._limits = limits
        self._seen = SeenPaths(allow_case_twins=limits.allow_case_twins)
        self._count = 0

    def check(self, path: str) -> None:
        self._count += 1
        if self._count > self._limits.max_files:
            raise unsafe(path, f"is past the limit of {self._limits.max_files} files")
        if normalise(path, self._limits) != path:
            raise unsafe(path, "is not a normalised path below the root")
        self._seen.claim(path, path, is_dir=False)
        self._seen.files[path] = ""

    def directory(self, path: str | None) -> None:
        """A directory member beside the files (an archive being written holds both),
        counted with them against `max_files` as `mirror.archive` counts members (None: one
        naming the root itself, './', a member of no path); one known already (the parent
        of a file checked) costs one lookup."""
        self._count += 1
        if self._count > self._limits.max_files:
            raise unsafe(path or ".", f"is past the limit of {self._limits.max_files} members")
        if path is None or path in self._seen.directories:
            return
        if normalise(path, self._limits) != path:
            raise unsafe(path, "is not a normalised path below the root")
        self._seen.claim(path, path, is_dir=True)

    def close(self) -> None:
        self._seen.close()


@dataclass
class SeenPaths:
    """The paths seen so far, to refuse duplicates, file/directory clashes and name twins.

    Twins are two different paths that one volume may store as one: equal after Unicode
    NFC normalisation (always refused: macOS and some NAS volumes normalise) or after case
    folding (refused unless `allow_case_twins`: Windows, macOS and most USB disks fold case).
    On such a volume one would silently overwrite the other. One table finds both: keyed by
    the folded form (NFC twins fold alike), or by the NFC form when case twins are allowed.
    The tables move to disk past `spill.SPILL_AT` entries (memory flat in the file count);
    `files` maps each file to "sha256 size"."""

    allow_case_twins: bool = False
    files: SpillMap = field(default_factory=SpillMap)
    directories: SpillMap = field(default_factory=SpillMap)
    twins: SpillMap = field(default_factory=SpillMap)
    recent: dict[str, None] = field(default_factory=dict)

    def close(self) -> None:
        for table in (self.files, self.directories, self.twins):
            table.close()

    def check_twins(self, name: str, clean: str) -> None:
        """Refuse `clean` (from member `name`) if an earlier, different path is its twin."""
        nfc = unicodedata.normalize("NFC", clean)
        key = nfc if self.allow_case_twins else unicodedata.normalize("NFC", nfc.casefold())
        other_clean, _, other_name = self.twins.setdefault(key, f"{clean}\0{name}").partition("\0")
        if other_clean == clean:
            return
        same_nfc = unicodedata.normalize("NFC", other_clean) == nfc
        how = "after Unicode NFC normalisation" if same_nfc else "when letter case is ignored"
        raise IntegrityError(
            f"unsafe archive: members {quote(other_name)} and {quote(name)} name the same "
            f"path {how} ({quote(other_clean)} and {quote(clean)}); on such a volume one "
            "would overwrite the other"
            + ("" if same_nfc else " (store.allow_case_twins allows it)")
        )

    def claim(self, name: str, clean: str, *, is_dir: bool) -> None:
        prefix = ""
        for part in clean.split("/"):
            prefix = f"{prefix}/{part}" if prefix else part
            if prefix not in self.recent:  # a directory met lately was checked already
                self.check_twins(name, prefix)
        if clean in self.files:
            raise unsafe(name, f"duplicates the path '{clean}' (ambiguous content)")
        if not is_dir and clean in self.directories:
            raise unsafe(name, f"is a file but '{clean}' is also a directory")
        parent = clean.rpartition("/")[0]
        while parent and parent not in self.recent and parent not in self.directories:
            if parent in self.files:
                raise unsafe(name, f"lies below '{parent}', which is a file")
            self.directories.add(parent)
            parent = parent.rpartition("/")[0]
        self._remember(clean if is_dir else clean.rpartition("/")[0])
        if is_dir:
            self.directories.add(clean)

    def _remember(self, directory: str) -> None:
        """Keep the directory and its parents (all claimed and checked) among the recent
        ones: files come grouped by folder, so most lookups stop here, not on disk."""
        while directory and directory not in self.recent:
            self.recent[directory] = None
            if len(self.recent) > _RECENT_DIRECTORIES:
                del self.recent[next(iter(self.recent))]
            directory = directory.rpartition("/")[0]


def member_path(name: str, limits: ArchiveLimits) -> str | None:
    """A member's name as a path below the root, as every check and listing spells it (None
    for the root itself); IntegrityError for an unsafe name."""
    return normalise(name, limits)


def normalise(name: str, limits: ArchiveLimits) -> str | None:
    """The member's path below the root (None for the root itself); refuses unsafe names."""
    try:
        length = len(name.encode("utf-8"))
    except UnicodeEncodeError:
        raise unsafe(name, "has a name that is not valid UTF-8") from None
    if length > limits.max_path_length:
        raise unsafe(name, f"has a path longer than {limits.max_path_length} bytes")
    if "\0" in name:
        raise unsafe(name, "contains a NUL byte")
    if _CONTROL.search(name):
        raise unsafe(name, "contains a control character")
    if name.startswith(("/", "\\")) or (name[1:2] == ":" and name[:1].isalpha()):
        raise unsafe(name, "has an absolute path")
    if "\\" in name:
        raise unsafe(name, "contains a backslash (a path separator on Windows)")
    parts: list[str] = []
    for part in name.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if not parts:
                raise unsafe(name, "escapes the root")
            parts.pop()
        elif len(part.encode("utf-8")) > MAX_NAME_COMPONENT_BYTES:
            raise unsafe(name, f"has a name longer than {MAX_NAME_COMPONENT_BYTES} bytes")
        else:
            parts.append(part)
    return "/".join(parts) or None


def file_at_the_root(name: str) -> IntegrityError:
    """The refusal of a file member whose name is the root itself ('.', 'd/..'): no tree
    holds a file there."""
    return unsafe(name, "has an empty path")


def unsafe(name: str, rule: str) -> IntegrityError:
    return IntegrityError(f"unsafe archive: member {quote(name)} {rule}")


def quote(name: str) -> str:
    shown = name if len(name) <= 160 else name[:160] + "..."
    if shown.isprintable() and "'" not in shown:
        return f"'{shown}'"
    return ascii(shown)
