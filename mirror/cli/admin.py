"""`config check` and `db upgrade`."""

from __future__ import annotations

import json
from typing import Any

import click

from mirror.cli.common import CliContext, pass_cli, reads_only
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


@config_group.command("check")
@reads_only
def config_check(cli: CliContext) -> None:
    """Validate the settings and print them, secrets redacted."""
    settings = cli.settings
    document = settings.redacted()
    document["store"]["database"] = redacted_url(settings.store.database_url())
    for section, key in _URL_SETTINGS:  # a password may ride in any URL's user info
        document[section][key] = redacted_url(document[section][key])
    source = str(settings.source) if settings.source else "(embedded defaults)"
    cli.emit(
        {"source": source, "valid": True, "settings": document},
        [f"# {source}: valid", *flat_lines(document)],
    )


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
    from mirror.store.db import Database

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
