"""The completeness policy of an export run, and what it leaves in the index.

A run's download is scanned as it is inspected (`mirror.archive.completeness.SiteScanner`, in the
same pass); before a version is stored, `judge` compares the site with the vendor's last
reported `pageCount` and the domain's thresholds (`[[exports]] page_tolerance`,
`max_broken_links`). Promises:

- fewer pages than `pageCount` minus the tolerance refuses the version: `keep_aside`
  indexes the blob and a `refused` site check (never a version, so it is never packed),
  and the run raises one IntegrityError (exit 5) naming both numbers and both ways on:
  ask the vendor again (the next run starts a new job) or `mirror store accept`;
- the comparison is skipped when the export named `paths` (the vendor does not say how it
  counts them) or reported no `pageCount`; a shortfall within the tolerance passes, and
  the site check says so (`tolerance_used`);
- broken links and missing assets never refuse unless `max_broken_links` is set;
- `accept` turns a refused check into a version without a new download, with the
  operator's reason stored beside it (it travels in the version's provenance).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from mirror.archive import ArchiveReport
from mirror.archive.completeness import (
    CompletenessReport,
    PageVerdict,
    SiteScanner,
    judge_pages,
    site_line,
)
from mirror.config import ExportSettings
from mirror.errors import ConfigError, IntegrityError, NotFound
from mirror.store.app import App
from mirror.store.bundles import add_version, same_site_as_newest
from mirror.store.inventory import StoredVersion
from mirror.store.models import Bundle, SiteCheck
from mirror.timestamps import rfc3339
from mirror.versions import VersionRef

PASSED = "passed"
REFUSED = "refused"
ACCEPTED = "accepted"


@dataclass(frozen=True)
class SiteJudgement:
    """The completeness report of one download and what the policy makes of it."""

    report: CompletenessReport
    pages: PageVerdict
    max_broken_links: int | None
    refusal: str | None

    @property
    def tolerance_used(self) -> bool:
        return self.pages.tolerance_used

    def summary(self) -> str:
        """The report's summary, with the comparison against pageCount when one was made."""
        line = self.report.summary()
        if self.pages.compared and self.pages.reported is not None:
            line += f" (pageCount {self.pages.reported}"
            line += (
                f", {self.pages.shortfall} short within tolerance)" if self.tolerance_used else ")"
            )
        return line


def judge(
    domain: str,
    report: CompletenessReport,
    *,
    page_count: int | None,
    paths_named: bool,
    settings: ExportSettings,
) -> SiteJudgement:
    """Apply the domain's policy to `report` (pure)."""
    percent, pages = settings.page_tolerance
    verdict = judge_pages(
        report.pages, page_count, paths_named=paths_named, percent=percent, pages=pages
    )
    refusal = None
    if verdict.refused:
        refusal = (
            f"{domain}: the bundle holds {report.pages} pages but the vendor reported "
            f"pageCount {verdict.reported} (tolerance {verdict.tolerance})"
        )
    broken = report.broken_link_count + report.missing_asset_count
    limit = settings.max_broken_links
    if refusal is None and limit is not None and broken > limit:
        refusal = (
            f"{domain}: the bundle has {broken} broken internal links and missing assets, "
            f"over max_broken_links = {limit}"
        )
    return SiteJudgement(report, verdict, limit, refusal)


def scanned(inspected: ArchiveReport) -> CompletenessReport:
    """The completeness report the inspection's scanner collected."""
    observer = inspected.observed
    if not isinstance(observer, SiteScanner):
        raise IntegrityError("the archive was inspected without its completeness scan")
    return observer.report()


def record(
    session: Session,
    judgement: SiteJudgement,
    *,
    domain: str,
    sha256: str,
    run_id: int | None,
    job_id: str | None,
    started_at: datetime | None,
    completed_at: datetime | None,
    label: str | None,
    status: str,
) -> SiteCheck:
    """Write the site check of a stored (`passed`) or refused bundle in the caller's session."""
    report = judgement.report
    check = SiteCheck(
        domain=domain,
        bundle_sha256=sha256,
        run_id=run_id,
        status=status,
        label=label,
        job_id=job_id,
        started_at=started_at,
        completed_at=completed_at,
        page_count=judgement.pages.reported,
        pages=report.pages,
        broken_links=report.broken_link_count,
        missing_assets=report.missing_asset_count,
        tolerance=judgement.pages.tolerance,
        paths_named=not judgement.pages.compared and judgement.pages.reported is not None,
        report=report.as_dict(),
        report_sha256=report.digest,
        refusal=judgement.refusal,
        created_at=completed_at,
    )
    session.add(check)
    session.flush()
    return check


def refusal_message(refusal: str, domain: str, label: str) -> str:
    """The one line a refused run ends with: what, and both ways on."""
    return (
        f"{refusal}; kept aside as {label}: run the export again once the vendor has "
        f"re-exported, or accept it: mirror store accept {domain} {label} --reason TEXT"
    )


def refused_label(session: Session, domain: str, when: datetime) -> str:
    """The label a refused bundle is listed under (`refused-` + run date + counter)."""
    day = f"refused-{when:%Y-%m-%d}"
    taken = set(
        session.scalars(
            select(SiteCheck.label).where(SiteCheck.domain == domain, SiteCheck.status == REFUSED)
        )
    )
    if day not in taken:
        return day
    counter = 2
    while f"{day}.{counter}" in taken:
        counter += 1
    return f"{day}.{counter}"


