"""The `mirror` command line: global options, command registration, and the one error mapping.

Commands live in the modules beside this one and only parse, call and print.
Every failure becomes one line on stderr (or a JSON document with --json) and
the exit code its error class carries.
"""

from __future__ import annotations

import json
import logging
import sys

import click

from mirror import __version__
from mirror.cli.common import CliContext
from mirror.errors import EXIT_TEMPORARY, EXIT_USAGE, MirrorError
from mirror.logs import redact, setup_logging

log = logging.getLogger("mirror")


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option(
    "--config",
    "config_path",
    metavar="PATH",
    help="Settings file [default: $MIRROR_CONFIG, then /etc/mirror/config.toml].",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document for scripts.")
@click.option("-v", "--verbose", count=True, help="More log output (repeatable).")
@click.option("-q", "--quiet", is_flag=True, help="Only errors.")
@click.version_option(__version__, prog_name="mirror")
@click.pass_context
def cli(
    ctx: click.Context, config_path: str | None, as_json: bool, verbose: int, quiet: bool
) -> None:
    """Carry a documentation vendor's static-export bundles into air-gapped clusters."""
    verbosity = -1 if quiet else verbose
    setup_logging(verbosity)
    state = CliContext(config_path, as_json, verbosity)
    ctx.obj = state
    ctx.call_on_close(state.close)


def _register() -> None:
    from mirror.cli import (
        admin,
        agent,
        chart,
        daemon,
        demo,
        export,
        gc,
        keys,
        sim,
        status,
        store,
        transfer,
    )

    store.store.add_command(gc.gc_command)
    for command in (
        admin.config_group,
        admin.db_group,
        agent.agent_job,
        export.export,
        store.store,
        daemon.daemon_command,
        status.status_command,
        keys.keys_group,
        transfer.transfer_group,
        chart.chart,
        sim.sim,
        demo.demo,
    ):
        cli.add_command(command)


_register()


def _fail(message: str, exit_code: int, as_json: bool) -> None:
    message = redact(message)
    if as_json:
        click.echo(json.dumps({"error": message, "exit_code": exit_code}))
    click.echo(f"mirror: error: {message}", err=True)
    sys.exit(exit_code)


def main(argv: list[str] | None = None) -> None:
    """Console entry point."""
    as_json = "--json" in (argv if argv is not None else sys.argv[1:])
    try:
        result = cli.main(args=argv, prog_name="mirror", standalone_mode=False)
    except MirrorError as exc:
        _fail(str(exc), exc.exit_code, as_json)
    except click.exceptions.Abort:
        _fail("interrupted; run the same command again to resume", EXIT_TEMPORARY, as_json)
    except KeyboardInterrupt:
        _fail("interrupted; run the same command again to resume", EXIT_TEMPORARY, as_json)
    except click.ClickException as exc:
        exc.show()
        sys.exit(EXIT_USAGE if exc.exit_code == 2 else exc.exit_code)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    sys.exit(result if isinstance(result, int) else 0)
