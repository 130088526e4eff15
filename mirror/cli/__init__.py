"""The `mirror` command line: global options, command registration, and the one error mapping.

Commands live in the modules beside this one and only parse, call and print.
Every failure becomes one line on stderr (or a JSON document with --json) and
the exit code its error class carries.
"""

from __future__ import annotations

import importlib
import json
import logging
import sys
from collections.abc import Callable
from typing import Any

import click

from mirror import __version__
from mirror.cli.common import CliContext
from mirror.errors import EXIT_TEMPORARY, EXIT_USAGE, MirrorError
from mirror.logs import redact, setup_logging

log = logging.getLogger("mirror")


class LazyGroup(click.Group):
    """A group whose subcommands are imported only when used, so start-up stays quick."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy: dict[str, str | Callable[[], click.Command]] = {}

    def add_lazy(self, name: str, target: str | Callable[[], click.Command]) -> None:
        """`target` is "module:attribute" or a function returning the command."""
        self.lazy[name] = target

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy})

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in self.commands and name in self.lazy:
            target = self.lazy[name]
            if isinstance(target, str):
                module_name, attribute = target.split(":")
                command = getattr(importlib.import_module(module_name), attribute)
            else:
                command = target()
            self.add_command(command, name)
        return super().get_command(ctx, name)


@click.group(
    cls=LazyGroup,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
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


def _store_group() -> click.Command:
    from mirror.cli import gc, store

    if "gc" not in store.store.commands:
        store.store.add_command(gc.gc_command)
    return store.store


COMMANDS: dict[str, str | Callable[[], click.Command]] = {
    "config": "mirror.cli.admin:config_group",
    "db": "mirror.cli.admin:db_group",
    "agent-job": "mirror.cli.agent:agent_job",
    "export": "mirror.cli.export:export",
    "store": _store_group,
    "daemon": "mirror.cli.daemon:daemon_command",
    "status": "mirror.cli.status:status_command",
    "keys": "mirror.cli.keys:keys_group",
    "transfer": "mirror.cli.transfer:transfer_group",
    "bundle-self": "mirror.cli.bundle:bundle_self_command",
    "chart": "mirror.cli.chart:chart",
    "sim": "mirror.cli.sim:sim",
    "demo": "mirror.cli.demo:demo",
}
for _name, _target in COMMANDS.items():
    cli.add_lazy(_name, _target)


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