@dataclass(frozen=True)
class Acceptance:
    """A refused bundle accepted: the version it is now, and whether that version is new
    (a bundle of the same site as the domain's newest version makes none: an export's
    rule, `mirror.store.bundles.same_site_as_newest`)."""

    version: str
    check: SiteCheck
    new: bool


def accept(app: App, domain: str, label: str, reason: str, now: datetime) -> Acceptance:
    """Make refused bundle `label` of `domain` a version (or, the same site as the newest
    version, that version's); the reason is recorded either way."""
    if not reason.strip():
        raise ConfigError("store accept needs a --reason that says why this bundle is good")
    if not reason.isprintable():  # shown on one line, signed into the provenance
        raise ConfigError("store accept's --reason must be one line of printable text")
    with app.db.session() as session:
        check = session.scalars(
            select(SiteCheck).where(
                SiteCheck.domain == domain, SiteCheck.label == label, SiteCheck.status == REFUSED
            )
        ).first()
        if check is None:
            raise NotFound(
                f"no refused bundle {label} of {domain} (mirror store list --domain {domain})"
            )
        bundle = session.get(Bundle, check.bundle_sha256)
        assert bundle is not None
        same = same_site_as_newest(session, domain, bundle.tree_sha256)
        version = same.label if same is not None else _add_version(session, check, bundle, now)
        check.status, check.label = ACCEPTED, version
        check.reason, check.accepted_at = reason.strip(), now
        session.commit()
        session.refresh(check)
        session.expunge(check)
    return Acceptance(version, check, same is None)


def _add_version(session: Session, check: SiteCheck, bundle: Bundle, now: datetime) -> str:
    return add_version(
        session,
        check.domain,
        bundle.sha256,
        _tree_of(bundle),
        run_id=check.run_id,
        started_at=check.started_at or now,
        created_at=now,
    )


def _tree_of(bundle: Bundle) -> ArchiveReport:
    """The archive report the index holds of an inspected bundle (what a version names)."""
    return ArchiveReport(
        format=bundle.format,  # type: ignore[arg-type]
        file_count=bundle.file_count,
        total_bytes=0,
        tree_sha256=bundle.tree_sha256,
        has_index_html=True,
    )


def checks_by_bundle(
    session: Session, domain: str | None = None
) -> dict[tuple[str, str], SiteCheck]:
    """The newest site check of each (domain, version label), stored or refused."""
    query = select(SiteCheck).order_by(SiteCheck.id)
    if domain is not None:
        query = query.where(SiteCheck.domain == domain)
    return {(c.domain, c.label or ""): c for c in session.scalars(query)}


def check_document(check: SiteCheck) -> dict[str, Any]:
    """A site check for `--json` (the contract's `site` object)."""
    return {
        "status": check.status,
        "pages": check.pages,
        "page_count": check.page_count,
        "tolerance": check.tolerance,
        "broken_links": check.broken_links,
        "missing_assets": check.missing_assets,
        "report_sha256": check.report_sha256,
        "refusal": check.refusal,
        "reason": check.reason,
    }


def check_summary(check: SiteCheck) -> str:
    """One line: `40 pages of pageCount 40, 0 broken links, 0 missing assets`."""
    line = site_line(check.pages, check.page_count, check.broken_links, check.missing_assets)
    short = (check.page_count or 0) - check.pages
    if check.status == PASSED and not check.paths_named and 0 < short <= check.tolerance:
        line += f" ({short} short, within the tolerance of {check.tolerance})"
    if check.status == ACCEPTED:
        line += f"; accepted: {check.reason}"
    elif check.status == REFUSED:
        line += "; refused"
    return line


def listing(
    app: App, versions: list[StoredVersion], domain: str | None
) -> tuple[dict[str, Any], list[str]]:
    """`store list`'s document (each version's site check, then the refused bundles kept
    aside) and the lines it adds to the versions' own."""
    with app.db.session() as session:
        checks = checks_by_bundle(session, domain)
    refused = [c for c in checks.values() if c.status == REFUSED]

    def site_of(version: StoredVersion) -> dict[str, Any] | None:
        check = checks.get((version.ref.domain, version.ref.label))
        return check_document(check) if check is not None else None

    document = {
        "versions": [{**v.as_dict(), "site": site_of(v)} for v in versions],
        "refused": [
            {
                "domain": c.domain,
                "version": c.label,
                "sha256": c.bundle_sha256,
                "created_at": rfc3339(c.created_at),
                "site": check_document(c),
            }
            for c in refused
        ],
    }
    lines = [
        f"{v.ref.domain} {v.ref.label}: {check_summary(checks[(v.ref.domain, v.ref.label)])}"
        for v in versions
        if (v.ref.domain, v.ref.label) in checks
    ]
    lines += [
        f"refused {c.domain} {c.label}: {c.refusal} (kept aside, never packed; "
        f"mirror store accept {c.domain} {c.label} --reason TEXT)"
        for c in refused
    ]
    return document, lines


def pack_lines(app: App, packed: list[VersionRef]) -> list[str]:
    """`transfer pack --dry-run`'s lines: each packed version's completeness, and the refused
    bundles that stay behind."""
    with app.db.session() as session:
        checks = checks_by_bundle(session)
    lines = [
        f"  {ref.domain} {ref.label}: {check_summary(checks[key])}"
        for ref in packed
        if (key := (ref.domain, ref.label)) in checks
    ]
    lines += [
        f"  {c.domain} {c.label}: refused, kept aside and not packed (mirror store accept)"
        for c in checks.values()
        if c.status == REFUSED
    ]
    return lines
