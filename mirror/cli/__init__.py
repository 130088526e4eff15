"""The `mirror` command line: global options, command registration, and the one error path.

Commands live in the modules beside this one (one per command group; `common` holds the
shared context and option types, `contract` the JSON contract that docs/json.md is
generated from) and only parse, call and print. May import anything in `mirror`, but
each command imports its package inside the command, so `--help` loads only click.
Every failure, a usage error included, becomes one `mirror: error: ...` line
on stderr (plus the JSON error document on stdout with --json) and the exit
code its error class carries; where the process writes only log records
(mirror.logs.logs_only) that line is an error record with `exit_code`. Global options
may come before or after the command (`mirror store list --json`): they are moved to
the front in one place.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import select
import signal
import sys
import traceback
from collections.abc import Callable
from typing import Any, NoReturn

import click

from mirror import __version__
from mirror.cli import heap
from mirror.cli.common import CliContext
from mirror.cli.contract import ERROR_SCHEMA, apply_help
from mirror.errors import EXIT_FAILED, EXIT_TEMPORARY, EXIT_USAGE, MirrorError
from mirror.logs import redact, setup_logging, writing_logs_only

log = logging.getLogger("mirror")

_GLOBAL_FLAGS = frozenset({"--json", "--defaults", "-q", "--quiet", "--verbose"})
_GLOBAL_WITH_VALUE = frozenset({"--config"})


def _is_global(token: str) -> bool:
    return (
        token in _GLOBAL_FLAGS
        or token.startswith("--config=")
        or (len(token) > 1 and token.startswith("-") and set(token[1:]) == {"v"})
    )


def hoist_global_options(args: list[str]) -> list[str]:
    """`args` with the global options moved before the command, wherever they were typed.

    Everything after `--` is left alone; the relative order of the rest is kept.
    """
    hoisted: list[str] = []
    rest: list[str] = []
    index = 0
    while index < len(args):
        arg = args[index]
        if arg == "--":
            rest.extend(args[index:])
            break
        if _is_global(arg):
            hoisted.append(arg)
        elif arg in _GLOBAL_WITH_VALUE and index + 1 < len(args):
            hoisted.extend(args[index : index + 2])
            index += 1
        else:
            rest.append(arg)
        index += 1
    return hoisted + rest


Target = str | Callable[[], click.Command]


class PipeBroken(Exception):
    """A write met a pipe or socket whose other end was closed (see `main`)."""

    def __init__(self, cause: BrokenPipeError) -> None:
        super().__init__(str(cause))
        self.cause = cause


def stdout_reader_gone() -> bool:
    """Whether stdout is a pipe (or socket) whose reader closed it: poll says POLLERR."""
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), 0)
        events = poller.poll(0)
    except (OSError, ValueError):  # no stdout, or not a real file
        return False
    return any(event & select.POLLERR for _, event in events)


def end_like_a_unix_tool() -> NoReturn:
    """The reader of stdout went away (`mirror status | head -1`): end quietly, as `cat` or
    `yes` do, killed by SIGPIPE (the shell says 141; nothing on stderr). Whatever the command
    did is done or crash-safe; only the rest of its output has nobody to read it."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())  # nothing left to flush into the closed pipe
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGPIPE)
    sys.exit(128 + signal.SIGPIPE)  # not reached: the signal ends the process


