"""Which connections `mirror serve` holds, in what state, and how it lets them go on SIGTERM.

Slots: at most `max_clients` client connections at once, and `PROBE_SLOTS` more kept for
the health probes, so a server whose client slots are all taken (many pods at once, or slow
clients) still answers `/healthz` and `/readyz`: a busy pod is not restarted by its
liveness probe nor taken out of the Service. A connection in a probe slot is answered only
for those two paths (anything else: 503 "too many clients") and then closed. With both
full, a connection is answered 503 at once (`admit` returns None).

States: a connection is `idle` while it waits for the first byte of a request, `busy` from
then until its response is sent. The drain (`drain`): no new connection is admitted; the
idle ones are closed for reading at once (their thread sees the end and closes); the busy
ones may finish for `timeout` seconds; what is still open then is shut down, so a send
under way fails at once and is logged as cut by its own thread. Thread-safe.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from dataclasses import dataclass
from enum import Enum

PROBE_SLOTS = 4
PROBE_PAGES = ("healthz", "readyz")
"""The pages answered in a probe slot (mirror.serve.routes names them)."""


class Slot(Enum):
    CLIENT = "client"
    PROBE = "probe"


@dataclass
class _Held:
    slot: Slot
    busy: bool = False


class Connections:
    """The slots and states of the open connections (module docstring)."""

    def __init__(
        self,
        max_clients: int,
        draining: threading.Event | None = None,
        probe_slots: int = PROBE_SLOTS,
    ) -> None:
        self.limits = {Slot.CLIENT: max_clients, Slot.PROBE: probe_slots}
        self.draining = draining or threading.Event()
        self._held: dict[socket.socket, _Held] = {}
        self._changed = threading.Condition()

    def admit(self, conn: socket.socket) -> Slot | None:
        """A slot for a new connection, a probe slot when the client slots are full (or the
        server is draining: then /readyz says so until the listener closes), None when
        there is none."""
        with self._changed:
            slots = (Slot.PROBE,) if self.draining.is_set() else (Slot.CLIENT, Slot.PROBE)
            for slot in slots:
                if self.count(slot) < self.limits[slot]:
                    self._held[conn] = _Held(slot)
                    return slot
            return None

    def count(self, slot: Slot) -> int:
        """Connections holding a `slot` now (safe to ask from any thread)."""
        with self._changed:
            return sum(1 for held in self._held.values() if held.slot is slot)

    def busy(self, conn: socket.socket, busy: bool) -> None:
        """The connection started (True) or finished (False) a request."""
        with self._changed:
            if conn in self._held:
                self._held[conn].busy = busy
            if not busy and self.draining.is_set():
                _shut(conn, socket.SHUT_RD)
            self._changed.notify_all()

    def release(self, conn: socket.socket) -> None:
        with self._changed:
            self._held.pop(conn, None)
            self._changed.notify_all()

    def open(self) -> int:
        with self._changed:
            return len(self._held)

    def drain(self, timeout: float, grace: float = 5.0) -> int:
        """Let busy connections finish for `timeout` seconds, then cut them; returns how many
        were cut. Waits `grace` more for their threads to log the cut."""
        deadline = time.monotonic() + timeout
        with self._changed:
            self.draining.set()
            for conn, held in self._held.items():
                if not held.busy:
                    _shut(conn, socket.SHUT_RD)
            self._changed.wait_for(lambda: not self._held, max(0.0, deadline - time.monotonic()))
            left = list(self._held)
            for conn in left:
                _shut(conn, socket.SHUT_RDWR)
            self._changed.wait_for(lambda: not self._held, grace)
        return len(left)


def _shut(conn: socket.socket, how: int) -> None:
    with contextlib.suppress(OSError):  # already closed by its thread
        conn.shutdown(how)
