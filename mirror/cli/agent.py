"""`agent-job get` and `agent-job watch`: read and follow the vendor's agent jobs."""

from __future__ import annotations

import click

from mirror.cli.common import DURATION, CliContext, pass_cli
from mirror.cli.preflight import require
from mirror.errors import OperationFailed
from mirror.vendorapi.agentjobs import (
    agent_job_document,
    describe_agent_job,
    status_line,
    watch_agent_job,
)
from mirror.vendorapi.client import AgentJob, VendorClient

project_option = click.option(
    "--project",
    "project_id",
    metavar="P",
    default=None,
    help="Project id [default: api.project_id].",
)


@click.group("agent-job")
def agent_job() -> None:
    """Read and follow the vendor's agent jobs."""


@agent_job.command("get")
@click.argument("job_id")
@project_option
@pass_cli
def get(cli: CliContext, job_id: str, project_id: str | None) -> None:
    """Read one agent job."""
    require(cli.settings, "api")
    with VendorClient.from_settings(cli.settings) as client:
        job = client.agent_job(job_id, project_id)
    cli.emit(agent_job_document(job), describe_agent_job(job))


@agent_job.command("watch")
@click.argument("job_id")
@project_option
@click.option(
    "--interval",
    type=DURATION,
    default="5s",
    show_default=True,
    help="Time between two polls.",
)
@click.option(
    "--timeout",
    type=DURATION,
    default="30m",
    show_default=True,
    help="Give up (exit 75) when the job is still running after this long; 0 waits forever.",
)
@pass_cli
def watch(
    cli: CliContext, job_id: str, project_id: str | None, interval: float, timeout: float
) -> None:
    """Poll until the job is completed, archived or failed; print its pull request.

    Exit 0 when completed or archived, 1 when failed, 75 when still running at the timeout.
    """

    def on_update(job: AgentJob) -> None:
        if cli.interactive:
            cli.say(status_line(job))

    require(cli.settings, "api")
    with VendorClient.from_settings(cli.settings) as client:
        job = watch_agent_job(
            client,
            job_id,
            project_id=project_id,
            interval=interval,
            timeout=timeout or None,
            on_update=on_update,
        )
    if job.failed:
        if not cli.as_json:
            cli.emit(None, describe_agent_job(job))
        where = job.repository or "repository not given"
        raise OperationFailed(
            f"agent job {job.id} failed: {where}{'@' + job.ref if job.ref else ''}, "
            f"model {job.model or 'not given'}; see the job in the vendor's dashboard"
        )
    cli.emit(agent_job_document(job), describe_agent_job(job))