class LazyGroup(click.Group):
    """A group whose subcommands are imported only when used, so start-up stays quick.

    `--help` lists the commands from their summaries without importing any of
    them. Each command tree is given its help epilog (example, exit codes) from
    mirror.cli.contract when it is loaded.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy: dict[str, Target] = {}
        self.summaries: dict[str, str] = {}

    def add_lazy(self, name: str, target: Target, summary: str) -> None:
        """`target` is "module:attribute" or a function returning the command; `summary` is
        the first paragraph of its help (a test keeps the two in step)."""
        self.lazy[name] = target
        self.summaries[name] = summary

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        names = self.list_commands(ctx)
        if not names:
            return
        limit = formatter.width - 6 - max(len(name) for name in names)
        rows = []
        for name in names:
            command = self.commands.get(name) or click.Command(name, help=self.summaries[name])
            if not command.hidden:
                rows.append((name, command.get_short_help_str(limit)))
        with formatter.section("Commands"):
            formatter.write_dl(rows)

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
            apply_help(command, name)
            self.add_command(command, name)
        return super().get_command(ctx, name)

    def invoke(self, ctx: click.Context) -> Any:
        """Click would end a broken pipe (EPIPE) as a silent exit 1, whatever pipe it was;
        it reaches `main` instead, which tells stdout's reader going away from the rest."""
        try:
            return super().invoke(ctx)
        except BrokenPipeError as exc:
            raise PipeBroken(exc) from exc

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if ctx.parent is None:
            if args and args[-1] in _GLOBAL_WITH_VALUE:
                raise click.UsageError(f"Option '{args[-1]}' requires an argument.", ctx)
            args = hoist_global_options(args)
        return super().parse_args(ctx, args)


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
@click.option(
    "--defaults",
    "allow_defaults",
    is_flag=True,
    help="With no config file anywhere, use the embedded defaults (for trying things).",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document for scripts.")
@click.option("-v", "--verbose", count=True, help="More log output (repeatable).")
@click.option("-q", "--quiet", is_flag=True, help="Only errors.")
@click.version_option(__version__, prog_name="mirror")
@click.pass_context
def cli(
    ctx: click.Context,
    config_path: str | None,
    allow_defaults: bool,
    as_json: bool,
    verbose: int,
    quiet: bool,
) -> None:
    """Carry a documentation vendor's static-export bundles into air-gapped clusters.

    Global options may also follow the command: mirror store list --json.
    """
    verbosity = -1 if quiet else verbose
    setup_logging(verbosity)
    state = CliContext(config_path, as_json, verbosity, allow_defaults=allow_defaults)
    ctx.obj = state
    ctx.call_on_close(state.close)


def _store_group() -> click.Command:
    from mirror.cli import gc, store

    if "gc" not in store.store.commands:
        store.store.add_command(gc.gc_command)
    return store.store


def _transfer_group() -> click.Command:
    from mirror.cli import oneway, transfer

    for command in (oneway.transfer_send, oneway.transfer_receive):
        if command.name not in transfer.transfer_group.commands:
            transfer.transfer_group.add_command(command)
    return transfer.transfer_group


COMMANDS: dict[str, tuple[Target, str]] = {
    "config": ("mirror.cli.admin:config_group", "Settings."),
    "db": ("mirror.cli.admin:db_group", "The store's SQL index."),
    "agent-job": ("mirror.cli.agent:agent_job", "Read and follow the vendor's agent jobs."),
    "export": (
        "mirror.cli.export:export",
        "Static exports from the vendor: the whole cycle, or its raw API steps.",
    ),
    "store": (_store_group, "The local store of downloaded bundles and their versions."),
    "daemon": (
        "mirror.cli.daemon:daemon_command",
        "Export every configured domain on its schedule until stopped (SIGTERM).",
    ),
    "status": (
        "mirror.cli.status:status_command",
        "Per domain: last run and its state, latest version, next due time, any error.",
    ),
    "sites": (
        "mirror.cli.sites:sites_command",
        "Per site: last set packed and acknowledged, versions waiting, oldest unacknowledged set.",
    ),
    "keys": ("mirror.cli.keys:keys_group", "Signing keys for transfer sets."),
    "transfer": (
        _transfer_group,
        "Signed transfer sets: pack, verify, import, acknowledge, push, send, receive.",
    ),
    "bundle-self": (
        "mirror.cli.bundle:bundle_self_command",
        "Write OUT/mirror-tool-VERSION.tar: wheels, install.sh, units, example config, signed.",
    ),
    "chart": (
        "mirror.cli.chart:chart",
        "Values for the vendor's Helm chart, and which version of each domain is live.",
    ),
    "evidence": (
        "mirror.cli.evidence:evidence_command",
        "One version's evidence (digest, provenance, verification record, keys, VERIFY.md).",
    ),
    "serve": (
        "mirror.cli.serve:serve_command",
        "Serve the bucket's versions to the vendor's pods: verified, at links that never expire.",
    ),
    "target": (
        "mirror.cli.target:target_group",
        "The air-gapped side's object store: probe what it really does.",
    ),
    "sim": ("mirror.cli.sim:sim", "The vendor API simulator (for tests, demos and benchmarks)."),
    "demo": (
        "mirror.cli.demo:demo",
        "The whole pipeline on embedded defaults (simulator + S3 server on loopback).",
    ),
}
for _name, (_target, _summary) in COMMANDS.items():
    cli.add_lazy(_name, _target, _summary)


def fail(
    message: str, exit_code: int, as_json: bool, document: dict[str, object] | None = None
) -> NoReturn:
    """The one way out on failure: one line on stderr, the error document on stdout with --json
    (the command's own `document` with the error added, when it gave one). Where the process
    writes only log records (mirror.logs.logs_only) the line is one: level error, the
    message, its `exit_code` (under journald `<3>` before it, as every error record)."""
    message = " ".join(redact(message).split())
    if as_json:
        error = {"error": message, "exit_code": exit_code}
        if document is None:
            click.echo(json.dumps({"schema": ERROR_SCHEMA, **error}))
        else:
            text = json.dumps({**document, **error}, indent=2, default=str)
            click.echo(redact(text))
    if writing_logs_only():
        log.error("%s", message, extra={"exit_code": exit_code})
    else:
        click.echo(f"mirror: error: {message}", err=True)
    sys.exit(exit_code)


def _usage_message(exc: click.UsageError) -> str:
    where = exc.ctx.command_path if exc.ctx is not None else "mirror"
    return f"{exc.format_message().rstrip('.')} (see `{where} --help`)"


def _missing_command(exc: click.UsageError) -> str:
    ctx = exc.ctx
    if ctx is None or not isinstance(ctx.command, click.Group):
        return "a command is missing (see `mirror --help`)"
    names = ", ".join(ctx.command.list_commands(ctx))
    return f"{ctx.command_path} needs a command: {names} (see `{ctx.command_path} --help`)"


def main(argv: list[str] | None = None) -> None:
    """Console entry point: run the command and map every way it can end to an exit code.
    The heap is set up first (`mirror.cli.heap`): large blocks go back to the system when freed,
    and exit does not walk every imported object."""
    heap.return_large_blocks()
    heap.skip_the_exit_collections()
    args = hoist_global_options(list(argv if argv is not None else sys.argv[1:]))
    options = args[: args.index("--")] if "--" in args else args
    as_json = "--json" in options
    verbose = sum(t.count("v") for t in options if _is_global(t) and t.startswith("-v"))
    verbose += options.count("--verbose")
    try:
        result = cli.main(args=args, prog_name="mirror", standalone_mode=False)
    except MirrorError as exc:
        fail(str(exc), exc.exit_code, as_json, exc.document)
    except PipeBroken as exc:
        if stdout_reader_gone():
            end_like_a_unix_tool()
        unexpected(exc.cause, verbose, as_json)
    except (click.exceptions.Abort, KeyboardInterrupt):
        fail("interrupted; run the same command again to resume", EXIT_TEMPORARY, as_json)
    except click.exceptions.NoArgsIsHelpError as exc:
        if not as_json and exc.ctx is not None:
            click.echo(exc.ctx.get_help(), err=True)
        fail(_missing_command(exc), EXIT_USAGE, as_json)
    except click.UsageError as exc:
        fail(_usage_message(exc), EXIT_USAGE, as_json)
    except click.ClickException as exc:
        fail(exc.format_message(), exc.exit_code, as_json)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except Exception as exc:  # the last resort: never a traceback unless asked for
        unexpected(exc, verbose, as_json)
    sys.exit(result if isinstance(result, int) else 0)


def unexpected(exc: BaseException, verbose: int, as_json: bool) -> NoReturn:
    """An error no class of mirror.errors names: one line, exit 1; the traceback with -v."""
    if verbose and writing_logs_only():
        log.error("traceback of the unexpected error", exc_info=exc)
    elif verbose:
        traceback.print_exception(exc)
    detail = str(exc) or "no detail"
    fail(
        f"unexpected {type(exc).__name__}: {detail}"
        + ("" if verbose else " (run again with -v for the traceback)"),
        EXIT_FAILED,
        as_json,
    )
