"""The local cache of verified bundles: what `mirror serve` sends, and only that.

    CACHE_DIR/bundles/<sha256>   a bundle, read-only, whose bytes hashed to its name
    CACHE_DIR/cache.json         the record: per bundle its size, digest, versions, provenance
                                 facts, when it was last served and when each of its
                                 versions was first served
    CACHE_DIR/tmp/               fills in progress (emptied at start)
    CACHE_DIR/pointers.json      the pointers last read (mirror.serve.pointers)
    CACHE_DIR/served.json        per domain, the version last served (mirror.serve.seen)
    CACHE_DIR/lock               held (flock) by the one process using the cache; its pid

Promises:
- One process at a time: `open` takes an exclusive lock on `CACHE_DIR/lock` (flock, held
  until `close` or the process ends, so a killed process never leaves it taken) before it
  touches anything; a second process is refused (`CacheInUse`, naming the holder's pid)
  and changes nothing. Two `mirror serve` on one directory would empty each other's fills
  and drop each other's files.
- A file enters only whole and verified (`admit`: renamed into place by the filler, which
  hashed it as it was written); a file is handed out (`open_verified`) only when it was
  verified in this run and its inode, size, modification and change times are still the
  ones seen then, so a file written to since (any write changes its ctime) is dropped,
  never starts to be sent (a write during a send is the sender's to report:
  mirror.serve.server checks the file again after it).
- Restarted, the cache trusts nothing: every recorded file is `unverified` until hashed
  again against its recorded size and sha256 (`verify`); a damaged or missing one is
  dropped and its record with it. Files nobody recorded are removed, unless the record
  itself is lost (unreadable, or gone): then every file named by a sha256 is kept as
  `recovered`, used only once a version's verdict vouched for it (mirror.serve.supply:
  its manifest and provenance checked as for a fill, the file hashed again instead of
  downloaded; `vouch`), so a damaged cache.json costs no download and trusts nothing
  more than a fill does.
- `recheck` (SIGHUP) looks at every verified file again without hashing it: one whose
  inode, size or times changed, or that is gone, is dropped.
- `evict` removes the least recently served bundles until the total is at most
  `max_bytes`, never one whose sha256 is protected (a domain's current version and its
  rollback target); a file being sent is unaffected (it is open).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import shutil
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from mirror.fsutil import atomic_write_bytes
from mirror.integrity import hash_file

log = logging.getLogger(__name__)

FORMAT = 1
Fingerprint = tuple[int, int, int, int]


@dataclass
class Entry:
    """One cached bundle. `fingerprint` is set once it was verified in this run."""

    sha256: str
    size: int
    format: str
    versions: set[tuple[str, str]] = field(default_factory=set)
    provenance: dict[str, Any] = field(default_factory=dict)
    last_used: float = 0.0
    fingerprint: Fingerprint | None = None
    recovered: bool = False
    """Kept from a lost record: its bytes may hash to its name (`fingerprint` once they
    did), but no verdict of this cache vouches for them yet, so it is not `verified`."""
    first_served: dict[str, float] = field(default_factory=dict)
    """When this cache first served each of its versions (by label): the freshness histogram
    counts a version once, also across restarts."""

    @property
    def verified(self) -> bool:
        return self.fingerprint is not None and not self.recovered

    def as_dict(self) -> dict[str, Any]:
        return {
            "size": self.size,
            "format": self.format,
            "versions": sorted([list(pair) for pair in self.versions]),
            "provenance": self.provenance,
            "last_used": round(self.last_used, 3),
            "first_served": {label: round(at, 3) for label, at in self.first_served.items()},
            **({"recovered": True} if self.recovered else {}),
        }


def fingerprint(status: os.stat_result) -> Fingerprint:
    return (status.st_ino, status.st_size, status.st_mtime_ns, status.st_ctime_ns)


class CacheInUse(Exception):
    """Another process holds the cache directory's lock."""

    def __init__(self, directory: Path, holder: str) -> None:
        super().__init__(f"{directory} is in use by another process ({holder})")
        self.directory = directory
        self.holder = holder


