"""`mirror status [--json]`: per configured domain, the last run, latest version and next due."""

from __future__ import annotations

from datetime import datetime

import click

from mirror.cli.common import CliContext, reads_only
from mirror.export.status import DomainStatus, domain_status
from mirror.timestamps import rfc3339, utcnow
from mirror.units import format_duration


@click.command("status")
@reads_only
def status_command(cli: CliContext) -> None:
    """Per domain: last run and its state, latest version, next due time, any error.

    Then, per air-gapped site, what it still needs (as `mirror sites`). Reads the index,
    so it works whether or not the daemon is running.
    """
    from mirror.cli.sites import site_lines
    from mirror.store.sitestate import summaries_of

    now = utcnow()
    rows = domain_status(cli.app, now=now)
    sites = summaries_of(cli.app, now)
    cli.emit(
        {
            "generated_at": rfc3339(now),
            "domains": [r.as_dict() for r in rows],
            "sites": [site.as_dict() for site in sites],
        },
        [*status_lines(rows, now), "", *site_lines(sites, now)],
    )


def status_lines(rows: list[DomainStatus], now: datetime) -> list[str]:
    if not rows:
        return ["no domains configured ([[exports]] in the config file)"]
    header = ("DOMAIN", "LAST RUN", "STATE", "VERSION", "NEXT DUE", "ERROR")
    table: list[tuple[str, ...]] = [header]
    for row in rows:
        run = row.last_run
        last = f"#{run['id']} {run['started_at'] or ''}" if run else "-"
        state = run["state"] if run else "-"
        version = row.latest_version["version"] if row.latest_version else "-"
        if row.running:
            due = running_text(row, now)
        elif row.next_due is not None:
            delay = (row.next_due - now).total_seconds()
            due = "now" if delay < 1 else f"in {format_duration(delay)}"
            if row.not_before is not None:
                due += " (deferred)"
        else:
            due = "-"
        table.append((row.domain, last, state, version, due, _one_line(row.error or "")))
    widths = [max(len(line[i]) for line in table) for i in range(len(header) - 1)]
    return [
        "  ".join(cell.ljust(width) for cell, width in zip(line[:-1], widths, strict=True))
        + ("  " + line[-1] if line[-1] else "")
        for line in table
    ] + [
        f"{row.domain} {row.latest_version['version']}: {row.latest_version['site']}"
        for row in rows
        if row.latest_version and row.latest_version.get("site")
    ]


def running_text(row: DomainStatus, now: datetime) -> str:
    """'running (host:pid:nonce, lease 25s left, heartbeat 5s ago)', or why it is not."""
    if row.owner is None or row.lease_expires_at is None:
        return "running (no owner; resumes at the next daemon pass)"
    left = (row.lease_expires_at - now).total_seconds()
    age = row.heartbeat_age
    beat = f", heartbeat {format_duration(age)} ago" if age is not None else ""
    if row.lease_live:
        return f"running ({row.owner}, lease {format_duration(left)} left{beat})"
    expired = format_duration(-left)
    return f"stalled ({row.owner}, lease expired {expired} ago{beat}; taken over next)"


def _one_line(text: str, limit: int = 100) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
