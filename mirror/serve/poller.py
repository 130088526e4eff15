"""The poller of `mirror serve`: the pointers read every `serve.poll_interval`, and the cache
settled after each read, in two threads, so that no fill ever delays a read.

    reader:  read ── wait poll_interval (or SIGHUP) ── read ── …
                 ╲ pending                             ╲ pending
    settler:      settle: fill current and rollback targets, verify, trim ── settle ── …

Promises: the moving link follows a `chart promote` or `chart rollback` within
`serve.poll_interval` plus one read of the pointers (one listing of the domains and two
documents per domain, each call bounded by `target.deadline`), however long the fills take;
a read that comes while a settle is under way is settled next (one pending settle, never a
queue). `reread` (SIGHUP) reads the pointers at once and first checks every cached file
against what was seen when it was verified (a `stat` each, no hashing: a changed or removed
file is dropped and filled again), then logs one line; the config file is not re-read.
"""

from __future__ import annotations

import logging
import threading
from typing import Protocol

from mirror.config import ServeSettings
from mirror.errors import MirrorError
from mirror.serve.cache import Cache
from mirror.serve.pointers import Pointers
from mirror.serve.supply import Supply
from mirror.timestamps import rfc3339

log = logging.getLogger(__name__)


class Polled(Protocol):
    """What the poller needs of the service (mirror.serve.service.Service)."""

    @property
    def settings(self) -> ServeSettings: ...
    @property
    def stop(self) -> threading.Event: ...
    @property
    def cache(self) -> Cache: ...
    @property
    def pointers(self) -> Pointers: ...
    @property
    def supply(self) -> Supply: ...
    @property
    def bucket_error(self) -> str | None: ...
    @property
    def fatal(self) -> MirrorError | None: ...

    def poll(self) -> bool:
        """Read the pointers once; True when the bucket answered."""

    def settle(self) -> None:
        """Fill, verify and trim after a read."""

    def settled(self) -> None:
        """Count a settle done."""


class Poller:
    """The reader and the settler of one service (module docstring)."""

    def __init__(self, service: Polled) -> None:
        self.service = service
        self.wake = threading.Event()
        self._reread = threading.Event()
        self._pending = threading.Event()
        self._done = threading.Event()

    def reread(self) -> None:
        """Read the pointers now (SIGHUP). Only sets events: safe in a signal handler."""
        self._reread.set()
        self.wake.set()

    def halt(self) -> None:
        """Wake both threads to see `service.stop`."""
        self.wake.set()
        self._pending.set()

    def run(self) -> None:
        """Read until `service.stop` is set (or the first read is fatal); settle beside it."""
        settler = threading.Thread(target=self._settle_loop, name="serve-settler", daemon=True)
        settler.start()
        try:
            self._read_loop()
        finally:
            self._done.set()
            self._pending.set()

    def _read_loop(self) -> None:
        service = self.service
        while not service.stop.is_set():
            asked = self._reread.is_set()
            self._reread.clear()
            checked = service.cache.recheck() if asked else None
            if asked:
                service.supply.recheck()  # a refusal is held only while its objects are
            answered = service.poll()
            if service.fatal is not None:
                return
            if checked is not None:
                self._said(answered, *checked)
            self._pending.set()
            if not self._reread.is_set():
                self.wake.wait(service.settings.poll_interval)
            self.wake.clear()

    def _settle_loop(self) -> None:
        service = self.service
        while True:
            self._pending.wait()
            self._pending.clear()
            if self._done.is_set() or service.stop.is_set():
                return
            service.settle()
            service.settled()

    def _said(self, answered: bool, checked: int, dropped: int) -> None:
        """The one line a SIGHUP logs."""
        service = self.service
        cache = f"{checked} cached bundles checked, {dropped} dropped"
        rest = "the config file is not re-read (restart mirror serve to apply it)"
        if not answered:
            when = service.pointers.read_at
            log.warning(
                "SIGHUP: cannot read the pointers from the bucket (%s); serving with the ones "
                "read %s; %s; %s",
                service.bucket_error,
                rfc3339(when) if when else "never",
                cache,
                rest,
            )
            return
        current = ", ".join(
            f"{domain} {view.current or 'none'}"
            for domain, view in sorted(service.pointers.domains.items())
        )
        log.info("SIGHUP: pointers read again, current: %s; %s; %s", current or "-", cache, rest)
