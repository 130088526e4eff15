"""`config check` and `db upgrade`."""

from __future__ import annotations

import json

import click

from mirror.cli.common import CliContext, pass_cli
from mirror.db import safe_url


@click.group("config")
def config_group() -> None:
    """Settings."""


@config_group.command("check")
@pass_cli
def config_check(cli: CliContext) -> None:
    """Validate the settings and print them, secrets redacted."""
    settings = cli.settings
    document = settings.redacted()
    document["store"]["database"] = safe_url(settings.store.database_url())
    source = str(settings.source) if settings.source else "(embedded defaults)"
    cli.emit(
        {"source": source, "valid": True, "settings": document},
        [f"# {source}: valid", json.dumps(document, indent=2)],
    )


@click.group("db")
def db_group() -> None:
    """The store's SQL index."""


@db_group.command("upgrade")
@pass_cli
def db_upgrade(cli: CliContext) -> None:
    """Upgrade the index schema to the newest revision."""
    from mirror.db import Database

    database = Database(cli.settings.store.database_url())
    if cli.settings.store.database == "":
        cli.app.store.ensure()
    before = database.current()
    head = database.upgrade()
    cli.emit(
        {"database": safe_url(database.url), "from": before, "to": head},
        f"index at {safe_url(database.url)}: {before or 'empty'} -> {head}",
    )
