"""Start-up recovery: bring the store and the index back to a consistent state after a crash.

The steps themselves belong to the store (`mirror.store.maintenance.recovery`); this
module only runs them in order and lists the runs to resume. Order (each step is safe
to repeat and safe to interrupt):
1. upgrade the index schema and bind the store to the index (mirror/binding.py);
2. sweep temp files under STORE/tmp that no unfinished run refers to (and that no
   live process on this host is still writing, judged by a pid in the name);
3. orphan blobs (a file under blobs/ with no Bundle row): re-hash; when the name
   matches the content and the archive passes the safety checks, adopt it (insert
   its Bundle row), otherwise remove it. A blob an unfinished run already names
   (its sha256) is left for that run to claim when it resumes;
4. list the unfinished runs, which the daemon resumes before taking new work.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from mirror.export.runner import unfinished_runs
from mirror.store.app import App
from mirror.store.maintenance.recovery import (
    reconcile_orphan_blobs,
    sweep_temp_files,
    upgrade_schema,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class UnfinishedRun:
    run_id: int
    domain: str
    state: str
    job_id: str | None


@dataclass(frozen=True)
class RecoveryReport:
    schema: str
    temp_removed: list[str] = field(default_factory=list)
    blobs_adopted: list[str] = field(default_factory=list)
    blobs_removed: list[str] = field(default_factory=list)
    unfinished: list[UnfinishedRun] = field(default_factory=list)


def recover(app: App) -> RecoveryReport:
    """Run every start-up recovery step; the daemon reports ready only after this."""
    schema = upgrade_schema(app)
    app.binding  # noqa: B018 - a store bound to another index is refused before any work
    temp_removed = sweep_temp_files(app)
    adopted, removed = reconcile_orphan_blobs(app)
    unfinished = [
        UnfinishedRun(run.id, run.domain, run.state, run.vendor_job_id)
        for run in unfinished_runs(app)
    ]
    log.info(
        "start-up recovery done",
        extra={
            "schema": schema,
            "temp_removed": len(temp_removed),
            "blobs_adopted": len(adopted),
            "blobs_removed": len(removed),
            "unfinished_runs": len(unfinished),
        },
    )
    return RecoveryReport(schema, temp_removed, adopted, removed, unfinished)
