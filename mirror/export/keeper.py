"""The STORE step of an export run: the checked download kept as the domain's next version.

Promises:

- nothing is stored unless the archive passed the inspection of `mirror.archive` (streamed
  as the bytes arrived when this process downloaded them, else read from the file);
- a download the same as the newest version ends the run UNCHANGED, its partial file gone;
- the blob is in place before its Bundle and Version rows, which are written with the
  run's STORED state in one transaction;
- a site the domain's policy refuses is indexed with its site check but no version, the
  run ends FAILED and the refusal is raised as an IntegrityError;
- a download found gone sends the run back to DOWNLOADING.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

from sqlalchemy.orm import Session

from mirror.archive import ArchiveReport
from mirror.archive.completeness import SiteScanner
from mirror.errors import IntegrityError
from mirror.export import sitecheck
from mirror.export.claim import RunSnapshot
from mirror.export.intake import check_download, downloaded_file, forget_unindexed_blob
from mirror.export.outcome import ExportOutcome, outcome_of
from mirror.export.runstate import RunContext
from mirror.store import digests
from mirror.store.app import App
from mirror.store.bundles import add_bundle, add_version, same_site_as_newest, version_ref
from mirror.store.models import Bundle, RunState, Version
from mirror.versions import VersionLabel, VersionRef

log = logging.getLogger("mirror.export.runner")  # one logger for the whole run


class BundleKeeper:
    """Keeps the download of the run `run` drives (a `RunContext`) in the store."""

    def __init__(self, run: RunContext) -> None:
        self.run = run
        self.domain = run.domain

    def keep(self) -> ExportOutcome | None:
        """Keep the checked download as the next version, or find the site unchanged; None
        when the download is gone (the run goes back to DOWNLOADING)."""
        run = self.run
        sha256, size = run.current.sha256, run.current.bytes_done
        assert sha256 is not None
        partial = run.partial_path()
        source = self.find_download(partial, sha256)
        if source is None:
            return None
        inspected = run.inspected if run.downloaded_here and source == partial else None
        report = check_download(
            run.app,
            source,
            sha256,
            size,
            partial=source == partial,
            inspected=inspected,
            observe=SiteScanner.in_worker,
        )
        with run.db.session() as session:
            latest = same_site_as_newest(session, self.domain, report.tree_sha256)
            if latest is not None:
                return self.finish_unchanged(session, latest, report)
        return self.store(source, partial, sha256, size, report)

    def find_download(self, partial: Path, sha256: str) -> Path | None:
        """The file holding the download; None (the run back to DOWNLOADING) when gone."""
        run = self.run
        source = downloaded_file(run.app, partial, sha256, rehash=not run.downloaded_here)
        if source is None:
            run_id = run.current.id
            log.warning(
                "the downloaded bundle of run %d of %s is gone; downloading it again",
                run_id,
                self.domain,
                extra={"domain": self.domain, "run_id": run_id},
            )
            run.drop_partial()
            run.transition(RunState.DOWNLOADING, sha256=None, bytes_done=0)
        return source

    def store(
        self, source: Path, partial: Path, sha256: str, size: int, report: ArchiveReport
    ) -> ExportOutcome:
        """The blob in place, then its rows; the outcome of a stored version."""
        run = self.run
        site = judge_site(run.app, self.domain, run.current, report)
        blob = run.store.adopt(source, sha256, size) if source == partial else source
        digests.keep_report(run.store, sha256, report)  # a delta pack's base side
        if site.refusal is not None:
            self.keep_aside(site, sha256, size, report)
        label = self.add_rows(site, sha256, size, report)
        run.announce(version=label, sha256=sha256, size=size, site=site.summary())
        ref = VersionRef(self.domain, VersionLabel(label), sha256, size, report.format)
        stored = outcome_of(run.current, "stored", ref, blob, report, run.claim.resumed)
        return dataclasses.replace(stored, site=site.summary())

    def add_rows(
        self, site: sitecheck.SiteJudgement, sha256: str, size: int, report: ArchiveReport
    ) -> str:
        """The bundle, its new version and its site check, with the run STORED, in one
        transaction; returns the version's label."""
        run = self.run
        current = run.current
        with run.db.session() as session:
            add_bundle(session, sha256, size, report, created_at=run.now())
            label = add_version(
                session,
                self.domain,
                sha256,
                report,
                run_id=current.id,
                started_at=current.vendor_started_at or run.now(),
                created_at=run.now(),
            )
            self.record_site(session, site, sha256, label, sitecheck.PASSED)
            run.transition(RunState.STORED, session, version_label=label, **run.finished())
        return label

    def record_site(
        self,
        session: Session,
        site: sitecheck.SiteJudgement,
        sha256: str,
        label: str,
        status: str,
    ) -> None:
        current = self.run.current
        sitecheck.record(
            session,
            site,
            domain=self.domain,
            sha256=sha256,
            run_id=current.id,
            job_id=current.vendor_job_id,
            started_at=current.vendor_started_at,
            completed_at=self.run.now(),
            label=label,
            status=status,
        )

    def keep_aside(
        self, site: sitecheck.SiteJudgement, sha256: str, size: int, report: ArchiveReport
    ) -> None:
        """Index the refused bundle and its site check (no version), end the run, raise."""
        assert site.refusal is not None
        run = self.run
        with run.db.session() as session:
            add_bundle(session, sha256, size, report, created_at=run.now())
            label = sitecheck.refused_label(session, self.domain, run.now())
            self.record_site(session, site, sha256, label, sitecheck.REFUSED)
            message = sitecheck.refusal_message(site.refusal, self.domain, label)
            run.save(session, **{**run.finished(), "state": RunState.FAILED, "error": message})
            session.commit()
        run.announce(error=message)
        raise IntegrityError(message)

    def finish_unchanged(
        self, session: Session, latest: Version, report: ArchiveReport
    ) -> ExportOutcome:
        run = self.run
        sha256 = run.current.sha256
        bundle = session.get(Bundle, latest.bundle_sha256)
        assert bundle is not None
        run.transition(RunState.UNCHANGED, session, version_label=latest.label, **run.finished())
        session.commit()
        run.drop_partial()
        if sha256 is not None and sha256 != bundle.sha256:
            forget_unindexed_blob(run.app, sha256)
        run.announce(version=latest.label, sha256=bundle.sha256, size=bundle.size)
        blob = run.store.blob_path(bundle.sha256)
        ref = version_ref(latest, bundle)
        return outcome_of(run.current, "unchanged", ref, blob, report, run.claim.resumed)


def judge_site(
    app: App, domain: str, run: RunSnapshot, report: ArchiveReport
) -> sitecheck.SiteJudgement:
    """The completeness report of a download under the domain's policy."""
    return sitecheck.judge(
        domain,
        sitecheck.scanned(report),
        page_count=run.page_count,
        paths_named=run.requested_paths is not None,
        settings=app.settings.export_for(domain),
    )
