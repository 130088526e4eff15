"""Following agent jobs until they end, against the simulator (and a scripted server for a
state the simulator never reports)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime

import httpx
import pytest

from mirror.errors import NotFound, TemporaryFailure
from mirror.sim import Simulator
from mirror.vendorapi.agentjobs import (
    agent_job_document,
    describe_agent_job,
    status_line,
    watch_agent_job,
)
from mirror.vendorapi.client import AgentJob, VendorClient
from tests.vendorapi.test_client import JSON, FakeTime, Scripted, ScriptedServer, scripted  # noqa: F401


@pytest.fixture
def client(sim: Simulator) -> Iterator[VendorClient]:
    with VendorClient(
        httpx.Client(timeout=30), base_url=sim.url, key=sim.key, project_id="proj_sim"
    ) as vendor:
        yield vendor


def agent(**fields: object) -> AgentJob:
    base: dict[str, object] = {
        "id": "aj_1",
        "status": "completed",
        "repository": "https://github.com/org/docs",
        "ref": "main",
        "model": "m-1",
        "pr_link": None,
        "created_at": datetime(2026, 11, 21, 10, tzinfo=UTC),
        "archived_at": None,
    }
    base.update(fields)
    return AgentJob(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("outcome", "status"),
    [
        ("pr", "completed"),
        ("no_changes", "completed"),
        ("archived", "archived"),
        ("failed", "failed"),
    ],
)
def test_watch_follows_each_outcome_to_its_end(
    sim: Simulator, client: VendorClient, outcome: str, status: str
) -> None:
    sim.set_faults(hold_jobs=True)  # its first reading is `active`, however late it comes

    def let_go(seconds: float) -> None:
        sim.set_faults(hold_jobs=False)
        time.sleep(seconds)

    began = time.monotonic()
    job_id = sim.add_agent_job(outcome, seconds=0.3)
    updates: list[AgentJob] = []
    job = watch_agent_job(
        client, job_id, interval=0.05, timeout=120, sleep=let_go, on_update=updates.append
    )
    assert time.monotonic() - began >= 0.3
    assert job.status == status and job.terminal
    assert [u.status for u in updates] == ["active", status]
    assert job.failed == (outcome == "failed")
    assert (job.pr_link is not None) == (outcome == "pr")
    assert (job.archived_at is not None) == (outcome == "archived")


def test_watch_times_out_while_still_active(sim: Simulator, client: VendorClient) -> None:
    sim.set_faults(hold_jobs=True)
    job_id = sim.add_agent_job("pr", seconds=0)
    fake = FakeTime()
    updates: list[AgentJob] = []
    with pytest.raises(TemporaryFailure, match=f"agent job {job_id} still active after 12s") as err:
        watch_agent_job(
            client,
            job_id,
            interval=5,
            timeout=12,
            sleep=fake.sleep,
            clock=fake.clock,
            on_update=updates.append,
        )
    assert err.value.exit_code == 75
    assert fake.sleeps == [5, 5, 2]
    assert [u.status for u in updates] == ["active"]  # only changes are reported


def test_watch_uses_the_given_project(sim: Simulator) -> None:
    job_id = sim.add_agent_job("pr", seconds=0)
    with VendorClient(httpx.Client(timeout=30), base_url=sim.url, key=sim.key) as client:
        assert watch_agent_job(client, job_id, project_id="proj_sim").status == "completed"
        with pytest.raises(NotFound):
            watch_agent_job(client, job_id, project_id="proj_other")


def test_watch_keeps_polling_through_unknown_states(
    scripted: Callable[..., ScriptedServer],  # noqa: F811
) -> None:
    def reply(status: str, pr: str | None = None) -> Scripted:
        body: dict[str, object] = {
            "id": "aj_7",
            "status": status,
            "source": {"repository": "r", "ref": None},
            "prLink": pr,
        }
        return Scripted(200, json.dumps(body).encode(), JSON)

    server = scripted(
        reply("active"),
        reply("queued_for_review"),
        reply("queued_for_review"),
        reply("completed", "https://github.com/org/docs/pull/7"),
    )
    fake = FakeTime()
    updates: list[str] = []
    with VendorClient(
        httpx.Client(timeout=5), base_url=server.url, key="mint_test_key_1234", project_id="p"
    ) as client:
        job = watch_agent_job(
            client,
            "aj_7",
            interval=1,
            sleep=fake.sleep,
            clock=fake.clock,
            on_update=lambda j: updates.append(j.status),
        )
    assert job.pr_link == "https://github.com/org/docs/pull/7"
    assert updates == ["active", "queued_for_review", "completed"]
    assert fake.sleeps == [1, 1, 1]
    assert len(server.requests) == 4


def test_describe_completed_with_and_without_pull_request() -> None:
    with_pr = describe_agent_job(agent(pr_link="https://github.com/org/docs/pull/3"))
    assert with_pr[:3] == [
        "agent job aj_1: completed",
        "repository: https://github.com/org/docs@main",
        "model: m-1",
    ]
    assert "pull request: https://github.com/org/docs/pull/3" in with_pr
    without = describe_agent_job(agent(ref=None))
    assert "repository: https://github.com/org/docs" in without
    assert "no files changed, no pull request" in without


def test_describe_archived_failed_and_active() -> None:
    archived = describe_agent_job(
        agent(status="archived", archived_at=datetime(2026, 11, 22, 8, 30, tzinfo=UTC))
    )
    assert "archived: 2026-11-22T08:30:00Z" in archived
    assert "created: 2026-11-21T10:00:00Z" in archived
    assert any("unrecoverable" in line for line in describe_agent_job(agent(status="failed")))
    assert any("none yet" in line for line in describe_agent_job(agent(status="active")))
    assert (
        status_line(agent(pr_link="https://x/pull/1"))
        == "agent job aj_1: completed (https://x/pull/1)"
    )


def test_document_has_snake_case_keys() -> None:
    document = agent_job_document(agent(pr_link="https://x/pull/1"))
    assert document == {
        "id": "aj_1",
        "status": "completed",
        "repository": "https://github.com/org/docs",
        "ref": "main",
        "model": "m-1",
        "pr_link": "https://x/pull/1",
        "created_at": "2026-11-21T10:00:00Z",
        "archived_at": None,
    }
    assert json.loads(json.dumps(document)) == document
