"""The receiver's counters for Prometheus (its own registry, as the daemon's): datagrams
taken, dropped as corrupt (damaged in transit) and dropped by reason (whole, but a field out
of its bounds: `DROP_REASONS`), sessions evicted, sessions removed from the spool, blocks
repaired by FEC, sets complete, incomplete and refused, and what `--import` did with each
landed set. `serve` exposes them on `--metrics HOST:PORT`.

Promises: a drop is counted every time and said in the log at most once a minute per reason
(`LOG_EVERY`, with the number left unsaid since), so a flood of forged datagrams cannot fill
the journal."""

from __future__ import annotations

import errno
import functools
import logging
import time
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, start_http_server

from mirror.errors import ConfigError, TemporaryFailure

log = logging.getLogger("mirror.oneway.receiver")
LOG_EVERY = 60.0
DROP_REASONS = ("table_fragment", "table", "data", "waiting", "status", "landed")
"""table_fragment: impossible fragment numbers; table: a table that does not decode, breaks a
bound, is another session's or cannot be held by the spool; data: a DATA datagram its table
has no place for; waiting: DATA before its table beyond the session's budget; status: a
HEARTBEAT or END whose body is not one; landed: any datagram of a session landed already (a set
sent again is not landed twice: the log names where it landed, to import it again by hand)."""
IMPORT_OUTCOMES = ("imported", "refused", "deferred")
_REMOVED_HELP = (
    "Sessions not landed whose files were removed: over the spool budget, the disk full, or "
    "a set that arrived whole and does not verify"
)


class ReceiverMetrics:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        counter = functools.partial(Counter, registry=self.registry)
        self.datagrams = counter("mirror_oneway_datagrams", "Datagrams received", ["kind"])
        self.corrupt = counter(
            "mirror_oneway_corrupt_datagrams", "Datagrams dropped: damaged, truncated or not ours"
        )
        self.dropped = counter(
            "mirror_oneway_dropped_datagrams",
            "Whole datagrams dropped: a field out of its bounds, by reason",
            ["reason"],
        )
        self.evicted = counter(
            "mirror_oneway_evicted_sessions",
            "Sessions put out of memory for a newer one (their blocks on disk are kept)",
        )
        self.removed = counter("mirror_oneway_removed_sessions", _REMOVED_HELP)
        self.blocks = counter("mirror_oneway_blocks", "Blocks decoded and written")
        self.repaired = counter(
            "mirror_oneway_repaired_blocks",
            "Blocks rebuilt with repair symbols (a source datagram was lost)",
        )
        self.sets = counter("mirror_oneway_sets", "Sets ended, by outcome", ["outcome"])
        self.imports = counter(
            "mirror_oneway_imports",
            "Landed sets --import took: imported, refused (kept aside), deferred (retried)",
            ["outcome"],
        )
        self.by_kind = {k: self.datagrams.labels(k) for k in ("data", "table", "heartbeat", "end")}
        """The per-kind children, looked up once: `labels()` per datagram costs."""
        self._by_reason = {reason: self.dropped.labels(reason) for reason in DROP_REASONS}
        self._zero()
        self._clock = clock
        self._said: dict[str, float] = {}
        self._unsaid: dict[str, int] = {}

    def _zero(self) -> None:
        """Every outcome shown from the start, at 0."""
        for outcome in ("complete", "incomplete", "refused"):
            self.sets.labels(outcome)
        for outcome in IMPORT_OUTCOMES:
            self.imports.labels(outcome)

    def drop(self, reason: str, detail: str) -> None:
        """Count one datagram dropped for `reason` (one of DROP_REASONS); said in the log
        unless this reason was said less than LOG_EVERY seconds ago."""
        self._by_reason[reason].inc()
        level = logging.INFO if reason == "landed" else logging.WARNING  # expected, not wrong
        self._say(reason, f"dropped a datagram ({reason}): {detail}", level)

    def evict(self, session: int) -> None:
        """Count one session put out of memory for a newer one; said as a drop is."""
        self.evicted.inc()
        self._say("evicted", f"session {session:016x} put out of memory for a newer one")

    def remove(self, session: int, why: str) -> None:
        """Count one session whose files were removed; said as a drop is, once a minute for
        each `why` (one of a few fixed reasons)."""
        self.removed.inc()
        self._say(f"removed: {why}", f"session {session:016x} removed from the spool: {why}")

    def _say(self, reason: str, line: str, level: int = logging.WARNING) -> None:
        now = self._clock()
        said = self._said.get(reason)
        if said is not None and now - said < LOG_EVERY:
            self._unsaid[reason] = self._unsaid.get(reason, 0) + 1
            return
        self._said[reason] = now
        unsaid = self._unsaid.pop(reason, 0)
        log.log(level, "%s%s", line, f" ({unsaid} more since the last line)" if unsaid else "")

    def serve(self, host: str, port: int) -> None:
        """Counters on http://HOST:PORT/; a port taken (exit 75) or an address that is not
        this host's (exit 2) is one line, before anything is received."""
        try:
            start_http_server(port, addr=host, registry=self.registry)
        except OSError as exc:
            where = f"--metrics {host}:{port}"
            if exc.errno == errno.EADDRINUSE:
                raise TemporaryFailure(f"{where} is in use by another program") from None
            raise ConfigError(f"cannot serve {where}: {exc.strerror or exc}") from None
