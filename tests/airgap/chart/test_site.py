"""`chart check --site`'s crawl: a real static HTTP server on loopback over a real directory."""

from __future__ import annotations

from pathlib import Path

import httpx

from mirror.airgap.chart.site import crawl, serving
from mirror.errors import IntegrityError


def site(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_every_page_reached_is_served_and_every_reference_resolves(tmp_path: Path) -> None:
    root = site(
        tmp_path,
        {
            "index.html": '<link rel="stylesheet" href="/s.css"><a href="guide/">g</a>',
            "guide/index.html": '<a href="../">home</a><img src="../img/a.png">',
            "s.css": "body{background:url(img/a.png)}",
            "img/a.png": "png",
        },
    )
    with serving(root) as origin, httpx.Client(timeout=10) as http:
        report = crawl(http, origin + "/")
    assert (report.pages, report.references) == (2, 5)
    assert report.error is None and report.broken_links == []


def test_a_broken_link_and_a_site_below_a_base_path(tmp_path: Path) -> None:
    root = site(
        tmp_path,
        {"index.html": '<a href="/docs/gone/">x</a><a href="/docs/ok.html">ok</a>', "ok.html": ""},
    )
    with serving(root, "/docs") as origin, httpx.Client(timeout=10) as http:
        report = crawl(http, origin + "/docs/")
    assert report.pages == 2
    assert report.broken_links == [("/docs/gone/", "/docs/", 404)]
    assert isinstance(report.error, IntegrityError)
    assert "0 failing pages and 1 broken links: /docs/gone/ from /docs/ (HTTP 404)" in str(
        report.error
    )
