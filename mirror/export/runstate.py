"""A run's persisted state as the runner sees it: the one place a run row is written.

Promises: every write goes through the claim's lease-guarded `save` (a process that lost
its lease stops instead of overwriting its successor's work); a transition outside a
caller's transaction is logged and announced as a `RunEvent` at once; a cancelled run
stops with Interrupted at the next check, its state saved; a run that fails ends
FAILED with its partial file removed.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session

from mirror.archive import ArchiveReport
from mirror.errors import Interrupted, MirrorError
from mirror.export.claim import DueCheck, LostLease, RunClaim, RunSnapshot
from mirror.export.outcome import RunEvent
from mirror.store.app import App
from mirror.store.models import RunState
from mirror.vendorapi.client import VendorClient

log = logging.getLogger("mirror.export.runner")  # one logger for the whole run


class RunContext:
    """The run being driven, its settings and its I/O plumbing; `_Runner` adds the steps."""

    def __init__(
        self,
        app: App,
        client: VendorClient,
        domain: str,
        *,
        version: str | None,
        paths: list[str] | None,
        cancel: threading.Event | None,
        on_event: Callable[[RunEvent], None] | None,
        sleep: Callable[[float], None],
        now: Callable[[], datetime],
        owner: str,
        due_check: DueCheck | None = None,
    ) -> None:
        self.app = app
        self.db = app.db
        self.store = app.store
        self.client = client
        self.domain = domain
        self.cancel = cancel
        self.on_event = on_event
        self.sleep = sleep
        self.now = now
        self.owner = owner
        self.claim = RunClaim(
            app, domain, owner=owner, now=now, version=version, paths=paths, due_check=due_check
        )
        self.save = self.claim.save  # every write to the run row is guarded by the lease
        api = app.settings.api
        self.poll_interval = api.poll_interval
        self.max_poll_interval = max(api.max_poll_interval, api.poll_interval)
        self.job_timeout = api.job_timeout
        self.download_settings = app.settings.download
        self.downloaded_here = False
        self.inspected: ArchiveReport | None = None

    @property
    def current(self) -> RunSnapshot:
        return self.claim.current

    def transition(self, state: str, session: Session | None = None, **values: Any) -> RunSnapshot:
        run = self.save(session, state=state, **values)
        if session is None:
            self.announce()
        return run

    def announce(self, **extra: Any) -> None:
        run = self.current
        fields_ = {
            "domain": run.domain,
            "run_id": run.id,
            "state": run.state,
            "replica": self.owner,
        }
        log.info("export state", extra={**fields_, "job_id": run.vendor_job_id, **extra})
        self.emit(RunEvent(run.domain, run.id, run.state, run.vendor_job_id))

    def emit(self, event: RunEvent) -> None:
        if self.on_event is not None:
            self.on_event(event)

    def check_cancel(self) -> None:
        if self.cancel is not None and self.cancel.is_set():
            run = self.current
            raise Interrupted(
                f"export of {self.domain} stopped in state {run.state} (run {run.id}); "
                "run it again to resume"
            )

    def pause(self, seconds: float) -> None:
        if self.cancel is not None and self.sleep is time.sleep:
            self.cancel.wait(seconds)
        else:
            self.sleep(seconds)
        self.check_cancel()

    def partial_path(self) -> Path:
        name = self.current.partial_name or f"run-{self.current.id}.part"
        return self.store.temp_path(name)

    def drop_partial(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.partial_path().unlink()

    def fail(self, error: MirrorError | str, **values: Any) -> None:
        """End the run as FAILED (terminal) and remove its partial file."""
        message = str(error)
        try:
            self.save(**{**self.finished(), "state": RunState.FAILED, "error": message, **values})
        except LostLease:
            return
        self.announce(error=message)
        self.drop_partial()

    def finished(self) -> dict[str, Any]:
        """The columns that end a run: inactive, finished now, lease given up, no error."""
        return {
            "active": False,
            "finished_at": self.now(),
            "lease_owner": None,
            "lease_expires_at": None,
            "error": None,
        }
