"""What the last call to the object store found, and when: the status page's account of the
store, true even while the poller is busy with fills.

Every read of the pointers and every fill reports how its calls ended (`answered`, or
`failed` with the error); the page shows the last one with its time. A store that hangs
shows as the time of the last call that ended growing old, then as a failure once a call
runs into `target.deadline`, never as "reachable" from a read long past.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from datetime import datetime

from mirror.timestamps import utcnow


@dataclass(frozen=True)
class Call:
    """How a call to the store ended: at `at`, answered (`error` None) or failed."""

    at: datetime
    error: str | None = None


class StoreHealth:
    """The last call to the store that ended, and since when calls fail (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.last: Call | None = None
        self.down_since: datetime | None = None

    def answered(self) -> None:
        with self._lock:
            self.last, self.down_since = Call(utcnow()), None

    def failed(self, error: str) -> None:
        with self._lock:
            now = utcnow()
            self.last = Call(now, error)
            self.down_since = self.down_since or now
