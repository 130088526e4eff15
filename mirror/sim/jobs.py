"""Export and agent job lifecycles, derived from elapsed time (no timers to run), and held
unfinished while the simulator's `hold_jobs` fault is set."""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from mirror.sim.site import BundleInfo, SiteSpec

_HOSTNAME = re.compile(
    r"(?=.{1,253}$)(?!-)[A-Za-z0-9-]{1,63}(?<!-)(?:\.(?!-)[A-Za-z0-9-]{1,63}(?<!-))*"
)


def is_hostname(value: object) -> bool:
    return isinstance(value, str) and _HOSTNAME.fullmatch(value) is not None


def iso(when: float) -> str:
    """RFC 3339 UTC with milliseconds, as the vendor's timestamps."""
    return (
        datetime.fromtimestamp(when, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    )


@dataclass(frozen=True)
class ExportView:
    status: str
    progress: int
    page_count: int
    updated_at: float
    error: str | None


@dataclass
class ExportJob:
    """One static export job: `created_mono` drives the lifecycle, `created_wall` the timestamps."""

    job_id: str
    domain: str
    flow: str
    created_mono: float
    created_wall: float
    queue_seconds: float
    run_seconds: float
    page_count: int
    fail_error: str | None = None
    version: str | None = None
    paths: list[str] | None = None
    base_path: str | None = None
    bundle: BundleInfo | None = None
    spec: SiteSpec | None = None
    build_error: str | None = None
    built_mono: float | None = None
    built: threading.Event = field(default_factory=threading.Event)

    def view(self, now_mono: float, *, held: bool = False) -> ExportView:
        """The job at `now_mono`; `held` (Faults.hold_jobs): it does not end, whatever the
        time, and ends as its timing says once no longer held."""
        elapsed = now_mono - self.created_mono
        running_at = self.created_wall + self.queue_seconds
        if elapsed < self.queue_seconds:
            return ExportView("queued", 0, 0, self.created_wall, None)
        finish = self.queue_seconds + self.run_seconds
        error = self.fail_error or self.build_error
        finished = not held and elapsed >= finish and (error is not None or self.built.is_set())
        if not finished:
            fraction = min((elapsed - self.queue_seconds) / max(self.run_seconds, 1e-9), 1.0)
            progress = min(int(fraction * 100), 99)
            pages = min(int(fraction * self.page_count), self.page_count)
            return ExportView("running", progress, pages, running_at, None)
        done_offset = finish
        if error is None and self.built_mono is not None:
            done_offset = max(finish, self.built_mono - self.created_mono)
        done_at = self.created_wall + done_offset
        if error is not None:
            pages = int(self.page_count * 0.37)
            return ExportView("failed", 37, pages, done_at, error)
        return ExportView("completed", 100, self.page_count, done_at, None)


AGENT_REPOSITORY = "https://github.com/sim-org/docs"


@dataclass
class AgentJob:
    job_id: str
    outcome: str
    created_mono: float
    created_wall: float
    seconds: float
    pr_number: int

    def to_json(self, now_mono: float, *, held: bool = False) -> dict[str, Any]:
        """The job as the vendor answers it at `now_mono`; `held`: still active."""
        done = not held and now_mono - self.created_mono >= self.seconds
        status = "active"
        pr_link: str | None = None
        archived_at: str | None = None
        if done:
            status = "completed" if self.outcome in ("pr", "no_changes") else self.outcome
            if self.outcome == "pr":
                pr_link = f"{AGENT_REPOSITORY}/pull/{self.pr_number}"
            if self.outcome == "archived":
                archived_at = iso(self.created_wall + self.seconds)
        return {
            "id": self.job_id,
            "status": status,
            "source": {"repository": AGENT_REPOSITORY, "ref": f"mirror-sim/{self.job_id}"},
            "model": "sim-agent-1",
            "prLink": pr_link,
            "createdAt": iso(self.created_wall),
            "archivedAt": archived_at,
        }
