"""The completeness scanner, fed by the real archive inspection over real simulator bundles."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from mirror.archive import ArchiveFeed, ArchiveLimits, completeness, inspect_archive
from mirror.archive.completeness import CompletenessReport, SiteScanner, judge_pages
from mirror.sim.site import MISSING_IMAGE, SiteSpec, build_bundle, page_count


def scan(path: Path) -> CompletenessReport:
    report = inspect_archive(path, observe=SiteScanner)
    assert isinstance(report.observed, SiteScanner)
    return report.observed.report()


def tar_of(tmp_path: Path, files: dict[str, bytes], name: str = "site.tar") -> Path:
    path = tmp_path / name
    with tarfile.open(path, "w") as tar:
        for member, data in files.items():
            info = tarfile.TarInfo(member)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_a_whole_site_has_every_page_and_no_broken_reference(tmp_path: Path) -> None:
    spec = SiteSpec(domain="docs.example.com", pages=30)
    info = build_bundle(spec, tmp_path / "b.tar.gz")
    report = scan(info.path)
    assert report.pages == info.page_count == 30
    assert report.assets == 2
    assert report.broken == ()
    assert report.references > 30 * 3
    assert report.summary() == "30 pages, 2 assets, 0 broken links, 0 missing assets"


def test_a_truncated_export_holds_a_third_of_the_reported_pages(tmp_path: Path) -> None:
    spec = SiteSpec(domain="docs.example.com", pages=30, damage="truncated")
    info = build_bundle(spec, tmp_path / "b.tar.gz")
    report = scan(info.path)
    assert (report.pages, info.page_count) == (10, 30)
    # the index page still links to the 20 pages that are not there
    assert report.broken_link_count == 20
    first = report.broken[0]
    assert first.kind == "page" and first.sources == ("index.html",)


def test_broken_links_and_missing_assets_name_their_first_sources(tmp_path: Path) -> None:
    spec = SiteSpec(domain="docs.example.com", pages=12, damage="broken_links")
    report = scan(build_bundle(spec, tmp_path / "b.tar.gz").path)
    assert report.pages == 12
    assert (report.broken_link_count, report.missing_asset_count) == (1, 1)
    page, image = report.broken
    assert page.target == "guides/retired-page/" and page.count == 12
    assert image.target == MISSING_IMAGE and image.kind == "asset"
    assert len(image.sources) == completeness.SOURCES_KEPT
    assert "1 broken link, 1 missing asset" in report.summary()


def test_a_realistic_site_below_a_base_path_resolves(tmp_path: Path) -> None:
    spec = SiteSpec(domain="docs.example.com", site_size=3 * 1024 * 1024, base_path="/docs")
    report = scan(build_bundle(spec, tmp_path / "b.tar.gz").path)
    assert report.base_path == "/docs"
    assert report.pages == page_count(spec)
    assert report.broken == ()


def test_relative_srcset_css_and_fragments(tmp_path: Path) -> None:
    page = (
        b'<html><head><style>body{background:url("img/bg.png")}</style></head><body>'
        b'<a href="#top">top</a><a href="sub/">sub</a><a href="../escape.html">x</a>'
        b'<a href="https://example.com/x">ext</a><a href="mailto:a@b">m</a>'
        b'<img srcset="img/a.png 1x, img/b.png 2x" src="data:image/png;base64,AA">'
        b'<div style="background-image: url(img/c.png)"></div>'
        b'<a href="other?q=1#frag">o</a></body></html>'
    )
    css = b'@import "more.css"; .x{background:url(../img/bg.png)}'
    path = tar_of(
        tmp_path,
        {
            "index.html": page,
            "sub/index.html": b"<p>sub</p>",
            "other.html": b"<p>o</p>",
            "img/bg.png": b"x",
            "img/a.png": b"x",
            "css/site.css": css,
        },
    )
    report = scan(path)
    broken = {b.target: b.kind for b in report.broken}
    assert broken == {
        "escape.html": "page",
        "img/b.png": "asset",
        "img/c.png": "asset",
        "css/more.css": "asset",
    }


def test_a_site_wrapped_in_one_directory_is_resolved_from_there(tmp_path: Path) -> None:
    path = tar_of(
        tmp_path,
        {"site/index.html": b'<a href="/a/">a</a><a href="/b/">b</a>', "site/a/index.html": b""},
    )
    report = scan(path)
    assert report.pages == 2
    assert [b.target for b in report.broken] == ["b/"]


def test_a_huge_page_is_parsed_only_up_to_the_cap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(completeness, "MAX_PARSE_BYTES", 64)
    page = b'<a href="/kept/">k</a>' + b" " * 100 + b'<a href="/lost/">l</a>'
    report = scan(tar_of(tmp_path, {"index.html": page}))
    assert report.pages_cut == 1
    assert [b.target for b in report.broken] == ["kept/"]


def test_the_streaming_feed_gives_the_same_report_as_the_file(tmp_path: Path) -> None:
    spec = SiteSpec(domain="docs.example.com", pages=20, damage="broken_links")
    info = build_bundle(spec, tmp_path / "b.tar.gz")
    data = info.path.read_bytes()
    feed = ArchiveFeed(info.path, len(data), observe=SiteScanner)
    try:
        for at in range(0, len(data), 4096):
            feed.feed(data[at : at + 4096])
        streamed = feed.result(len(data))
    finally:
        feed.close()
    assert isinstance(streamed.observed, SiteScanner)
    assert streamed.observed.report() == scan(info.path)


def test_the_report_round_trips_and_its_digest_is_of_the_canonical_json(tmp_path: Path) -> None:
    spec = SiteSpec(domain="docs.example.com", pages=5, damage="broken_links")
    report = scan(build_bundle(spec, tmp_path / "b.tar.gz").path)
    again = CompletenessReport.from_dict(report.as_dict())
    assert again == report and again.digest == report.digest
    assert len(report.digest) == 64


def scan_with(path: Path, scanner: SiteScanner) -> CompletenessReport:
    inspect_archive(path, ArchiveLimits(allow_case_twins=True), observe=lambda: scanner)
    return scanner.report()


def a_site_of_many_references(pages: int) -> dict[str, bytes]:
    """Wrapped in `site/`, published below /docs, with broken links and assets, absolute
    and relative references naming one path, and case twins."""
    files = {
        "site/index.html": b'<a href="/docs/guide/">g</a><a href="/docs/gone.html">x</a>'
        b'<a href="gone.html">x</a><img src="/docs/img/logo.png"><a href="guide/Page">p</a>'
        b'<img src="/docs/img/missing.png">',
        "site/guide/index.html": b'<a href="../gone.html">x</a><a href="Page.html">P</a>'
        b'<a href="page.html">p</a><a href="lost/">l</a><a href="/docs/gone.html">x</a>',
        "site/guide/Page.html": b'<a href="/docs/">home</a>',
        "site/guide/page.html": b'<a href="/docs">home</a>',
        "site/img/logo.png": b"png",
        "site/css/site.css": b".x{background:url(../img/missing.png)}",
    }
    for n in range(pages):
        files[f"site/p/{n:03d}.html"] = (
            f'<a href="/docs/gone.html">x</a><a href="../missing-{n % 7}.html">m</a>'
            f'<a href="{n + 1:03d}.html">next</a><a href="../index.html">i</a>'
            f'<div style="background: url(/docs/img/missing.png)"></div>'
        ).encode()
    return files


@pytest.mark.parametrize(("kept", "max_targets"), [(200, 500_000), (4, 500_000), (200, 12)])
def test_a_site_past_the_spill_threshold_gives_the_same_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kept: int, max_targets: int
) -> None:
    monkeypatch.setattr(completeness, "BROKEN_KEPT", kept)
    monkeypatch.setattr(completeness, "MAX_TARGETS", max_targets)
    path = tar_of(tmp_path, a_site_of_many_references(40))
    scanners = [SiteScanner(), SiteScanner(spill_at=3)]
    in_memory, on_disk = (scan_with(path, scanner) for scanner in scanners)
    assert scanners[0].files._db is None and scanners[0].targets._disk is None
    assert scanners[1].files._db is not None and scanners[1].targets._disk is not None
    assert on_disk == in_memory and on_disk.digest == in_memory.digest
    assert scanners[1].report() == in_memory  # asked again: the same
    assert (in_memory.base_path, in_memory.pages, in_memory.assets) == ("/docs", 44, 2)
    assert in_memory.targets_dropped is (max_targets == 12)
    if max_targets == 12:
        return
    assert (in_memory.broken_link_count, in_memory.missing_asset_count) == (10, 1)
    first = in_memory.broken[0]
    assert (first.target, first.count) == ("gone.html", 44)
    assert first.sources == ("index.html", "guide/index.html", "p/000.html")
    assert len(in_memory.broken) == min(kept, 11)


@pytest.mark.parametrize(
    ("found", "reported", "paths", "refused", "used"),
    [
        (100, 100, False, False, False),
        (98, 100, False, False, True),  # 2 pages: the floor
        (97, 100, False, True, False),
        (4900, 5000, False, False, True),  # 2% of 5000 = 100
        (4899, 5000, False, True, False),
        (12, 4000, False, True, False),
        (12, 4000, True, False, False),  # an export with paths is not compared
        (12, None, False, False, False),
    ],
)
def test_pages_against_page_count(
    found: int, reported: int | None, paths: bool, refused: bool, used: bool
) -> None:
    verdict = judge_pages(found, reported, paths_named=paths, percent=2.0, pages=2)
    assert (verdict.refused, verdict.tolerance_used) == (refused, used)
