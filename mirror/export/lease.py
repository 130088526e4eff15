"""Run leases between replicas: who holds a run, for how long, and the heartbeat that keeps it.

A replica is named `host:pid:nonce` (`daemon.replica_host` overrides the host where
containers share one host name). A run's lease is short (`daemon.lease`, 30 s by
default) and renewed by a `Heartbeat` thread every third of it, independently of
download progress or poll timing, so a live holder never loses a run and a dead
one loses it within one lease. When the heartbeat finds the lease gone (another
replica took the run over) it sets `lost`; the runner's guarded writes stop it.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import threading
from collections.abc import Callable
from datetime import datetime, timedelta

from sqlalchemy import CursorResult, update
from sqlalchemy.exc import SQLAlchemyError

from mirror.errors import TemporaryFailure
from mirror.store.db import Database
from mirror.store.models import ExportRun
from mirror.timestamps import utcnow

log = logging.getLogger(__name__)

DEFAULT_LEASE_SECONDS = 30.0


def replica_identity(host: str = "") -> str:
    """`host:pid:nonce`: unique per process, readable in logs and `mirror status`."""
    return f"{host or socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"


def owner_host(owner: str) -> str:
    return owner.partition(":")[0]


def parse_owner(owner: str) -> tuple[str, int | None]:
    """(host, pid) of a lease owner `host:pid:nonce`; pid None when it is not one of ours."""
    host, _, rest = owner.partition(":")
    pid_text = rest.partition(":")[0]
    return host, int(pid_text) if pid_text.isdigit() else None


def lease_held_by_other(
    owner: str | None,
    expires_at: datetime | None,
    *,
    me: str,
    now: datetime,
    host: str,
    pid_alive: Callable[[int], bool],
) -> bool:
    """Whether someone else holds a live lease (expired leases and dead local owners do not)."""
    if owner is None or owner == me:
        return False
    if expires_at is None or expires_at <= now:
        return False
    owner_host, pid = parse_owner(owner)
    return not (owner_host == host and pid is not None and not pid_alive(pid))


class HeldByOther(TemporaryFailure):
    """The domain's active run is leased by another live process; `until` is when it expires."""

    def __init__(self, message: str, *, until: datetime, owner: str) -> None:
        wait = max(1.0, (until - utcnow()).total_seconds())
        super().__init__(message, retry_after=wait)
        self.until = until
        self.owner = owner


class NotDue(TemporaryFailure):
    """The domain is not due any more (another replica exported it since this one looked)."""

    def __init__(self, message: str, *, due: datetime) -> None:
        super().__init__(message, retry_after=max(1.0, (due - utcnow()).total_seconds()))
        self.due = due


class Heartbeat:
    """Renews one run's lease every `lease_seconds / 3` in a thread until `stop()`."""

    def __init__(
        self,
        db: Database,
        run_id: int,
        owner: str,
        lease_seconds: float,
        *,
        now: Callable[[], datetime] = utcnow,
    ) -> None:
        self.db = db
        self.run_id = run_id
        self.owner = owner
        self.lease_seconds = lease_seconds
        self.now = now
        self.lost = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._loop, name=f"mirror-heartbeat-{run_id}", daemon=True
        )

    def start(self) -> Heartbeat:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)

    def beat(self) -> bool:
        """Renew the lease once; False when this owner no longer holds it."""
        now = self.now()
        with self.db.session() as session:
            result = session.execute(
                update(ExportRun)
                .where(
                    ExportRun.id == self.run_id,
                    ExportRun.lease_owner == self.owner,
                    ExportRun.active.is_(True),
                )
                .values(
                    lease_expires_at=now + timedelta(seconds=self.lease_seconds),
                    heartbeat_at=now,
                )
                .execution_options(synchronize_session=False)
            )
            return isinstance(result, CursorResult) and result.rowcount == 1

    def _loop(self) -> None:
        interval = max(0.1, self.lease_seconds / 3)
        while not self._stop.wait(interval):
            try:
                held = self.beat()
            except SQLAlchemyError as exc:  # the next beat retries; the lease still has time
                log.warning(
                    "heartbeat of run %d failed: %s",
                    self.run_id,
                    exc.__class__.__name__,
                    extra={"run_id": self.run_id, "replica": self.owner},
                )
                continue
            if not held:
                self.lost.set()
                return


class ReplicaLogFilter(logging.Filter):
    """Adds `replica` (this process's identity) to every log record that has none, so
    every line a replica writes about a run says which replica wrote it."""

    def __init__(self, identity: str) -> None:
        super().__init__()
        self.identity = identity
        self._handlers: list[logging.Handler] = []

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "replica"):
            record.replica = self.identity
        return True

    def install(self) -> None:
        self._handlers = list(logging.getLogger().handlers)
        for handler in self._handlers:
            handler.addFilter(self)

    def remove(self) -> None:
        for handler in self._handlers:
            handler.removeFilter(self)
        self._handlers = []
