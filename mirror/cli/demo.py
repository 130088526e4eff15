"""`mirror demo`."""

from __future__ import annotations

from pathlib import Path

import click

from mirror.cli.common import CliContext, pass_cli
from mirror.errors import OperationFailed


@click.command("demo")
@click.option(
    "--dir",
    "workdir",
    type=click.Path(path_type=Path, file_okay=False),
    help="Work here instead of a new temporary directory.",
)
@pass_cli
def demo(cli: CliContext, workdir: Path | None) -> None:
    """The whole pipeline on embedded defaults (simulator + S3 server on loopback)."""
    from mirror.sim.demo import run_demo

    result = run_demo(click.echo, workdir)
    if result.failed_step:
        raise OperationFailed(f"demo step failed: {result.failed_step} (see the output above)")
