"""What every command shares: the parsed global options, the lazily built app, and output."""

from __future__ import annotations

import functools
import json
import logging
import sys
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import TYPE_CHECKING, Any, BinaryIO, NoReturn, ParamSpec, TypeVar

import click

from mirror.logs import STDOUT_LOGGER, writing_logs_only
from mirror.timestamps import rfc3339

if TYPE_CHECKING:
    from mirror.config import Settings
    from mirror.errors import MirrorError
    from mirror.store.app import App

log = logging.getLogger("mirror.cli")
stdout_log = logging.getLogger(STDOUT_LOGGER)

P = ParamSpec("P")
R = TypeVar("R")
Decorator = Callable[[Callable[..., Any]], Callable[..., Any]]
"""What a `click.option` gives: it decorates a command."""


class CliContext:
    """Global options and the app, built on first use so `--help` never reads a config.

    `read_only` commands (see `reads_only`) get an app that never creates the
    store directory or the index: NotFound (exit 3) when there is none yet.
    """

    def __init__(
        self,
        config_path: str | None,
        as_json: bool,
        verbosity: int,
        *,
        allow_defaults: bool = False,
    ) -> None:
        self.config_path = config_path
        self.as_json = as_json
        self.verbosity = verbosity
        self.allow_defaults = allow_defaults
        self.read_only = False
        self._settings: Settings | None = None
        self._app: App | None = None

    @property
    def settings(self) -> Settings:
        if self._settings is None:
            from mirror.config import load_settings

            self._settings = load_settings(self.config_path, allow_defaults=self.allow_defaults)
        return self._settings

    @property
    def app(self) -> App:
        if self._app is None:
            from mirror.store.app import App

            self._app = App(self.settings, read_only=self.read_only)
        return self._app

    @property
    def interactive(self) -> bool:
        """Progress bars and colours only for a person at a terminal."""
        return not self.as_json and self.verbosity >= 0 and sys.stderr.isatty()

    def emit(self, data: Any, human: str | Iterable[str] | None = None) -> None:
        """One JSON document on stdout with --json; otherwise the human lines (unless -q).

        The document gets its `schema` (see mirror.cli.contract and docs/json.md)
        from the command that runs; datetimes become RFC 3339 UTC strings. In a process
        that writes only log records (mirror.logs.logs_only) the human lines are one INFO
        record instead (`report`).
        """
        if self.as_json:
            text = json.dumps(_schemed(data), indent=2, default=_json_default, sort_keys=False)
            write_whole(text)
            return
        if human is None or self.verbosity < 0:
            return
        lines = [human] if isinstance(human, str) else list(human)
        if writing_logs_only():
            report(lines, _schemed(data))
            return
        for line in lines:
            click.echo(line)

    def fail_with(self, data: dict[str, Any], error: MirrorError) -> NoReturn:
        """Fail with `error`; with --json the document is `data` (this command's schema) plus
        `error` and `exit_code`. The CLI's one error path prints it (mirror.cli.main)."""
        from mirror.cli.contract import schema_name

        error.document = {"schema": schema_name(click.get_current_context().command_path), **data}
        raise error

    def say(self, line: str) -> None:
        """A progress note for a person on stderr; silent with --json or -q; a log record
        where the process writes only those."""
        if not self.as_json and self.verbosity >= 0:
            if writing_logs_only():
                log.info("%s", line)
            else:
                click.echo(line, err=True)

    def announce(self, line: str, **fields: object) -> None:
        """What a service says once on stdout (where it listens), for a person or a script;
        a log record with `fields` there where the process writes only those."""
        if writing_logs_only():
            stdout_log.info("%s", line, extra=fields)
        else:
            click.echo(line)

    def close(self) -> None:
        if self._app is not None:
            self._app.close()


def write_whole(text: str) -> None:
    """`text` and a newline on stdout, all of it or BrokenPipeError: a write cut short (the
    reader went away half-way through a large document) is continued, so it meets the closed
    pipe; Python's text layer drops the rest of a short write in silence, and the command
    ended 0 with half a document read."""
    stream = sys.stdout
    buffer: BinaryIO | None = getattr(stream, "buffer", None)
    if buffer is None:
        click.echo(text)
        return
    stream.flush()
    rest = memoryview((text + "\n").encode("utf-8"))
    while rest:
        rest = rest[buffer.write(rest) :]
    buffer.flush()


def _schemed(data: Any) -> dict[str, Any]:
    """`data` with the `schema` of the command that runs (mirror.cli.contract)."""
    from mirror.cli.contract import schema_name

    return {"schema": schema_name(click.get_current_context().command_path), **data}


def report(lines: list[str], document: dict[str, Any]) -> None:
    """A command's report as one log record on stdout: `message` its first line, `lines` the rest,
    `result` the document `--json` would print (its stable fields), `command` its path."""
    result = json.loads(json.dumps(document, default=_json_default))
    command = click.get_current_context().command_path
    first, rest = (lines[0], lines[1:]) if lines else ("done", [])
    stdout_log.info("%s", first, extra={"command": command, "lines": rest, "result": result})


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return rfc3339(value)
    return str(value)


def get_cli(ctx: click.Context | None = None) -> CliContext:
    ctx = ctx or click.get_current_context()
    obj = ctx.find_object(CliContext)
    if obj is None:
        raise RuntimeError("command run outside the mirror CLI")
    return obj


def pass_cli(function: Callable[..., R]) -> Callable[..., R]:
    """Hand the command its CliContext as the first argument."""

    @click.pass_context
    def wrapper(ctx: click.Context, /, *args: Any, **kwargs: Any) -> R:
        return function(get_cli(ctx), *args, **kwargs)

    return functools.update_wrapper(wrapper, function)


def reads_only(function: Callable[..., R]) -> Callable[..., R]:
    """Like `pass_cli`, for a command that must never create the store or the index."""

    @click.pass_context
    def wrapper(ctx: click.Context, /, *args: Any, **kwargs: Any) -> R:
        cli = get_cli(ctx)
        cli.read_only = True
        return function(cli, *args, **kwargs)

    return functools.update_wrapper(wrapper, function)


class DurationType(click.ParamType[float]):
    """A duration like 30s, 10m, 1h30m, 7d (or plain seconds)."""

    name = "duration"

    def convert(
        self, value: object, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        from mirror.units import parse_duration

        if isinstance(value, float):
            return value
        try:
            return parse_duration(value if isinstance(value, int) else str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


class SizeType(click.ParamType[int]):
    """A size like 512MiB, 4GiB (or plain bytes)."""

    name = "size"

    def convert(
        self, value: object, param: click.Parameter | None, ctx: click.Context | None
    ) -> int:
        from mirror.units import parse_size

        if isinstance(value, int):
            return value
        try:
            return parse_size(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


class DomainType(click.ParamType[str]):
    """A documentation domain (mirror.hostnames): every command's domain argument or option is
    checked here, once, and arrives lower-cased; anything else is a usage error (exit 2)."""

    name = "domain"

    def convert(
        self, value: object, param: click.Parameter | None, ctx: click.Context | None
    ) -> str:
        from mirror.hostnames import normalize_domain

        try:
            return normalize_domain(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


DURATION = DurationType()
SIZE = SizeType()
DOMAIN = DomainType()


def domains_option(help: str) -> Decorator:
    """`--domain D`, repeatable, into the command's `domains` tuple."""
    return click.option("--domain", "domains", multiple=True, type=DOMAIN, metavar="D", help=help)
