"""`store list` and `store verify`: the connected side's store."""

from __future__ import annotations

from typing import Any

import click

from mirror.cli.common import CliContext, reads_only
from mirror.errors import IntegrityError
from mirror.inventory import StoredVersion, VerifyReport, list_versions, verify_store
from mirror.timestamps import rfc3339, rfc3339_or_none
from mirror.units import format_size


@click.group("store")
def store() -> None:
    """The local store of downloaded bundles and their versions."""


@store.command("list")
@click.option("--domain", metavar="D", help="Only this domain.")
@reads_only
def store_list(cli: CliContext, domain: str | None) -> None:
    """Every stored version: label, size, format, sha256, when stored and delivered."""
    versions = list_versions(cli.app, domain)
    cli.emit({"versions": [version_document(v) for v in versions]}, version_lines(versions))


@store.command("verify")
@reads_only
def store_verify(cli: CliContext) -> None:
    """Re-hash every blob against the index; exit 5 with one line per problem."""
    report = verify_store(cli.app)
    if report.ok:
        cli.emit(report_document(report), report_lines(report))
        return
    if not cli.as_json:
        cli.emit(None, report_lines(report))
    cli.fail_with(
        report_document(report),
        IntegrityError(
            f"{len(report.problems)} problem(s) in the store at {cli.app.store.root}; "
            "restore the named blobs or re-export their domains"
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
