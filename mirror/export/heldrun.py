"""The run row this process holds under its lease: every write guarded by the lease.

Promises: a write (`save`) changes the row only while our lease is on it, and renews the
lease; a write that finds the lease gone raises LostLease, so a process that lost its run
stops instead of overwriting its successor's work. A heartbeat thread (`lease.Heartbeat`)
keeps the lease between writes; `release()` stops it and gives the lease up, the run
staying active and resumable.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import CursorResult, update
from sqlalchemy.orm import Session

from mirror.errors import TemporaryFailure
from mirror.export.lease import Heartbeat
from mirror.store.db import Database
from mirror.store.models import ExportRun
from mirror.vendorapi.client import BundleLink

log = logging.getLogger("mirror.export.claim")  # one logger for the claim


@dataclass(frozen=True)
class RunSnapshot:
    """The columns of an `export_runs` row that drive the state machine."""

    id: int
    domain: str
    state: str
    active: bool
    requested_version: str | None
    requested_paths: list[str] | None
    vendor_job_id: str | None
    vendor_started_at: datetime | None
    bundle_url: str | None
    bundle_expires_at: datetime | None
    expected_size: int | None
    partial_name: str | None
    bytes_done: int
    sha256: str | None
    version_label: str | None
    error: str | None
    lease_owner: str | None
    lease_expires_at: datetime | None
    finished_at: datetime | None
    page_count: int | None = None

    @classmethod
    def of(cls, row: ExportRun) -> RunSnapshot:
        return cls(**{f.name: getattr(row, f.name) for f in fields(cls)})

    def link(self) -> BundleLink | None:
        if not self.bundle_url or not self.vendor_job_id:
            return None
        return BundleLink(
            job_id=self.vendor_job_id,
            url=self.bundle_url,
            size_bytes=self.expected_size,
            expires_at=self.bundle_expires_at,
        )


class LostLease(TemporaryFailure):
    """Another process took the run over (our lease expired): this one stops."""


class HeldRun:
    """The run `owner` holds (once `hold` is called), written under its lease."""

    def __init__(
        self,
        db: Database,
        domain: str,
        *,
        owner: str,
        now: Callable[[], datetime],
        lease_seconds: float,
    ) -> None:
        self.db = db
        self.domain = domain
        self.owner = owner
        self.now = now
        self.lease_seconds = lease_seconds
        self.heartbeat: Heartbeat | None = None
        self.run: RunSnapshot | None = None

    @property
    def current(self) -> RunSnapshot:
        assert self.run is not None
        return self.run

    def lease_until(self) -> datetime:
        return self.now() + timedelta(seconds=self.lease_seconds)

    def hold(self, run: RunSnapshot) -> None:
        """`run` is ours now (its row carries our lease): keep the lease alive."""
        self.run = run
        self.heartbeat = Heartbeat(
            self.db, run.id, self.owner, self.lease_seconds, now=self.now
        ).start()

    def save(self, session: Session | None = None, **values: Any) -> RunSnapshot:
        """Write `values` to the run row, guarded by our lease (and renewing it)."""
        values.setdefault("lease_expires_at", self.lease_until())
        values["updated_at"] = self.now()
        run = self.current
        statement = (
            update(ExportRun)
            .where(ExportRun.id == run.id, ExportRun.lease_owner == self.owner)
            .values(**values)
            .execution_options(synchronize_session=False)
        )
        if session is None:
            with self.db.session() as own:
                result = own.execute(statement)
                self._check_owned(result)
        else:
            self._check_owned(session.execute(statement))
        values.pop("updated_at")
        self.run = replace(run, **values)
        return self.run

    def _check_owned(self, result: Any) -> None:
        if not isinstance(result, CursorResult) or result.rowcount != 1:
            raise LostLease(
                f"export of {self.domain} (run {self.current.id}) was taken over by another "
                "process; this one stops",
                retry_after=self.lease_seconds,
            )

    def release(self) -> None:
        """Stop the heartbeat and give the lease up (the run stays active and resumable)."""
        if self.heartbeat is not None:
            self.heartbeat.stop()
        if self.run is None or not self.current.active:
            return
        try:
            with self.db.session() as session:
                self.save(session, lease_owner=None, lease_expires_at=None)
        except LostLease:
            pass
        except Exception as exc:  # never hide the error that brought us here
            log.warning("could not release the lease of run %d: %s", self.current.id, exc)
