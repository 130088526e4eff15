"""`chart values|promote|rollback|history|check|refresh|gc`: the chart's side of the bucket."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING

import click
import httpx

from mirror.airgap import chart as charts
from mirror.airgap import layout
from mirror.airgap.chart.gc import GcReport, gc
from mirror.cli.common import DOMAIN, DURATION, CliContext, domains_option, pass_cli
from mirror.timestamps import utcnow
from mirror.units import format_duration, format_size

if TYPE_CHECKING:
    from mirror.airgap.s3.objectstore import ObjectStore
    from mirror.cli.preflight import Given, Purpose

CHECK_TIMEOUT = httpx.Timeout(60.0, connect=10.0)


def _store(cli: CliContext, purpose: Purpose = "chart", given: Given | None = None) -> ObjectStore:
    """The bucket, after the command's preflight (`mirror.cli.preflight`)."""
    from mirror.airgap.s3.credentials import open_object_store
    from mirror.cli.preflight import require

    require(cli.settings, purpose, given)
    return open_object_store(cli.settings.target)


@click.group("chart")
def chart() -> None:
    """Values for the vendor's Helm chart, and which version of each domain is live."""


@chart.command("values")
@click.argument("domain", type=DOMAIN)
@click.option(
    "--pin", "version", metavar="V", help="This stored version instead of the current one."
)
@click.option("--version", "version", metavar="V", hidden=True, help="Deprecated: --pin.")
@click.option(
    "--moving",
    is_flag=True,
    help='Link the current version, following promote and rollback (url_mode "serve").',
)
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write the values to FILE (atomically) instead of stdout.",
)
@pass_cli
def values_command(
    cli: CliContext, domain: str, version: str | None, moving: bool, out: Path | None
) -> None:
    """Render staticExport values for DOMAIN's current (or pinned) version."""
    settings = cli.settings
    values = charts.render_values(
        _store(cli),
        settings.target,
        domain,
        version,
        served_at=settings.serve.public_url,
        moving=moving,
    )
    data = values.as_dict()
    if out is not None:
        charts.write_values(values, out)
        data["out"] = str(out)
        cli.emit(data, f"wrote {out}: {values.domain} {values.version}; {values.expiry_note()}")
        return
    if cli.as_json:
        data["values"] = values.text()
        cli.emit(data)
        return
    click.echo(values.text(), nl=False)
    cli.say(values.expiry_note())


@chart.command("promote")
@click.argument("domain", type=DOMAIN)
@click.argument("version")
@pass_cli
def promote_command(cli: CliContext, domain: str, version: str) -> None:
    """Make VERSION the current version of DOMAIN (recorded in DOMAIN/current.json)."""
    store = _store(cli)
    before = layout.read_current(store, domain)
    previous = before.current if before else None
    document = charts.promote(store, domain, version)
    cli.emit(
        {"domain": domain, "current": document.current, "previous": previous},
        f"{domain}: {version} is current"
        + (f" (was {previous})" if previous and previous != version else "")
        + f"; render the values with: mirror chart values {domain}",
    )


@chart.command("rollback")
@click.argument("domain", type=DOMAIN)
@pass_cli
def rollback_command(cli: CliContext, domain: str) -> None:
    """Make the version promoted before the current one current again."""
    store = _store(cli)
    before = layout.read_current(store, domain)
    previous = before.current if before else None
    document = charts.rollback(store, domain)
    cli.emit(
        {"domain": domain, "current": document.current, "previous": previous},
        f"{domain}: rolled back from {previous} to {document.current}; "
        f"render the values with: mirror chart values {domain}",
    )


@chart.command("history")
@click.argument("domain", type=DOMAIN)
@pass_cli
def history_command(cli: CliContext, domain: str) -> None:
    """List DOMAIN's promotions and rollbacks, newest first."""
    from mirror.cli.chartextra import history_sites

    store = _store(cli)
    document = charts.read_history(store, domain)
    entries = charts.history_view(document)
    current = document.current if document else None
    sites = history_sites(cli, store, domain, [entry.version for entry in entries])
    lines = [
        f"{'*' if entry.current else ' '} {entry.version:<16} {entry.action:<8} {entry.at}"
        + (f"  {sites[entry.version]}" if sites.get(entry.version) else "")
        for entry in entries
    ] or [f"{domain}: nothing promoted yet (mirror chart promote {domain} VERSION)"]
    cli.emit(
        {
            "domain": domain,
            "current": current,
            "history": [
                {**dataclasses.asdict(entry), "site": sites.get(entry.version)} for entry in entries
            ],
        },
        lines,
    )


