"""The export's completeness scan and `chart check --site` agree on what "a link resolves"
means (issue 38, class 6; the rule is `mirror.archive.resolve`): each site here is one
bundle, scanned by the real archive inspection and checked by `check_site` (fetched over
HTTP from a loopback server, unpacked, served and crawled), and both must find the same
broken links."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from mirror.airgap.chart.site import SiteReport, check_site, crawl, serving
from mirror.archive import inspect_archive
from mirror.archive.completeness import CompletenessReport, SiteScanner
from mirror.archive.resolve import MAX_REDIRECTS, answer
from mirror.httpserver import QuietHTTPServer
from tests.fixtures.archives import write_tar

# Links as people write them to a static host: without `.html`, to a folder without its
# slash, from a page below a `<base href>`, to a name that is not ASCII from a Latin-1 page.
A_GOOD_SITE = {
    "index.html": b'<a href="guide">g</a><a href="getting-started">s</a><a href="/guide">g</a>'
    b'<a href="legacy.html">l</a><a href="deep/down/page.html">d</a>'
    b'<img src="img/logo.png" srcset="img/logo.png 1x, /img/logo.png 2x">',
    "getting-started.html": b'<a href="guide/intro">i</a><a href="./">home</a>',
    "guide/index.html": b'<a href="intro">i</a><a href="../getting-started">s</a>'
    b'<link rel="stylesheet" href="../css/site.css">',
    "guide/intro.html": b'<a href="../">home</a><a href="/guide/">g</a>',
    "legacy.html": b'<meta charset="iso-8859-1"><a href="caf\xe9">c</a>'
    b'<a href="caf\xe9.html">c</a>',
    "café.html": b"<p>caf\xc3\xa9</p>",
    "deep/down/page.html": b'<base href="/"><a href="guide/intro">i</a><img src="img/logo.png">',
    "css/site.css": b"body{background:url(../img/logo.png)}",
    "img/logo.png": b"png",
}


NBSP_LINK = '<a href="\u00a0legacy.html">n</a>'.encode()


def bundle(tmp_path: Path, files: dict[str, bytes]) -> Path:
    return write_tar(tmp_path / "bundle.tar.gz", files)


def scanned(path: Path) -> CompletenessReport:
    report = inspect_archive(path, observe=SiteScanner)
    assert isinstance(report.observed, SiteScanner)
    return report.observed.report()


def checked(path: Path, tmp_path: Path) -> SiteReport:
    """`check_site` on `path`, fetched from a loopback server as the chart's pod fetches it."""
    (tmp_path / "work").mkdir(exist_ok=True)
    with serving(path.parent) as origin, httpx.Client(timeout=30) as http:
        return check_site(http, f"{origin}/{path.name}", tmp_path / "work")


def test_a_site_the_scan_passes_passes_the_crawl(tmp_path: Path) -> None:
    path = bundle(tmp_path, A_GOOD_SITE)
    scan, site = scanned(path), checked(path, tmp_path)
    assert (scan.broken_link_count, scan.missing_asset_count, scan.broken) == (0, 0, ())
    assert site.error is None, site.error
    # 7 pages; café.html is read at two addresses (`café` and `café.html`), as a browser would
    assert (site.pages, site.failing_pages, site.broken_links) == (8, [], [])


@pytest.mark.parametrize(
    ("extra", "target", "crawled"),
    [
        (
            {"index.html": A_GOOD_SITE["index.html"] + b'<a href="retired">r</a>'},
            "retired",
            "/retired",
        ),
        # a folder without index.html: no host lists it
        ({"index.html": A_GOOD_SITE["index.html"] + b'<a href="img/">i</a>'}, "img/", "/img/"),
        ({"guide/intro.html": b'<a href="../gone/">x</a>'}, "gone/", "/gone/"),
        # a NO-BREAK SPACE is no whitespace to a URL: the link names it (trial37 G1)
        (
            {"index.html": A_GOOD_SITE["index.html"] + NBSP_LINK},
            "\u00a0legacy.html",
            "/%C2%A0legacy.html",
        ),
        (
            {"legacy.html": b'<meta charset="utf-8"><a href="caf\xe9">c</a>'},
            "caf\ufffd",
            "/caf%EF%BF%BD",  # what a browser asks for
        ),
    ],
)
def test_one_broken_link_is_found_by_both(
    tmp_path: Path, extra: dict[str, bytes], target: str, crawled: str
) -> None:
    path = bundle(tmp_path, A_GOOD_SITE | extra)
    scan, site = scanned(path), checked(path, tmp_path)
    assert [b.target for b in scan.broken] == [target] and scan.broken_link_count == 1
    assert [t for t, _, status in site.broken_links] == [crawled], site.broken_links
    assert site.failing_pages == [] and site.error is not None