class Cache:
    """The bundles under one directory (module docstring). Thread-safe."""

    def __init__(self, directory: Path, max_bytes: int) -> None:
        self.directory = directory
        self.max_bytes = max_bytes
        self.bundles = directory / "bundles"
        self.tmp = directory / "tmp"
        self.record = directory / "cache.json"
        self.entries: dict[str, Entry] = {}
        self._lock = threading.Lock()
        self._held: int | None = None

    def open(self) -> list[Entry]:
        """Take the directory's lock, load the record, clear interrupted fills and unrecorded
        files; returns the entries (all unverified until `verify`)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        self._take_lock()
        for folder in (self.bundles, self.tmp):
            folder.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(self.tmp)
        self.tmp.mkdir()
        loaded = self._load()
        self.entries = loaded or {}
        self._unrecorded(keep=loaded is None)
        for sha256 in [s for s in self.entries if not (self.bundles / s).is_file()]:
            log.warning("the cached bundle %s is gone; dropping its record", sha256)
            del self.entries[sha256]
        self.persist()
        return list(self.entries.values())

    def _unrecorded(self, keep: bool) -> None:
        """The files the record does not name: removed, or when the record is lost (`keep`)
        each one named by a sha256 kept as `recovered` (module docstring)."""
        kept = 0
        for path in self.bundles.iterdir():
            if path.name in self.entries:
                continue
            if keep and _is_sha256(path.name) and path.is_file():
                self.entries[path.name] = Entry(path.name, path.stat().st_size, "", recovered=True)
                kept += 1
            else:
                log.warning("removing %s: the cache has no record of it", path)
                _remove(path)
        if kept:
            log.warning(
                "kept %d cached bundles the cache record no longer names: each is used once "
                "a version's manifest and provenance vouch for it and it is hashed again",
                kept,
            )

    def _take_lock(self) -> None:
        fd = os.open(self.directory / "lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            said = os.pread(fd, 64, 0).decode("ascii", "replace").strip()
            os.close(fd)
            holder = f"pid {said}" if said.isdigit() else "pid unknown"
            raise CacheInUse(self.directory, holder) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._held = fd

    def close(self) -> None:
        """Let the directory go (the lock; the files stay for the next run)."""
        if self._held is not None:
            os.close(self._held)  # closing the descriptor releases the flock
            self._held = None

    def _load(self) -> dict[str, Entry] | None:
        """The recorded entries; None when the record is lost (gone, or unreadable)."""
        try:
            document = json.loads(self.record.read_bytes())
            if document.get("format") != FORMAT:
                raise ValueError(f"format {document.get('format')!r}")
            return {sha: _entry(sha, item) for sha, item in document["entries"].items()}
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            log.warning(
                "the cache record %s is unreadable (%s); its bundles are verified again",
                self.record,
                exc,
            )
            return None

    def persist(self) -> None:
        with self._lock:
            entries = {sha: entry.as_dict() for sha, entry in sorted(self.entries.items())}
        document = {"format": FORMAT, "entries": entries}
        atomic_write_bytes(self.record, json.dumps(document, indent=1).encode() + b"\n")

    def path(self, sha256: str) -> Path:
        return self.bundles / sha256

    def get(self, sha256: str) -> Entry | None:
        with self._lock:
            return self.entries.get(sha256)

    def verify(self, sha256: str) -> bool:
        """Hash a recorded file again: True (and usable, once vouched for when `recovered`)
        when it is its recorded size and digest; False, and dropped, when it is not."""
        entry = self.get(sha256)
        if entry is None:
            return False
        path = self.path(sha256)
        try:
            before = path.stat()
            digest = hash_file(path).sha256 if before.st_size == entry.size else None
            after = path.stat()
        except OSError as exc:
            self.drop(sha256, f"it cannot be read: {exc.strerror}")
            return False
        if digest == sha256 and fingerprint(before) == fingerprint(after):
            with self._lock:
                entry.fingerprint = fingerprint(after)
            return True
        self.drop(sha256, "its bytes are not the ones recorded")
        return False

    def recheck(self) -> tuple[int, int]:
        """Stat every verified file again (cheap: no hashing); one changed or removed since it
        was verified is dropped now, as `open_verified` would drop it at its next send.
        Returns (files checked, files dropped)."""
        with self._lock:
            verified = [(sha, e.fingerprint) for sha, e in self.entries.items() if e.verified]
        dropped = 0
        for sha256, seen in verified:
            try:
                now: Fingerprint | None = fingerprint(self.path(sha256).stat())
            except OSError:
                now = None
            if now != seen:
                self.drop(sha256, "it was changed or removed after it was verified")
                dropped += 1
        return len(verified), dropped

    def drop(self, sha256: str, why: str) -> None:
        with self._lock:
            entry = self.entries.pop(sha256, None)
        if entry is not None:
            log.warning("dropping the cached bundle %s: %s", sha256, why)
            _remove(self.path(sha256))
            self.persist()

    @contextlib.contextmanager
    def open_verified(self, sha256: str) -> Iterator[IO[bytes] | None]:
        """The verified file, open, for the `with` block; None when there is none (or it was
        changed since it was verified: then it is dropped)."""
        entry = self.get(sha256)
        if entry is None or not entry.verified:
            yield None
            return
        try:
            handle = open(self.path(sha256), "rb")  # noqa: SIM115 (closed below)
        except OSError:
            self.drop(sha256, "it cannot be opened")
            yield None
            return
        with handle:
            if fingerprint(os.fstat(handle.fileno())) != entry.fingerprint:
                self.drop(sha256, "it was changed after it was verified")
                yield None
                return
            entry.last_used = time.time()
            yield handle

    def temp_path(self, sha256: str) -> Path:
        return self.tmp / f"{sha256}.{os.getpid()}.{threading.get_ident()}.part"

    def admit(self, temp: Path, entry: Entry) -> None:
        """Move a verified fill into place and record it."""
        target = self.path(entry.sha256)
        temp.chmod(0o444)
        os.replace(temp, target)
        entry.fingerprint = fingerprint(target.stat())
        entry.last_used = time.time()
        with self._lock:
            known = self.entries.get(entry.sha256)
            if known is not None:
                entry.versions |= known.versions
            self.entries[entry.sha256] = entry
        self.persist()

    def vouch(self, entry: Entry) -> bool:
        """A `recovered` file is `entry`'s bundle (its version's verdict passed, its bytes
        hashed again by `verify`): record it as verified. False when it is no longer there
        as hashed (then it is a fill's to bring)."""
        with self._lock:
            known = self.entries.get(entry.sha256)
            if known is None or known.fingerprint is None:
                return False
            entry.fingerprint = known.fingerprint
            entry.versions |= known.versions
            entry.first_served = {**known.first_served, **entry.first_served}
            entry.last_used = time.time()
            self.entries[entry.sha256] = entry
        self.persist()
        return True

    def total(self) -> int:
        with self._lock:
            return sum(entry.size for entry in self.entries.values())

    def evict(self, protected: set[str]) -> list[Entry]:
        """Remove least recently served bundles until the total fits `max_bytes`."""
        removed: list[Entry] = []
        with self._lock:
            total = sum(entry.size for entry in self.entries.values())
            for entry in sorted(self.entries.values(), key=lambda e: e.last_used):
                if total <= self.max_bytes:
                    break
                if entry.sha256 in protected:
                    continue
                del self.entries[entry.sha256]
                total -= entry.size
                removed.append(entry)
        for entry in removed:
            log.info("evicted %s (%d bytes) from the cache", entry.sha256, entry.size)
            _remove(self.path(entry.sha256))
        if removed:
            self.persist()
        return removed


def _entry(sha256: str, item: dict[str, Any]) -> Entry:
    return Entry(
        sha256=sha256,
        size=int(item["size"]),
        format=str(item["format"]),
        versions={(str(d), str(v)) for d, v in item.get("versions", [])},
        provenance=dict(item.get("provenance") or {}),
        last_used=float(item.get("last_used", 0.0)),
        first_served={str(k): float(v) for k, v in (item.get("first_served") or {}).items()},
        recovered=bool(item.get("recovered", False)),
    )


def _is_sha256(name: str) -> bool:
    return len(name) == 64 and all(c in "0123456789abcdef" for c in name)


def _remove(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.chmod(0o644)
        path.unlink()
