"""`mirror agent-job get|watch` as operators run it: a real subprocess against the simulator."""

from __future__ import annotations

import json
import subprocess
import threading
from pathlib import Path

import pytest

from mirror.sim import Simulator
from tests.fixtures.cli import mirror_cli, on_a_terminal, write_config
from tests.fixtures.daemon import wait_for


def run(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return mirror_cli(*args, env=env)


@pytest.fixture
def config(sim: Simulator, tmp_path: Path) -> Path:
    return write_config(
        tmp_path / "config.toml",
        {
            "api": {
                "base_url": sim.url,
                "project_id": "proj_sim",
                "retry_attempts": 2,
                "retry_timeout": "5s",
            },
            "store": {"path": str(tmp_path / "store")},
        },
    )


@pytest.fixture
def env(sim: Simulator) -> dict[str, str]:
    return {"MIRROR_API_KEY": sim.key}


def test_agent_job_is_registered() -> None:
    result = mirror_cli("agent-job", "--help")
    assert result.returncode == 0 and "watch" in result.stdout


def test_get_prints_json_with_snake_case_keys(
    sim: Simulator, config: Path, env: dict[str, str]
) -> None:
    job_id = sim.add_agent_job("pr", seconds=0)
    result = run("--config", str(config), "--json", "agent-job", "get", job_id, env=env)
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert set(document) == {
        "schema",
        "id",
        "status",
        "repository",
        "ref",
        "model",
        "pr_link",
        "created_at",
        "archived_at",
    }
    assert document["id"] == job_id and document["status"] == "completed"
    assert document["pr_link"].startswith("https://github.com/")


def test_get_prints_human_lines_and_keeps_the_key_out_of_debug_logs(
    sim: Simulator, config: Path, env: dict[str, str]
) -> None:
    job_id = sim.add_agent_job("no_changes", seconds=0)
    result = run("--config", str(config), "-vv", "agent-job", "get", job_id, env=env)
    assert result.returncode == 0, result.stderr
    assert f"agent job {job_id}: completed" in result.stdout
    assert "no files changed, no pull request" in result.stdout
    assert f"/v2/agent/proj_sim/job/{job_id}" in result.stderr  # the debug request line
    assert sim.key not in result.stdout + result.stderr


@pytest.mark.parametrize(
    ("outcome", "expected"),
    [("pr", "pull request: https://github.com/"), ("archived", "archived: ")],
)
def test_watch_ends_with_exit_0(
    sim: Simulator, config: Path, env: dict[str, str], outcome: str, expected: str
) -> None:
    job_id = sim.add_agent_job(outcome, seconds=0.5)
    result = run(
        "--config", str(config), "agent-job", "watch", job_id, "--interval", "100ms", env=env
    )
    assert result.returncode == 0, result.stderr
    assert expected in result.stdout


def test_watch_json_of_a_completed_job(sim: Simulator, config: Path, env: dict[str, str]) -> None:
    job_id = sim.add_agent_job("no_changes", seconds=0.3)
    result = run(
        "--config",
        str(config),
        "--json",
        "agent-job",
        "watch",
        job_id,
        "--interval",
        "0.1",
        env=env,
    )
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert (document["status"], document["pr_link"]) == ("completed", None)


def test_watch_of_a_failed_job_exits_1(sim: Simulator, config: Path, env: dict[str, str]) -> None:
    job_id = sim.add_agent_job("failed", seconds=0.2)
    result = run(
        "--config", str(config), "agent-job", "watch", job_id, "--interval", "100ms", env=env
    )
    assert result.returncode == 1
    assert f"mirror: error: agent job {job_id} failed" in result.stderr
    assert f"agent job {job_id}: failed" in result.stdout
    as_json = run(
        "--config", str(config), "--json", "agent-job", "watch", job_id, "--interval", "1s", env=env
    )
    assert as_json.returncode == 1
    assert json.loads(as_json.stdout)["exit_code"] == 1  # exactly one JSON document


def test_watch_timeout_exits_75(sim: Simulator, config: Path, env: dict[str, str]) -> None:
    sim.set_faults(hold_jobs=True)  # active for as long as the test runs
    job_id = sim.add_agent_job("pr", seconds=0)
    result = run(
        "--config",
        str(config),
        "agent-job",
        "watch",
        job_id,
        "--interval",
        "100ms",
        "--timeout",
        "500ms",
        env=env,
    )
    assert result.returncode == 75
    assert f"agent job {job_id} still active after" in result.stderr


def test_wrong_key_exits_4_without_showing_it(sim: Simulator, config: Path, tmp_path: Path) -> None:
    wrong = "mint_wrong_cli_key_0123456789"
    job_id = sim.add_agent_job("pr", seconds=0)
    for flags in (["-vv"], ["--json", "-vv"]):
        result = run(
            "--config",
            str(config),
            *flags,
            "agent-job",
            "get",
            job_id,
            env={"MIRROR_API_KEY": wrong},
        )
        assert result.returncode == 4
        assert "check the admin API key" in result.stderr
        assert wrong not in result.stdout + result.stderr
        assert sim.key not in result.stdout + result.stderr
    assert sim.stats.auth_failures == 2


def test_project_comes_from_option_or_settings(
    sim: Simulator, tmp_path: Path, env: dict[str, str]
) -> None:
    job_id = sim.add_agent_job("pr", seconds=0)
    bare = write_config(
        tmp_path / "bare.toml",
        {"api": {"base_url": sim.url}, "store": {"path": str(tmp_path / "store")}},
    )
    missing = run("--config", str(bare), "agent-job", "get", job_id, env=env)
    assert missing.returncode == 2
    assert "api.project_id" in missing.stderr
    given = run("--config", str(bare), "agent-job", "get", job_id, "--project", "proj_sim", env=env)
    assert given.returncode == 0, given.stderr
    unknown = run(
        "--config", str(bare), "agent-job", "get", "aj_nope", "--project", "proj_sim", env=env
    )
    assert unknown.returncode == 3
    assert "Agent job not found" in unknown.stderr


def test_bad_interval_is_a_usage_error(config: Path, env: dict[str, str]) -> None:
    result = run(
        "--config", str(config), "agent-job", "watch", "aj_1", "--interval", "soon", env=env
    )
    assert result.returncode == 2
    assert "not a duration" in result.stderr


def test_watch_on_a_terminal_prints_status_changes(
    sim: Simulator, config: Path, env: dict[str, str]
) -> None:
    """stderr on a pseudo-terminal: each status change is reported as it happens. The job is
    held active until the command has read it twice (a status read again is no change)."""
    sim.set_faults(hold_jobs=True)
    job_id = sim.add_agent_job("pr", seconds=0)
    args = ["--config", str(config), "agent-job", "watch", job_id, "--interval", "100ms"]
    ran: list[tuple[int, str, str]] = []
    watcher = threading.Thread(target=lambda: ran.append(on_a_terminal(*args, env=env)))
    watcher.start()
    try:
        wait_for(lambda: sim.stats.agent_calls.get(job_id, 0) >= 2, 120, "two reads of the job")
    finally:
        sim.set_faults(hold_jobs=False)
        watcher.join(120)
    ((code, stdout, drawn),) = ran
    terminal = drawn.replace("\r\n", "\n")
    assert code == 0, terminal
    changes = [line for line in terminal.splitlines() if line.startswith("agent job")]
    assert changes[0] == f"agent job {job_id}: active"
    assert changes[-1].startswith(f"agent job {job_id}: completed (https://github.com/")
    assert len(changes) == 2
    assert "pull request: https://github.com/" in stdout
