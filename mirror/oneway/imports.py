"""What `transfer receive --import` does with each landed set when it runs as a service
(without --once): a service reports a set it cannot import and goes on serving.

The import itself is the ordinary one, passed in (`importer`: this package does not know
the bucket). Promises:
- A set the import refuses (what `transfer import` exits 5 for: already in the bucket, a
  signature, a conflict) is moved to DIR/refused/NAME, its reason beside it in
  DIR/refused/NAME.reason (when, and the error line), logged and counted
  (`mirror_oneway_imports{outcome="refused"}`); the next set is landed and imported as ever.
- A set the import could not take for a temporary failure (exit 75: the object store
  unreachable) stays where it landed, is counted as deferred and tried again on later
  passes of the loop: RETRY_FIRST seconds after, then doubling up to RETRY_MAX.
  DIR/.oneway/pending/NAME names each such set (written before the first try), so a
  service stopped and started again tries them still.
- Any other failure is this side's, not the set's (S3 credentials refused, exit 4; settings
  the import cannot use, exit 2; anything else not exit 5): the set stays pending and is
  tried again on the same schedule, each try said in one log line with the exit code, so
  once the credentials or settings are fixed it is imported with no work by hand.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from pathlib import Path

from mirror.errors import EXIT_INTEGRITY, MirrorError, TemporaryFailure
from mirror.fsutil import atomic_write_bytes, fsync_dir
from mirror.oneway.assembly import work_root
from mirror.oneway.metrics import ReceiverMetrics
from mirror.timestamps import utcnow

log = logging.getLogger(__name__)
REFUSED = "refused"
PENDING = "pending"
RETRY_FIRST = 5.0
RETRY_MAX = 300.0


class ImportQueue:
    """Landed sets to import, refused ones put aside, deferred ones tried again."""

    def __init__(
        self,
        spool: Path,
        importer: Callable[[Path], object],
        metrics: ReceiverMetrics,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.spool = spool
        self.importer = importer
        self.metrics = metrics
        self.clock = clock
        self.marks = work_root(spool) / PENDING
        self.marks.mkdir(parents=True, exist_ok=True)
        self.wait = RETRY_FIRST
        self.due = clock()
        """When the sets left pending are tried next (at once for those of a last run)."""

    def pending(self) -> list[Path]:
        """The landed sets not imported yet, oldest first."""
        marks = sorted(self.marks.iterdir(), key=lambda mark: mark.stat().st_mtime_ns)
        return [self.spool / mark.name for mark in marks]

    def landed(self, set_dir: Path) -> None:
        """A set just landed: mark it pending, then import it."""
        atomic_write_bytes(self.marks / set_dir.name, b"")
        self._take(set_dir)

    def retry(self) -> None:
        """Try the pending sets again when it is time (a loop calls this every pass)."""
        if self.clock() < self.due:
            return
        for set_dir in self.pending():
            if not self._take(set_dir):
                return

    def _take(self, set_dir: Path) -> bool:
        """Import one set; False when the store is unreachable (the rest can wait too)."""
        mark = self.marks / set_dir.name
        if not set_dir.is_dir():  # moved or removed by hand: nothing to import
            mark.unlink(missing_ok=True)
            return True
        try:
            self.importer(set_dir)
        except MirrorError as exc:
            if exc.exit_code != EXIT_INTEGRITY:
                self._defer(set_dir, exc)
                return False
            aside = self._refuse(set_dir, exc)
            self.metrics.imports.labels("refused").inc()
            log.warning(
                "%s refused by the import, kept aside in %s: %s",
                set_dir.name,
                aside,
                exc,
                extra={"set": set_dir.name, "outcome": "refused", "kept_aside": str(aside)},
            )
        else:
            self.metrics.imports.labels("imported").inc()
        self.wait = RETRY_FIRST
        mark.unlink(missing_ok=True)
        return True

    def _defer(self, set_dir: Path, exc: MirrorError) -> None:
        """Keep a set this side cannot import now pending, tried again after `wait`."""
        self.metrics.imports.labels("deferred").inc()
        self.due = self.clock() + self.wait
        why = (
            "now"
            if isinstance(exc, TemporaryFailure)
            else f"until this is fixed (exit {exc.exit_code})"
        )
        log.warning(
            "%s landed but cannot be imported %s; tried again in %.0f s: %s",
            set_dir.name,
            why,
            self.wait,
            exc,
        )
        self.wait = min(self.wait * 2, RETRY_MAX)

    def _refuse(self, set_dir: Path, exc: MirrorError) -> Path:
        """Move the set to DIR/refused/NAME (NAME.2, ... when taken) with NAME.reason."""
        folder = self.spool / REFUSED
        folder.mkdir(exist_ok=True)
        aside, number = folder / set_dir.name, 1
        while aside.exists() or aside.with_name(aside.name + ".reason").exists():
            number += 1
            aside = folder / f"{set_dir.name}.{number}"
        reason = f"{utcnow().isoformat()} exit {exc.exit_code}: {exc}\n"
        atomic_write_bytes(aside.with_name(aside.name + ".reason"), reason.encode())
        os.rename(set_dir, aside)
        fsync_dir(folder)
        fsync_dir(self.spool)
        return aside
