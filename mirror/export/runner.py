"""One export run of one domain, as a state machine persisted in `export_runs`.

PENDING -> STARTED -> COMPLETED -> DOWNLOADING -> DOWNLOADED -> STORED | UNCHANGED, or FAILED.

Promises:

- Every step's result is committed before the next step begins, so `run_export`
  after a crash (even SIGKILL) continues the same run: the same vendor job, the
  same partial file (cut back to its last fsynced checkpoint), a fresh link when
  the saved one has expired. It never starts a second vendor job for a run whose
  job id was saved.
- The one unavoidable window: the vendor accepts a start and the process dies
  before the job id is committed (the commit is the very next thing done, with
  no logging or callback in between). `vendor_started_at` is stamped *before*
  the call, so the next run sees a start of unknown outcome, says so in the log,
  and starts again on the same run row; with the vendor's one-active-job rule the
  orphan makes that start answer 409, which defers the run (TemporaryFailure)
  until the orphan has finished. The start budget counts the stamp, so an
  unknown start is never free.
- A run is owned through a short lease (`host:pid:nonce`, `daemon.lease`) that a
  heartbeat thread renews (`export.claim`, `export.lease`). A live lease of someone else ->
  HeldByOther (a TemporaryFailure); an expired lease, or one of a dead process on
  this host, is taken over. Every write is guarded by the lease, so a process that
  lost its lease stops instead of overwriting its successor's work.
- A new run is created in one transaction that holds the domain's schedule row
  lock, re-checks (with `due_check`, as the daemon does) that the domain is still
  due, and reserves the vendor start in the shared budget: two replicas with stale
  views never export a domain twice in one interval.
- Polling ends after `api.job_timeout` from `vendor_started_at` with JobTimedOut
  (exit 75): the run stays active, so a later try polls the same job again. A link
  the download refuses or gives up on (LinkFailed, AuthError, NotFound) is dropped
  from the run, so the next try asks the vendor for a fresh one.
- Nothing is stored unless the archive passed the inspection of `mirror.archive`; the
  Bundle and Version rows are written in one transaction after the blob is in place.
  A download made by this process is inspected as its bytes arrive (one pass over
  them, on a second thread); a download found finished by a later process is
  inspected from the file.

The decisions (which step comes next, how long to wait, whether a lease is
free, how much start budget is left) are small pure functions; the runner
around them does the I/O, through `export.runstate` (the one writer of the run row)
and `export.outcome` (what callers see: events and the outcome); the STORE step is
`export.keeper`.
"""

from __future__ import annotations

import contextlib
import enum
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable
from datetime import datetime
from pathlib import Path
from typing import Any

import pydantic
from sqlalchemy import select

from mirror.archive.completeness import SiteScanner
from mirror.config import ExportSettings
from mirror.errors import (
    AuthError,
    ConfigError,
    IntegrityError,
    MirrorError,
    NotFound,
    OperationFailed,
    TemporaryFailure,
)
from mirror.export.claim import DueCheck, LostLease, RunSnapshot
from mirror.export.keeper import BundleKeeper
from mirror.export.lease import replica_identity
from mirror.export.outcome import DownloadEvents, ExportOutcome, RunEvent, job_event
from mirror.export.runstate import RunContext
from mirror.fsutil import disk_full, is_disk_full
from mirror.store.app import App
from mirror.store.models import ExportRun, RunState
from mirror.timestamps import utcnow
from mirror.vendorapi.client import BundleLink, ExportJob, VendorClient
from mirror.vendorapi.download import LinkFailed, download_bundle
from mirror.vendorapi.transport import StartRefused

log = logging.getLogger(__name__)

LINK_MARGIN_SECONDS = 30.0


# --- the pure core ---------------------------------------------------------------------------


class Step(enum.Enum):
    START = "start"  # ask the vendor for a job (budget first)
    POLL = "poll"  # wait for the job to finish
    FETCH_LINK = "fetch_link"  # ask for the bundle link
    DOWNLOAD = "download"  # fetch the archive into the partial file
    STORE = "store"  # check the archive, adopt the blob, write the rows
    DONE = "done"


def next_step(run: RunSnapshot) -> Step:
    """What to do next for a run in this state (a missing prerequisite sends it back a step)."""
    if run.state in RunState.TERMINAL:
        return Step.DONE
    if run.vendor_job_id is None:
        return Step.START
    if run.state in (RunState.PENDING, RunState.STARTED):
        return Step.POLL
    if run.state == RunState.COMPLETED:
        return Step.FETCH_LINK
    if run.state == RunState.DOWNLOADED and run.sha256 is not None:
        return Step.STORE
    return Step.DOWNLOAD


def next_poll_delay(current: float, job: ExportJob, base: float, cap: float) -> float:
    """Poll steadily while the job visibly runs; back off while it is queued or unknown."""
    if job.status == "running":
        return base
    return min(cap, max(base, current * 1.5))


