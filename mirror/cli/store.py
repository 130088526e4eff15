"""`store list` and `store verify`: the connected side's store."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from mirror.cli import heap
from mirror.cli.common import DOMAIN, CliContext, pass_cli, reads_only
from mirror.errors import IntegrityError
from mirror.units import format_size

if TYPE_CHECKING:
    from mirror.store.inventory import StoredVersion, VerifyReport
    from mirror.store.maintenance.repair import RepairReport


@click.group("store")
def store() -> None:
    """The local store of downloaded bundles and their versions."""


@store.command("list")
@click.option("--domain", type=DOMAIN, metavar="D", help="Only this domain.")
@reads_only
def store_list(cli: CliContext, domain: str | None) -> None:
    """Every stored version: label, size, format, sha256, when stored and delivered, and its
    completeness; then the bundles refused by the completeness check (kept aside)."""
    from mirror.export import sitecheck
    from mirror.store.inventory import list_versions

    versions = list_versions(cli.app, domain)
    document, lines = sitecheck.listing(cli.app, versions, domain)
    cli.emit(document, version_lines(versions) + lines)


@store.command("accept")
@click.argument("domain", type=DOMAIN)
@click.argument("version")
@click.option("--reason", required=True, help="Why this bundle is good (kept in its provenance).")
@pass_cli
def store_accept(cli: CliContext, domain: str, version: str, reason: str) -> None:
    """Store a bundle the completeness check refused as a new version, without a new download."""
    from mirror.export import sitecheck
    from mirror.timestamps import utcnow

    accepted = sitecheck.accept(cli.app, domain, version, reason, utcnow())
    label, why = accepted.version, accepted.check.reason
    line = f"{domain} {version} accepted as version {label}: {why}"
    if not accepted.new:
        line = (
            f"{domain} {version} accepted: the same site as version {label}, no new version: {why}"
        )
    cli.emit(
        {
            "domain": domain,
            "refused": version,
            "version": label,
            "new": accepted.new,
            "reason": why,
        },
        line,
    )


@store.command("verify")
@click.option(
    "--repair",
    is_flag=True,
    help="Fix what a good copy exists for (a finished download, a blob of the same site; "
    "extra blobs are adopted or removed), then verify again.",
)
@reads_only
def store_verify(cli: CliContext, repair: bool) -> None:
    """Re-hash every blob against the index; exit 5 with one line per problem."""
    cli.read_only = not repair
    repairs: RepairReport | None = None
    if repair:
        # only --repair needs the archive checks
        from mirror.store.maintenance.repair import repair_store

        repairs = repair_store(cli.app)
    report = repairs.after if repairs is not None else verified(cli)
    document = repairs.as_dict() if repairs is not None else report.as_dict()
    lines = report_lines(report)
    if repairs is not None:
        lines = [
            *(
                f"{'repaired' if r.repaired else 'not repaired'} {r.sha256}: {r.detail}"
                for r in repairs.repairs
            ),
            *(f"adopted extra blob {sha}" for sha in repairs.adopted),
            *(f"removed extra blob {sha} (damaged or unsafe)" for sha in repairs.removed),
            *lines,
        ]
    if report.ok:
        cli.emit(document, lines)
        return
    if not cli.as_json:
        cli.emit(None, lines)
    remedy = (
        "export their domains again (the export repairs them) or restore the named blobs"
        if repair
        else "`mirror store verify --repair` fixes what it can; the rest need their "
        "domains exported again"
    )
    cli.fail_with(
        document,
        IntegrityError(
            f"{len(report.problems)} problem(s) in the store at {cli.app.store.root}; {remedy}"
        ),
    )


def verified(cli: CliContext) -> VerifyReport:
    """`verify_store`, the blobs hashing from the start: the index's start-up (SQLAlchemy's
    import, the query) runs while they hash, instead of before, with no cyclic collection
    walking what those imports made (`heap.no_collections_from_now`: the command ends
    after this)."""
    from mirror.store.blobs import BlobStore

    heap.no_collections_from_now()
    with BlobStore(cli.settings.store.path).hash_in_background() as hashing:
        from mirror.store.inventory import verify_store

        return verify_store(cli.app, hashing)


def version_lines(versions: list[StoredVersion]) -> list[str]:
    if not versions:
        return ["no versions stored yet"]
    header = ("DOMAIN", "VERSION", "SIZE", "FORMAT", "CREATED", "DELIVERED", "SHA256")
    rows = [
        (
            v.ref.domain,
            v.ref.label,
            format_size(v.ref.size),
            v.ref.format,
            f"{v.created_at:%Y-%m-%d %H:%M}",
            f"{v.delivered_at:%Y-%m-%d %H:%M}" if v.delivered_at else "-",
            v.ref.sha256[:16],
        )
        for v in versions
    ]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    return [
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in [header, *rows]
    ]


def report_lines(report: VerifyReport) -> list[str]:
    lines = [f"{p.kind} {p.sha256}: {p.detail}" for p in report.problems]
    if report.ok:
        lines.append(f"all {report.checked} blob(s) match the index")
    if report.stray_temp_files:
        lines.append(
            f"{len(report.stray_temp_files)} temp file(s) belong to no unfinished run "
            "(store gc removes them)"
        )
    return lines
