"""The completeness policy of export runs (mirror.export.sitecheck) against the simulator, and
the metrics that show it: real runs, a real SQLite index, the real registry."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from mirror.archive.completeness import CompletenessReport
from mirror.config import ExportSettings, settings_from_dict
from mirror.errors import ConfigError, IntegrityError
from mirror.export.metrics import DaemonMetrics, newest_sites
from mirror.export.runner import run_export
from mirror.export.sitecheck import accept, judge
from mirror.sim import Simulator
from mirror.store.app import App
from mirror.store.models import Bundle, SiteCheck, Version
from mirror.vendorapi.client import VendorClient

FAST_API = {"poll_interval": "0.02s", "max_poll_interval": "0.1s"}


def make_app(store_dir: Path, **export: Any) -> App:
    document: dict[str, Any] = {"store": {"path": str(store_dir)}, "api": FAST_API}
    if export:
        document["exports"] = [export]
    return App(settings_from_dict(document))


@pytest.fixture
def client(sim: Simulator) -> Iterator[VendorClient]:
    with httpx.Client(timeout=30) as http:
        yield VendorClient(http, base_url=sim.url, key=sim.key, sleep=lambda _s: None)


def report(pages: int, broken: int = 0) -> CompletenessReport:
    return CompletenessReport(pages, 2, 10, broken, 0)


def test_the_policy_names_both_numbers_and_honours_thresholds() -> None:
    strict = ExportSettings(domain="d.test", page_tolerance=0, max_broken_links=0)
    judged = judge("d.test", report(39), page_count=40, paths_named=False, settings=strict)
    assert judged.refusal == (
        "d.test: the bundle holds 39 pages but the vendor reported pageCount 40 (tolerance 0)"
    )
    broken = judge("d.test", report(40, 3), page_count=40, paths_named=False, settings=strict)
    assert broken.refusal is not None and "3 broken internal links" in broken.refusal
    lenient = ExportSettings(domain="d.test")
    used = judge("d.test", report(38, 3), page_count=40, paths_named=False, settings=lenient)
    assert used.refusal is None and used.tolerance_used
    assert used.summary().endswith("(pageCount 40, 2 short within tolerance)")


def test_a_refused_bundle_is_kept_aside_and_the_metrics_show_the_stored_one(
    sim: Simulator, client: VendorClient, store_dir: Path
) -> None:
    app = make_app(store_dir, domain="docs.strict.test", max_broken_links=0)
    try:
        sim.faults.damaged_domains["docs.strict.test"] = "broken_links"
        with pytest.raises(IntegrityError, match="2 broken internal links and missing assets"):
            run_export(app, client, "docs.strict.test")
        stored = run_export(app, client, "docs.fine.test")
        with app.db.session() as session:
            assert session.scalars(select(Version.domain)).all() == ["docs.fine.test"]
            refused = session.scalars(select(SiteCheck).where(SiteCheck.status == "refused")).one()
            assert session.get(Bundle, refused.bundle_sha256) is not None  # kept aside
            assert app.store.has(refused.bundle_sha256)
            sites = newest_sites(session, ["docs.strict.test", "docs.fine.test"])
        assert sites == {"docs.fine.test": (40, 0)}
        metrics = DaemonMetrics()
        metrics.set_sites(sites)
        text = metrics.render().decode()
        assert 'mirror_version_pages{domain="docs.fine.test"} 40.0' in text
        assert 'mirror_version_broken_links{domain="docs.fine.test"} 0.0' in text
        assert stored.state == "stored"
    finally:
        app.close()


@pytest.mark.parametrize("reason", ["vendor counts\nredirects", "ok \x1b[31mred", "tab\there"])
def test_an_acceptance_reason_is_one_printable_line(
    sim: Simulator, client: VendorClient, store_dir: Path, reason: str
) -> None:
    """The reason is shown on one line by status, store list and chart history, and signed
    into the provenance: a newline or an escape sequence would forge lines there."""
    app = make_app(store_dir)
    try:
        sim.faults.damaged_domains["docs.cut.test"] = "truncated"
        with pytest.raises(IntegrityError):
            run_export(app, client, "docs.cut.test")
        with app.db.session() as session:
            label = session.scalars(select(SiteCheck.label)).one()
        with pytest.raises(ConfigError, match="one line"):
            accept(app, "docs.cut.test", label, reason, datetime.now(UTC))
        with app.db.session() as session:
            assert session.scalars(select(Version.domain)).all() == []  # still refused
        assert accept(app, "docs.cut.test", label, "vendor counts redirects", datetime.now(UTC))
    finally:
        app.close()