def test_backslashes_tabs_and_spaces_in_a_link_are_read_as_a_browser_reads_them(
    tmp_path: Path,
) -> None:
    """The URL standard: `\\` is `/` in an http(s) URL, tabs and line breaks inside it are
    removed and spaces around it dropped, so a browser follows each of these links; both
    checks found the backslashed ones broken and refused a good bundle (trial37 D2)."""
    links = b'<a href="guide\\intro">b</a><a href="\\getting-started">s</a>'
    links += b'<a href=" gui\tde/in\ntro ">t</a><base href="\\">'
    path = bundle(tmp_path, A_GOOD_SITE | {"index.html": A_GOOD_SITE["index.html"] + links})
    scan, site = scanned(path), checked(path, tmp_path)
    assert (scan.broken_link_count, scan.missing_asset_count, scan.broken) == (0, 0, ())
    assert site.error is None and site.broken_links == [], site.error


def test_a_site_below_a_base_path_agrees(tmp_path: Path) -> None:
    files = {
        "site/index.html": b'<a href="/docs/guide">g</a><a href="/docs/api">a</a>'
        b'<a href="/docs/lost">l</a><a href="api">a</a>',
        "site/guide/index.html": b'<base href="/docs/"><a href="api">a</a>',
        # the base itself without its slash: a redirect to /docs/, whose links are relative
        "site/api.html": b'<a href="/docs/">home</a><a href="/docs">home</a>',
    }
    path = bundle(tmp_path, files)
    scan, site = scanned(path), checked(path, tmp_path)
    assert scan.base_path == "/docs" and [b.target for b in scan.broken] == ["lost"]
    assert [(t, s) for t, s, _ in site.broken_links] == [("/docs/lost", "/docs/")]


class _Looping(http.server.BaseHTTPRequestHandler):
    """`/` links to `/loop/0`; `/loop/N` redirects to `/loop/N+1`, for ever."""

    asked: list[str]

    def do_GET(self) -> None:
        self.asked.append(self.path)
        if self.path == "/":
            body = b'<a href="/loop/0">loop</a>'
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        self.send_response(302)
        self.send_header("Location", f"/loop/{int(self.path.rsplit('/', 1)[1]) + 1}")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        return None


@pytest.fixture
def looping() -> Iterator[tuple[str, list[str]]]:
    asked: list[str] = []
    handler = type("Handler", (_Looping,), {"asked": asked})
    server = QuietHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", asked
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_redirects_are_followed_a_bounded_number_of_times(
    looping: tuple[str, list[str]],
) -> None:
    origin, asked = looping
    with httpx.Client(timeout=30) as http:
        report = crawl(http, origin + "/")
    assert MAX_REDIRECTS == 5  # the README's number
    assert report.broken_links == [("/loop/0", "/", 302)]
    assert asked == ["/", *(f"/loop/{n}" for n in range(MAX_REDIRECTS + 1))]


@pytest.mark.parametrize(
    ("path", "files", "expected"),
    [
        ("/page", {"page.html"}, "page.html"),
        ("/page", {"page", "page.html"}, "page"),
        ("/dir", {"dir/index.html", "dir.html"}, 301),  # a folder first, as nginx's $uri/
        ("/dir/", {"dir/index.html"}, "dir/index.html"),
        ("/dir/", {"dir/x.png", "dir.html"}, 404),  # no listing, no page.html for dir/
        ("/", {"index.html"}, "index.html"),
        ("/a//b/./c/../d", {"a/b/d.html"}, "a/b/d.html"),
        ("/gone", set(), 404),
    ],
)
def test_the_static_host_rule(path: str, files: set[str], expected: int | str) -> None:
    assert answer(path, files.__contains__) == expected
