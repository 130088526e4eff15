"""`mirror sites [--json]`: what each air-gapped site still needs, at a glance (issue 22)."""

from __future__ import annotations

from datetime import datetime

import click

from mirror.cli.common import CliContext, reads_only
from mirror.sites import SiteSummary
from mirror.timestamps import rfc3339, utcnow
from mirror.units import format_duration


@click.command("sites")
@reads_only
def sites_command(cli: CliContext) -> None:
    """Per site: last set packed and acknowledged, versions waiting, oldest unacknowledged set.

    Reads the index; with no [[sites]] configured there is one site, `default`."""
    from mirror.store.sitestate import summaries_of

    now = utcnow()
    summaries = summaries_of(cli.app, now)
    cli.emit(
        {"generated_at": rfc3339(now), "sites": [s.as_dict() for s in summaries]},
        site_lines(summaries, now),
    )


def site_lines(summaries: list[SiteSummary], now: datetime) -> list[str]:
    """One table row per site (also under `mirror status`)."""
    header = ("SITE", "PACKED", "ACKNOWLEDGED", "WAITING", "OLDEST UNACKNOWLEDGED", "LOST")
    table: list[tuple[str, ...]] = [header]
    for site in summaries:
        oldest = site.oldest_unacknowledged
        table.append(
            (
                site.name,
                f"set {site.last_packed.sequence}" if site.last_packed else "-",
                f"set {site.last_acknowledged.sequence}" if site.last_acknowledged else "-",
                str(site.waiting),
                f"set {oldest.sequence}, {format_duration(site.oldest_age or 0)} old"
                if oldest
                else "-",
                ", ".join(str(n) for n in site.lost) or "-",
            )
        )
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    return [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in table
    ]
