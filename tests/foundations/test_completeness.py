"""The completeness scanner, fed by the real archive inspection over real simulator bundles."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from mirror import completeness
from mirror.archive import ArchiveFeed, inspect_archive
from mirror.completeness import CompletenessReport, SiteScanner, judge_pages
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