# --- queries ---------------------------------------------------------------------------------


def unfinished_runs(app: App) -> list[ExportRun]:
    """Active runs (any domain), oldest first: what a restarted daemon should resume."""
    with app.db.session() as session:
        return list(
            session.scalars(
                select(ExportRun).where(ExportRun.active.is_(True)).order_by(ExportRun.id)
            )
        )


# --- the runner ------------------------------------------------------------------------------


class JobTimedOut(TemporaryFailure):
    """The vendor job has not settled within api.job_timeout of its start (exit 75); the run
    stays active and resumable, so a later try picks the job up if it finishes after all."""


class _Runner(RunContext):
    """Drives one run from whatever state it is in to a terminal state (or a clean stop)."""

    # -- the loop -----------------------------------------------------------------------

    def execute(self) -> ExportOutcome:
        self.steps = {
            Step.START: self.start,
            Step.POLL: self.poll,
            Step.FETCH_LINK: self.fetch_link,
            Step.DOWNLOAD: self.download,
        }
        self.claim.claim()
        run = self.current
        if self.claim.resumed:
            self.emit(RunEvent(self.domain, run.id, run.state, run.vendor_job_id))
        else:
            self.announce()
        try:
            while True:
                self.check_cancel()
                step = next_step(self.current)
                if step is Step.STORE:
                    outcome = BundleKeeper(self).keep()
                    if outcome is not None:
                        return outcome
                elif step is not Step.DONE:
                    self.steps[step]()
                else:
                    raise MirrorError(
                        f"export run {self.current.id} of {self.domain} is already "
                        f"{self.current.state}"
                    )
        except (OperationFailed, IntegrityError) as exc:
            if self.current.active:
                self.fail(exc)
            raise
        except Exception as exc:
            if isinstance(exc, MirrorError) or not is_disk_full(exc):
                raise
            raise disk_full(
                self.store.root, None, f"run {self.current.id} of {self.domain} stays resumable"
            ) from None
        finally:
            self.claim.release()

    # -- START --------------------------------------------------------------------------

    def start(self) -> None:
        previous_stamp = self.claim.reserve_start()
        run = self.current
        try:
            job = self.client.start_export(
                self.domain,
                version=run.requested_version,
                paths=list(run.requested_paths) if run.requested_paths is not None else None,
            )
        except (AuthError, ConfigError, NotFound) as exc:
            # Refused for good: the vendor started nothing, so the stamp goes back.
            self.fail(exc, vendor_started_at=previous_stamp)
            raise
        except StartRefused:
            # 409/429/408/503 or not even sent: no job exists, so the stamp goes back too.
            with contextlib.suppress(LostLease):
                self.save(vendor_started_at=previous_stamp)
            raise
        # Nothing may come between the vendor's answer and this commit (see module doc).
        self.transition(RunState.STARTED, vendor_job_id=job.job_id)

    # -- POLL ---------------------------------------------------------------------------

    def poll(self) -> None:
        job_id = self.current.vendor_job_id
        assert job_id is not None
        delay = self.poll_interval
        while True:
            self.check_cancel()
            try:
                job = self.client.export_status(job_id)
            except NotFound as exc:
                raise OperationFailed(
                    f"the vendor no longer knows export job {job_id} of {self.domain} ({exc}); "
                    "the next run starts a new job"
                ) from None
            self.emit(job_event(self.current, job))
            counted: dict[str, Any] = (
                {} if job.page_count is None else {"page_count": job.page_count}
            )
            if job.failed:
                raise OperationFailed(
                    f"export job {job_id} of {self.domain} failed at the vendor: "
                    f"{job.error or 'no reason given'}"
                )
            if job.completed:
                if job.bundle is not None:
                    self.transition(RunState.DOWNLOADING, **link_values(job.bundle), **counted)
                else:
                    self.transition(RunState.COMPLETED, **counted)
                return
            timed_out = job_timed_out(
                self.current, job, self.now(), self.job_timeout, self.max_poll_interval
            )
            if timed_out is not None:
                raise timed_out
            self.save(**counted)
            self.pause(delay)
            delay = next_poll_delay(delay, job, self.poll_interval, self.max_poll_interval)

    # -- FETCH_LINK ---------------------------------------------------------------------

    def fetch_link(self) -> None:
        job_id = self.current.vendor_job_id
        assert job_id is not None
        link = self.ask_link(job_id, first=True)
        self.transition(RunState.DOWNLOADING, **link_values(link))

    def ask_link(self, job_id: str, *, first: bool = False) -> BundleLink:
        try:
            return self.client.export_bundle(job_id) if first else self.client.fresh_link(job_id)
        except NotFound as exc:
            raise OperationFailed(
                f"the vendor has no bundle for export job {job_id} of {self.domain} ({exc}); "
                "the next run starts a new job"
            ) from None

    # -- DOWNLOAD -----------------------------------------------------------------------

    def download(self) -> None:
        run = self.current
        job_id = run.vendor_job_id
        assert job_id is not None
        link = run.link()
        if link is None or link.expired(self.now(), LINK_MARGIN_SECONDS):
            link = self.ask_link(job_id)
            self.save(**link_values(link))
        partial = self.partial_path()
        align_partial(partial, run.bytes_done)
        try:
            result = download_bundle(
                self.client.http,
                link,
                partial,
                refresh_link=lambda: self.ask_link(job_id),
                expected_size=run.expected_size,
                checkpoint=self.checkpoint,
                on_progress=DownloadEvents(run, self.on_event) if self.on_event else None,
                cancel=self.cancel,
                sleep=self.sleep,
                now=self.now,
                min_speed=self.download_settings.min_speed,
                stall_time=self.download_settings.stall_time,
                inspect=self.app.settings.store.archive_limits(),
                observe=SiteScanner.in_worker,
            )
        except (AuthError, NotFound, LinkFailed):
            # This link is refused, unusable or spent: the next try asks for a new one.
            with contextlib.suppress(LostLease):
                self.save(bundle_url=None, bundle_expires_at=None)
            raise
        self.downloaded_here = True
        self.inspected = result.archive
        self.transition(
            RunState.DOWNLOADED,
            sha256=result.sha256,
            bytes_done=result.size,
            expected_size=result.size,
        )

    def checkpoint(self, durable: int, link: BundleLink) -> None:
        values: dict[str, Any] = {"bytes_done": durable}
        if link.url != self.current.bundle_url:
            values.update(link_values(link))
        self.save(**values)


