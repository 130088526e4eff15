"""`store gc [--keep N] [--dry-run]`: drop old versions and unreferenced blobs.

The lead attaches `gc` to the `store` group.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from mirror.cli.common import CliContext, pass_cli
from mirror.units import format_size

if TYPE_CHECKING:
    from mirror.store.retention import GcReport


@click.command("gc")
@click.option(
    "--keep",
    type=click.IntRange(min=1),
    metavar="N",
    help="Versions kept per domain, newest first [default: store.keep].",
)
@click.option("--dry-run", is_flag=True, help="Only report what would be removed.")
@pass_cli
def gc_command(cli: CliContext, keep: int | None, dry_run: bool) -> None:
    """Keep the newest N versions per domain (plus anything not yet delivered); free the rest."""
    from mirror.store.retention import gc

    report = gc(cli.app, keep if keep is not None else cli.settings.store.keep, dry_run=dry_run)
    cli.emit(report.as_dict(), report_lines(report))


def report_lines(report: GcReport) -> list[str]:
    verb = "would remove" if report.dry_run else "removed"
    lines = [f"{verb} {v.domain} {v.label}" for v in report.versions]
    freed = format_size(report.bytes_freed)
    summary = (
        f"{'would free' if report.dry_run else 'freed'} {freed} "
        f"({len(report.versions)} version(s), {len(report.blobs)} blob(s)); "
        f"keeping the newest {report.keep} per domain"
    )
    if report.kept_undelivered:
        summary += f" plus {report.kept_undelivered} older version(s) not yet delivered"
    lines.append(summary)
    return lines
