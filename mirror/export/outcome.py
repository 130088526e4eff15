"""What the caller of an export run sees: its events (state changes, progress) and its outcome.

Promises: a `RunEvent` is emitted for every state change and, while downloading, at most
once per PROGRESS_EVENT_SECONDS (and for the last byte); an `ExportOutcome` names the
version that now holds the domain's content (`VersionRef`) and where its blob is, and
`as_dict()` is the `export run --json` document (docs/json.md).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from mirror.archive import ArchiveReport
from mirror.export.claim import RunSnapshot
from mirror.store.models import RunState
from mirror.vendorapi.client import ExportJob
from mirror.versions import VersionRef

PROGRESS_EVENT_SECONDS = 0.1


@dataclass(frozen=True)
class RunEvent:
    """A state change or progress of a run, for progress displays and metrics."""

    domain: str
    run_id: int
    state: str
    job_id: str | None
    progress: float | None = None
    page_count: int | None = None
    bytes_done: int | None = None
    bytes_total: int | None = None


@dataclass(frozen=True)
class ExportOutcome:
    """A finished run: the version that now holds the domain's content and where its blob is."""

    ref: VersionRef
    run_id: int
    state: Literal["stored", "unchanged"]
    job_id: str
    blob_path: Path
    tree_sha256: str
    file_count: int
    resumed: bool
    site: str | None = None  # the completeness summary of a stored version

    def as_dict(self) -> dict[str, Any]:
        """The `export run --json` document (docs/json.md)."""
        # "domain" is written first, so the reference's own "domain" keeps that place
        return {
            "domain": self.ref.domain,
            "state": self.state,
            **self.ref.as_dict(),
            "tree_sha256": self.tree_sha256,
            "file_count": self.file_count,
            "job_id": self.job_id,
            "run_id": self.run_id,
            "path": str(self.blob_path),
            "resumed": self.resumed,
            "site": self.site,
        }


def outcome_of(
    run: RunSnapshot,
    state: Literal["stored", "unchanged"],
    ref: VersionRef,
    blob: Path,
    report: ArchiveReport,
    resumed: bool,
) -> ExportOutcome:
    """What the caller of a finished run sees."""
    assert run.vendor_job_id is not None
    return ExportOutcome(
        ref=ref,
        run_id=run.id,
        state=state,
        job_id=run.vendor_job_id,
        blob_path=blob,
        tree_sha256=report.tree_sha256,
        file_count=report.file_count,
        resumed=resumed,
    )


def job_event(run: RunSnapshot, job: ExportJob) -> RunEvent:
    """The progress of the vendor job of `run`, for displays."""
    return RunEvent(
        run.domain,
        run.id,
        RunState.STARTED,
        job.job_id,
        progress=job.progress,
        page_count=job.page_count,
    )


class DownloadEvents:
    """Download progress as RunEvents, at most one per PROGRESS_EVENT_SECONDS (and the last)."""

    def __init__(self, run: RunSnapshot, emit: Callable[[RunEvent], None]) -> None:
        self.run = run
        self.emit = emit
        self.last = 0.0

    def __call__(self, done: int, total: int | None) -> None:
        now = time.monotonic()
        if now - self.last < PROGRESS_EVENT_SECONDS and done != total:
            return
        self.last = now
        run = self.run
        self.emit(
            RunEvent(
                run.domain,
                run.id,
                RunState.DOWNLOADING,
                run.vendor_job_id,
                bytes_done=done,
                bytes_total=total,
            )
        )
