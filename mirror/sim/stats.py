"""What the simulator saw, for tests to assert on (also served at /_sim/stats)."""

from __future__ import annotations

import copy
import threading
from dataclasses import dataclass, field
from typing import Any


@dataclass
class SimStats:
    """Counters updated by the server threads under one lock.

    Reading a field directly is fine for tests that wait for quiet; `snapshot()` gives a
    consistent copy while requests are still in flight.
    """

    starts: dict[str, list[str]] = field(default_factory=dict)
    start_attempts: dict[str, int] = field(default_factory=dict)
    status_calls: dict[str, int] = field(default_factory=dict)
    agent_calls: dict[str, int] = field(default_factory=dict)
    bundle_calls: dict[str, int] = field(default_factory=dict)
    downloads: list[dict[str, Any]] = field(default_factory=list)
    bytes_served: dict[str, int] = field(default_factory=dict)
    auth_failures: int = 0
    requests: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def count_request(self) -> None:
        with self.lock:
            self.requests += 1

    def count_auth_failure(self) -> None:
        with self.lock:
            self.auth_failures += 1

    def count_start_attempt(self, domain: str) -> None:
        with self.lock:
            self.start_attempts[domain] = self.start_attempts.get(domain, 0) + 1

    def record_start(self, domain: str, job_id: str) -> None:
        with self.lock:
            self.starts.setdefault(domain, []).append(job_id)

    def count_status_call(self, job_id: str) -> None:
        with self.lock:
            self.status_calls[job_id] = self.status_calls.get(job_id, 0) + 1

    def count_agent_call(self, job_id: str) -> None:
        """A read of an agent job (GET /v2/agent/...): a test may wait for a client's look."""
        with self.lock:
            self.agent_calls[job_id] = self.agent_calls.get(job_id, 0) + 1

    def count_bundle_call(self, job_id: str) -> None:
        with self.lock:
            self.bundle_calls[job_id] = self.bundle_calls.get(job_id, 0) + 1

    def record_download(
        self,
        *,
        job_id: str,
        method: str,
        range_header: str | None,
        status: int,
        bytes_sent: int = 0,
        complete: bool = False,
    ) -> dict[str, Any]:
        """Append a download entry and return it for `add_download_bytes`."""
        entry: dict[str, Any] = {
            "job_id": job_id,
            "method": method,
            "range": range_header,
            "status": status,
            "bytes_sent": bytes_sent,
            "complete": complete,
        }
        with self.lock:
            self.downloads.append(entry)
            self.bytes_served[job_id] = self.bytes_served.get(job_id, 0) + bytes_sent
        return entry

    def add_download_bytes(self, entry: dict[str, Any], count: int, *, complete: bool) -> None:
        """Count bytes as they are handed to the socket (before the client can see them)."""
        with self.lock:
            entry["bytes_sent"] += count
            entry["complete"] = complete
            job_id = entry["job_id"]
            self.bytes_served[job_id] = self.bytes_served.get(job_id, 0) + count

    def mark_download_incomplete(self, entry: dict[str, Any]) -> None:
        with self.lock:
            entry["complete"] = False

    def snapshot(self) -> dict[str, Any]:
        """A consistent, JSON-ready deep copy."""
        with self.lock:
            return copy.deepcopy(
                {
                    "starts": self.starts,
                    "start_attempts": self.start_attempts,
                    "status_calls": self.status_calls,
                    "agent_calls": self.agent_calls,
                    "bundle_calls": self.bundle_calls,
                    "downloads": self.downloads,
                    "bytes_served": self.bytes_served,
                    "auth_failures": self.auth_failures,
                    "requests": self.requests,
                }
            )
