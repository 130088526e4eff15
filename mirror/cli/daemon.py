"""`mirror daemon`: the long-running service (see mirror/daemon.py and systemd/mirror.service)."""

from __future__ import annotations

import click

from mirror.cli.common import CliContext, Decorator, pass_cli
from mirror.export.daemon import DaemonOptions, run_daemon
from mirror.logs import setup_logging


def _tuning(flag: str, default: float | None, help: str) -> Decorator:
    """A delay of the scheduler in seconds, hidden from --help (tests and tuning)."""
    return click.option(
        flag, type=click.FloatRange(min=0.1), default=default, hidden=True, help=help
    )


@click.command("daemon")
@click.option(
    "--exit-when-idle",
    is_flag=True,
    hidden=True,
    help="Exit 0 once nothing runs and every domain has finished a run (tests, one-shot use).",
)
@click.option("--seed", type=int, default=0, hidden=True, help="Jitter seed (tests).")
@_tuning("--max-sleep", 30.0, "Longest scheduler sleep in seconds.")
@_tuning(
    "--failure-retry",
    None,
    "First retry delay after a failed run (doubles, at most `every`) [default: 300].",
)
@_tuning(
    "--busy-defer",
    None,
    "Deferral when the vendor says busy without Retry-After [default: 2 × poll_interval].",
)
@pass_cli
def daemon_command(
    cli: CliContext,
    exit_when_idle: bool,
    seed: int,
    max_sleep: float,
    failure_retry: float | None,
    busy_defer: float | None,
) -> None:
    """Export every configured domain on its schedule until stopped (SIGTERM).

    Refuses to start (one line, exit 2) on settings that `config check --for daemon`
    refuses: no [[exports]], no usable admin API key. Recovers first (schema, temp files,
    orphan blobs, unfinished runs), then reports ready to systemd (Type=notify). SIGHUP
    reloads the config. Metrics and /healthz on daemon.listen.
    """
    from mirror.cli.preflight import require

    setup_logging(cli.verbosity, service=True)  # first: a refusal below is a log record too
    settings = cli.settings
    require(settings, "daemon")
    options = DaemonOptions(
        usable=lambda reloaded: require(reloaded, "daemon"),
        exit_when_idle=exit_when_idle,
        seed=seed,
        max_sleep=max_sleep,
        busy_defer=busy_defer,
        **({"failure_retry": failure_retry} if failure_retry is not None else {}),
    )
    run_daemon(settings, config_path=cli.config_path, options=options)
