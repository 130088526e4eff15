"""`store list` and `store verify`: the connected side's store."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from mirror.cli.common import DOMAIN, CliContext, pass_cli, reads_only
from mirror.errors import IntegrityError
from mirror.store.inventory import StoredVersion, VerifyReport, list_versions, verify_store
from mirror.timestamps import rfc3339, rfc3339_or_none
from mirror.units import format_size

if TYPE_CHECKING:
    from mirror.export.repair import RepairReport


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

    versions = list_versions(cli.app, domain)
    with cli.app.db.session() as session:
        checks = sitecheck.checks_by_bundle(session, domain)
        refused = [c for c in checks.values() if c.status == sitecheck.REFUSED]
        document = {
            "versions": [
                {**version_document(v), "site": site_of(checks, v.domain, v.label)}
                for v in versions
            ],
            "refused": [refused_document(c) for c in refused],
        }
        lines = version_lines(versions) + [
            f"{v.domain} {v.label}: {sitecheck.check_summary(checks[(v.domain, v.label)])}"
            for v in versions
            if (v.domain, v.label) in checks
        ]
        lines += [
            f"refused {c.domain} {c.label}: {c.refusal} (kept aside, never packed; "
            f"mirror store accept {c.domain} {c.label} --reason TEXT)"
            for c in refused
        ]
    cli.emit(document, lines)


@store.command("accept")
@click.argument("domain", type=DOMAIN)
@click.argument("version")
@click.option("--reason", required=True, help="Why this bundle is good (kept in its provenance).")
@pass_cli
def store_accept(cli: CliContext, domain: str, version: str, reason: str) -> None:
    """Store a bundle the completeness check refused as a new version, without a new download."""
    from mirror.export import sitecheck
    from mirror.timestamps import utcnow

    label, check = sitecheck.accept(cli.app, domain, version, reason, utcnow())
    cli.emit(
        {"domain": domain, "refused": version, "version": label, "reason": check.reason},
        f"{domain} {version} accepted as version {label}: {check.reason}",
    )


def site_of(checks: dict[tuple[str, str], Any], domain: str, label: str) -> Any:
    from mirror.export import sitecheck

    check = checks.get((domain, label))
    return sitecheck.check_document(check) if check is not None else None


def refused_document(check: Any) -> dict[str, Any]:
    from mirror.export import sitecheck

    return {
        "domain": check.domain,
        "version": check.label,
        "sha256": check.bundle_sha256,
        "created_at": rfc3339(check.created_at),
        "site": sitecheck.check_document(check),
    }


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
        from mirror.export.repair import repair_store  # only --repair needs the archive checks

        repairs = repair_store(cli.app)
    report = repairs.after if repairs is not None else verify_store(cli.app)
    document = report_document(report)
    lines = report_lines(report)
    if repairs is not None:
        document["repairs"] = [
            {"sha256": r.sha256, "repaired": r.repaired, "detail": r.detail}
            for r in repairs.repairs
        ]
        document["adopted"], document["removed"] = repairs.adopted, repairs.removed
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


def version_document(version: StoredVersion) -> dict[str, Any]:
    return {
        "domain": version.domain,
        "version": version.label,
        "sha256": version.sha256,
        "size": version.size,
        "format": version.format,
        "tree_sha256": version.tree_sha256,
        "file_count": version.file_count,
        "created_at": rfc3339(version.created_at),
        "delivered_at": rfc3339_or_none(version.delivered_at),
        "path": str(version.path),
    }


def version_lines(versions: list[StoredVersion]) -> list[str]:
    if not versions:
        return ["the store holds no versions yet"]
    header = ("DOMAIN", "VERSION", "SIZE", "FORMAT", "CREATED", "DELIVERED", "SHA256")
    rows = [
        (
            v.domain,
            v.label,
            format_size(v.size),
            v.format,
            f"{v.created_at:%Y-%m-%d %H:%M}",
            f"{v.delivered_at:%Y-%m-%d %H:%M}" if v.delivered_at else "-",
            v.sha256[:16],
        )
        for v in versions
    ]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    return [
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in [header, *rows]
    ]


def report_document(report: VerifyReport) -> dict[str, Any]:
    return {
        "ok": report.ok,
        "checked": report.checked,
        "problems": [
            {"kind": p.kind, "sha256": p.sha256, "detail": p.detail} for p in report.problems
        ],
        "stray_temp_files": [str(p) for p in report.stray_temp_files],
    }


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