def align_partial(partial: Path, durable: int) -> None:
    """Cut the partial file back to its last checkpoint (bytes after it were never fsynced)."""
    try:
        size = partial.stat().st_size
    except FileNotFoundError:
        return
    if size > durable:
        with open(partial, "r+b") as handle:
            handle.truncate(durable)
            os.fsync(handle.fileno())


def link_values(link: BundleLink) -> dict[str, Any]:
    """The run columns that hold `link`."""
    values: dict[str, Any] = {"bundle_url": link.url, "bundle_expires_at": link.expires_at}
    if link.size_bytes is not None:
        values["expected_size"] = link.size_bytes
    return values


def job_timed_out(
    run: RunSnapshot, job: ExportJob, now: datetime, timeout: float, max_poll_interval: float
) -> JobTimedOut | None:
    """The error that stops polling once `timeout` has passed since the vendor start."""
    started = run.vendor_started_at
    if started is None:
        return None
    waited = (now - started).total_seconds()
    if waited <= timeout:
        return None
    return JobTimedOut(
        f"export job {job.job_id} of {run.domain} is still {job.status} "
        f"{waited:.0f}s after its start, past api.job_timeout ({timeout:.0f}s); "
        "the run stays resumable",
        hint="the next try polls the same job again",
        retry_after=max(max_poll_interval, 60.0),
    )


def run_export(
    app: App,
    client: VendorClient,
    domain: str,
    *,
    cancel: threading.Event | None = None,
    on_event: Callable[[RunEvent], None] | None = None,
    sleep: Callable[[float], None] = time.sleep,
    now: Callable[[], datetime] = utcnow,
    owner: str | None = None,
    version: str | None = None,
    paths: Iterable[str] | None = None,
    due_check: DueCheck | None = None,
) -> ExportOutcome:
    """Run (or resume) the export of `domain` to a stored or unchanged version.

    `version`/`paths` override the domain's settings for a new run (a resumed run keeps
    what it was started with). Raises TemporaryFailure (busy, budget spent, vendor 409/429,
    network; HeldByOther when another live process holds the run, NotDue when `due_check`
    says the domain was exported since), Interrupted (cancel set; state saved),
    OperationFailed (job failed), IntegrityError (size or archive check; nothing stored),
    AuthError, ConfigError.
    """
    domain = domain.strip().lower()
    export = export_settings(app, domain)
    runner = _Runner(
        app,
        client,
        domain,
        version=version if version is not None else export.version,
        paths=list(paths) if paths is not None else export.paths,
        cancel=cancel,
        on_event=on_event,
        sleep=sleep,
        now=now,
        owner=owner or replica_identity(app.settings.daemon.replica_host),
        due_check=due_check,
    )
    return runner.execute()


def export_settings(app: App, domain: str) -> ExportSettings:
    """The domain's export settings; ConfigError when `domain` is not a hostname."""
    try:
        return app.settings.export_for(domain)
    except pydantic.ValidationError:
        raise ConfigError(
            f"{domain!r} is not a documentation domain; give a hostname like docs.example.com"
        ) from None
