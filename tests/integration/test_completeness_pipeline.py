"""Completeness as operators meet it: a truncated export refused with both numbers, kept aside,
listed, accepted on purpose; broken links recorded; an export with `paths` not compared."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from sqlalchemy import select

from mirror.archive import inspect_archive
from mirror.archive.completeness import WORKER_AFTER, SiteScanner
from mirror.sim import Simulator
from mirror.store.models import ExportRun, SiteCheck, Version
from tests.integration.test_export_pipeline import cli, config_for, index, table

TRUNCATED = "docs.truncated.test"


def test_a_truncated_export_is_refused_kept_aside_and_accepted_on_purpose(
    sim: Simulator, tmp_path: Path
) -> None:
    config = config_for(tmp_path, sim)
    sim.faults.damaged_domains[TRUNCATED] = "truncated"
    refused = cli(config, sim.key, "export", "run", "--adhoc", TRUNCATED)
    assert refused.returncode == 5, refused.stderr
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("mirror: error: ")
    assert "holds 13 pages but the vendor reported pageCount 40 (tolerance 2)" in lines[0]
    app = index(config)
    try:
        assert table(app, Version) == []  # nothing stored as current
        (run,) = table(app, ExportRun)
        assert not run.active and run.page_count == 40
    finally:
        app.close()

    listed = cli(config, sim.key, "--json", "store", "list")
    assert listed.returncode == 0, listed.stderr
    document = json.loads(listed.stdout)
    assert document["versions"] == []
    (aside,) = document["refused"]
    assert aside["site"]["pages"] == 13 and aside["site"]["page_count"] == 40
    human = cli(config, sim.key, "store", "list").stdout
    assert f"mirror store accept {TRUNCATED} {aside['version']} --reason" in human

    # The remedy the error line prints, run as printed.
    remedy = lines[0].split("accept it: ")[1].replace("TEXT", "vendor counts redirects")
    argv = remedy.split(" ", 1)[1].split(" --reason ")
    accepted = cli(config, sim.key, *argv[0].split(), "--reason", argv[1])
    assert accepted.returncode == 0, accepted.stderr
    requests = sim.stats.snapshot()["requests"]
    again = json.loads(cli(config, sim.key, "--json", "store", "list").stdout)
    assert again["refused"] == []
    (version,) = again["versions"]
    assert version["sha256"] == aside["sha256"]
    assert version["site"]["status"] == "accepted"
    assert version["site"]["reason"] == "vendor counts redirects"
    assert sim.stats.snapshot()["requests"] == requests  # no new download

    twice = cli(config, sim.key, *argv[0].split(), "--reason", "again")
    assert twice.returncode == 3 and "no refused bundle" in twice.stderr


def test_broken_links_are_recorded_not_refused_unless_a_threshold_is_set(
    sim: Simulator, tmp_path: Path
) -> None:
    config = config_for(tmp_path, sim)
    sim.faults.damaged_domains["docs.broken.test"] = "broken_links"
    stored = cli(config, sim.key, "--json", "export", "run", "--adhoc", "docs.broken.test")
    assert stored.returncode == 0, stored.stderr
    assert json.loads(stored.stdout)["site"] == (
        "40 pages, 2 assets, 1 broken link, 1 missing asset (pageCount 40)"
    )
    app = index(config)
    try:
        with app.db.session() as session:
            (check,) = session.scalars(select(SiteCheck))
            assert (check.status, check.broken_links, check.missing_assets) == ("passed", 1, 1)
            broken = {b["target"]: b["sources"][0] for b in check.report["broken"]}
            assert broken["guides/retired-page/"] == "index.html"
    finally:
        app.close()


def test_an_export_with_paths_is_not_compared_with_page_count(
    sim: Simulator, tmp_path: Path
) -> None:
    config = config_for(tmp_path, sim)
    domain = "docs.paths.test"
    sim.faults.damaged_domains[domain] = "truncated"
    stored = cli(
        config,
        sim.key,
        "--json",
        "export",
        "run",
        "--adhoc",
        domain,
        "--path",
        "guides/page-001",
        "--path",
        "guides/page-002",
        "--path",
        "guides/page-003",
    )
    assert stored.returncode == 0, stored.stderr
    app = index(config)
    try:
        with app.db.session() as session:
            (check,) = session.scalars(select(SiteCheck))
            assert check.paths_named and check.status == "passed"
            assert check.pages == 1 and check.page_count == 4
    finally:
        app.close()


def test_a_site_of_hundreds_of_pages_stores_the_check_a_scan_in_one_process_makes(
    sim_factory: Callable[..., Simulator], tmp_path: Path
) -> None:
    """Past WORKER_AFTER pages, on a machine of WORKER_MIN_CPUS or more, the installed tool
    parses in its child process (`mirror.archive.scanworker`; the foundations tests force
    it anywhere): the check it stores is the one a scan in one process makes of the same
    bundle, digest and all."""
    sim = sim_factory(site_size=16 << 20)
    domain = "docs.many-pages.test"
    sim.faults.damaged_domains[domain] = "broken_links"
    config = config_for(tmp_path, sim)
    stored = cli(config, sim.key, "--json", "export", "run", "--adhoc", domain)
    assert stored.returncode == 0, stored.stderr
    (job_id,) = sim.stats.snapshot()["starts"][domain]
    inspected = inspect_archive(Path(sim.bundle_info(job_id)["path"]), observe=SiteScanner)
    assert isinstance(inspected.observed, SiteScanner)
    expected = inspected.observed.report()
    assert expected.pages > WORKER_AFTER + 100
    assert expected.broken_link_count == expected.missing_asset_count == 1
    app = index(config)
    try:
        with app.db.session() as session:
            (check,) = session.scalars(select(SiteCheck))
            assert check.report == expected.as_dict()
            assert check.report_sha256 == expected.digest
    finally:
        app.close()
