"""`config check` and `db upgrade`."""

from __future__ import annotations

import json
from typing import Any

import click

from mirror.cli.common import CliContext, pass_cli, reads_only
from mirror.cli.preflight import DEFAULT_PURPOSE, PURPOSES, Purpose
from mirror.errors import MirrorError
from mirror.logs import redacted_url


@click.group("config")
def config_group() -> None:
    """Settings."""


_URL_SETTINGS = (
    ("api", "base_url"),
    ("target", "endpoint_url"),
    ("target", "presign_endpoint_url"),
    ("target", "public_base_url"),
)


@config_group.command(
    "check",
    help="Validate the settings, check that they can serve the commands of one purpose as "
    "those commands check it when they start, and print them, secrets redacted.\n\n"
    "\b\nPurposes (--for) and their commands:\n"
    + "\n".join(f"  {name:<8} {commands}" for name, commands in PURPOSES.items()),
)
@click.option(
    "--for",
    "purpose",
    type=click.Choice(list(PURPOSES)),
    default=DEFAULT_PURPOSE,
    show_default=True,
    help="What to check the settings for.",
)
@reads_only
def config_check(cli: CliContext, purpose: Purpose) -> None:
    from mirror.cli.preflight import require

    settings = cli.settings
    document = settings.redacted()
    document["store"]["database"] = redacted_url(settings.store.database_url())
    for section, key in _URL_SETTINGS:  # a password may ride in any URL's user info
        document[section][key] = redacted_url(document[section][key])
    source = str(settings.source) if settings.source else "(embedded defaults)"
    data = {"source": source, "valid": True, "settings": document}
    try:
        require(settings, purpose)
    except MirrorError as exc:
        cli.fail_with({**data, "valid": False}, exc)
    cli.emit(data, [f"# {source}: valid for {purpose}", *flat_lines(document)])


def flat_lines(document: dict[str, Any], prefix: str = "") -> list[str]:
    """`section.key = value` lines; arrays of tables get an index (`exports.0.domain`)."""
    lines: list[str] = []
    for key, value in document.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            lines.extend(flat_lines(value, f"{name}."))
        elif isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            for index, entry in enumerate(value):
                lines.extend(flat_lines(entry, f"{name}.{index}."))
        else:
            lines.append(f"{name} = {json.dumps(value)}")
    return lines


@click.group("db")
def db_group() -> None:
    """The store's SQL index."""


@db_group.command("upgrade")
@pass_cli
def db_upgrade(cli: CliContext) -> None:
    """Upgrade the index schema to the newest revision."""
    from mirror.cli.preflight import require
    from mirror.store.db import Database

    require(cli.settings, "db")
    if cli.settings.store.database == "":
        cli.app.check_index_kept()
    database = Database(cli.settings.store.database_url())
    if cli.settings.store.database == "":
        cli.app.store.ensure()
    before = database.current()
    head = database.upgrade()
    cli.emit(
        {"database": redacted_url(database.url), "from": before, "to": head},
        f"index at {redacted_url(database.url)}: {before or 'empty'} -> {head}",
    )