@chart.command("check")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--warn",
    default="24h",
    show_default=True,
    type=DURATION,
    help="Fail when the link expires within this time.",
)
@click.option(
    "--provenance",
    is_flag=True,
    help="Also verify the version's signed provenance in the bucket (target.transfer_keys), "
    "then this site's verification record of it (target.receipt_keys).",
)
@click.option(
    "--site",
    is_flag=True,
    help="Also unpack the bundle, serve it on loopback and crawl every page over HTTP.",
)
@pass_cli
def check_command(cli: CliContext, file: Path, warn: float, provenance: bool, site: bool) -> None:
    """Fetch FILE's bundleUrl as the chart would and compare it with the version's manifest."""
    store = _store(cli)
    target = cli.settings.target
    with httpx.Client(timeout=CHECK_TIMEOUT, verify=target.ca_bundle or True) as http:
        report = charts.check_values_file(file, store, http, warn=warn)
        document, lines = report.as_dict(), report.lines()
        if report.error is not None:
            cli.fail_with(document, report.error)
        if provenance:
            from mirror.cli.chartextra import provenance_check

            error = provenance_check(cli, store, report, document, lines)
            if error is not None:
                cli.fail_with({**document, "status": "provenance-failed"}, error)
        if site:
            from mirror.cli.chartextra import site_check

            error = site_check(http, file, document, lines)
            if error is not None:
                cli.fail_with({**document, "status": "site-broken"}, error)
    cli.emit(document, lines)


@chart.command("refresh")
@domains_option("Refresh this domain (repeatable) [default: every [[exports]] domain].")
@pass_cli
def refresh_command(cli: CliContext, domains: tuple[str, ...]) -> None:
    """Render chart.values_path again where its link expires soon or its version changed."""
    from mirror.cli.preflight import Given

    settings = cli.settings
    store = _store(cli, "refresh", Given(domains=domains))
    chosen = list(domains) or [export.domain for export in settings.exports]
    try:
        results = charts.refresh_values(
            store,
            settings.target,
            settings.chart,
            chosen,
            served_at=settings.serve.public_url,
        )
    except charts.RefreshFailed as exc:
        for result in exc.results:
            cli.say(result.line())
        cli.fail_with({"results": [r.as_dict() for r in exc.results]}, exc)
    lines = [result.line() for result in results]
    for result in results:
        if result.expires_at is not None:
            left = (result.expires_at - utcnow()).total_seconds()
            lines.append(
                f"  link expires {charts.isoformat(result.expires_at)} (in {format_duration(left)})"
            )
    cli.emit({"results": [r.as_dict() for r in results]}, lines)


@chart.command("gc")
@domains_option("Only this domain (repeatable) [default: every domain in the bucket].")
@click.option(
    "--keep",
    required=True,
    type=click.IntRange(min=1),
    metavar="N",
    help="Versions kept per domain, newest first (at least 1).",
)
@click.option("--dry-run", is_flag=True, help="Only report what would be removed.")
@pass_cli
def gc_command(cli: CliContext, domains: tuple[str, ...], keep: int, dry_run: bool) -> None:
    """Remove old versions from the bucket; never the current one, the rollback target or
    the newest (the next delta's base)."""
    chosen = list(domains)
    report = gc(_store(cli), keep, chosen, dry_run=dry_run)
    cli.emit(report.as_dict(), _gc_lines(report))


def _gc_lines(report: GcReport) -> list[str]:
    verb = "would remove" if report.dry_run else "removed"
    lines: list[str] = []
    for result in report.domains:
        if result.finished:
            finish = "would finish" if report.dry_run else "finished"
            lines.append(
                f"{result.domain}: {finish} an interrupted gc of {', '.join(result.finished)}"
            )
        for version in result.removed:
            freed = format_size(version.freed)
            lines.append(f"{result.domain}: {verb} {version.ref.label} ({freed})")
        kept = ", ".join(f"{v.label} ({', '.join(v.reasons)})" for v in result.kept)
        lines.append(f"{result.domain}: keeping {kept or 'nothing'}")
    count = sum(len(result.removed) for result in report.domains)
    lines.append(
        f"{'would free' if report.dry_run else 'freed'} {format_size(report.bytes_freed)} "
        f"({count} version(s) of {len(report.domains)} domain(s)); keeping the newest "
        f"{report.keep} per domain, the current version and the rollback target"
    )
    return lines
