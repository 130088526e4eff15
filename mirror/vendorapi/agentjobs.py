"""Following the vendor's agent jobs: poll until they end, and say what happened in plain words.

Promises: `watch_agent_job` keeps polling while a job is `active` or in any state it does not
know (the vendor may add states), returns as soon as it is completed, archived or failed, and
raises TemporaryFailure (exit 75) when the job is still running at the deadline. It never
decides what a failed job means for the caller: it returns the job and the caller judges.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime
from typing import Any, Protocol

from mirror.errors import TemporaryFailure
from mirror.timestamps import rfc3339_or_none
from mirror.units import format_duration
from mirror.vendorapi.client import AgentJob


class AgentJobReader(Protocol):
    """What watching needs from the API client (VendorClient provides it)."""

    def agent_job(self, job_id: str, project_id: str | None = None) -> AgentJob: ...


def watch_agent_job(
    client: AgentJobReader,
    job_id: str,
    *,
    project_id: str | None = None,
    interval: float = 5.0,
    timeout: float | None = None,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    on_update: Callable[[AgentJob], None] | None = None,
) -> AgentJob:
    """Poll the job every `interval` seconds until it ends; the last reading is returned.

    `on_update` sees the first reading and every later one that differs from the one before
    (status, pull request link or archive time). `timeout` (None: no limit) counts from the
    first poll; one last poll happens at the deadline before giving up.
    """
    started = clock()
    previous: AgentJob | None = None
    while True:
        job = client.agent_job(job_id, project_id)
        if on_update is not None and (previous is None or _changed(previous, job)):
            on_update(job)
        previous = job
        if job.terminal:
            return job
        wait = max(interval, 0.0)
        if timeout is not None:
            remaining = timeout - (clock() - started)
            if remaining <= 0:
                raise TemporaryFailure(
                    f"agent job {job_id} still {job.status} after "
                    f"{format_duration(clock() - started)}",
                    hint="watch it again later, or raise --timeout",
                )
            wait = min(wait, remaining)
        sleep(wait)


def _changed(before: AgentJob, after: AgentJob) -> bool:
    return (before.status, before.pr_link, before.archived_at) != (
        after.status,
        after.pr_link,
        after.archived_at,
    )


def _when(moment: datetime | None) -> str:
    if moment is None:
        return "unknown"
    return moment.isoformat(timespec="seconds").replace("+00:00", "Z")


def describe_agent_job(job: AgentJob) -> list[str]:
    """Human lines: status, repository@ref, model, the pull request (or why there is none)."""
    where = job.repository or "(repository not given)"
    if job.ref:
        where = f"{where}@{job.ref}"
    lines = [
        f"agent job {job.id}: {job.status}",
        f"repository: {where}",
        f"model: {job.model or '(not given)'}",
        f"created: {_when(job.created_at)}",
    ]
    if job.pr_link:
        lines.append(f"pull request: {job.pr_link}")
    elif job.status == "completed":
        lines.append("no files changed, no pull request")
    elif job.status == "failed":
        lines.append("the agent hit an unrecoverable error; no pull request")
    elif not job.terminal:
        lines.append("pull request: none yet (still running)")
    if job.status == "archived" or job.archived_at is not None:
        lines.append(f"archived: {_when(job.archived_at)}")
    return lines


def status_line(job: AgentJob) -> str:
    """One line for a status change while watching."""
    line = f"agent job {job.id}: {job.status}"
    if job.pr_link:
        line += f" ({job.pr_link})"
    return line


def agent_job_document(job: AgentJob) -> dict[str, Any]:
    """The job as JSON-ready data with snake_case keys (the CLI's --json output)."""
    return {
        "id": job.id,
        "status": job.status,
        "repository": job.repository,
        "ref": job.ref,
        "model": job.model,
        "pr_link": job.pr_link,
        "created_at": _iso(job.created_at),
        "archived_at": _iso(job.archived_at),
    }


def _iso(moment: datetime | None) -> str | None:
    return rfc3339_or_none(moment)
