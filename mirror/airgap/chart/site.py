"""`chart check --site`: the proof that what pods will serve works, page by page, over HTTP.

The bundle is fetched through the values file's link exactly as the chart's pod does
(plain GET, no credentials), streamed to a temporary file, checked and unpacked by
`mirror.archive`, then served by a real HTTP server on loopback (the standard library's,
answering as the static hosts the chart serves from answer: `mirror.archive.resolve`, the
rule the export's completeness scan checks by), and crawled from its home page: every page
reached is fetched over HTTP (redirects followed, at most `MAX_REDIRECTS`), every internal
reference in it (read and resolved as the scan reads and resolves it: its encoding, its
`<base href>`) is requested once. So a bundle the scan found without broken links is found
so here too. Promises: nothing is left behind (the temporary
directory and the server end with the check); memory does not grow with the bundle (it is
streamed to disk); `SiteReport.error` is one IntegrityError (exit 5) when a page fails or
a link breaks, naming the counts and the first few.
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import os
import tempfile
import threading
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from http import HTTPStatus
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote, urlsplit

import httpx

from mirror.archive import extract_archive, inspect_archive
from mirror.archive.completeness import PAGE_SUFFIXES, SiteScanner, css_references, page_links
from mirror.archive.resolve import MAX_REDIRECTS, answer, base_of, target, url_of
from mirror.errors import IntegrityError, MirrorError, OperationFailed
from mirror.httpserver import QuietHTTPServer
from mirror.integrity import CHUNK_SIZE

SHOWN = 5
MAX_PAGES = 200_000


@dataclass
class SiteReport:
    """What the crawl found: pages served, references checked, and what failed."""

    pages: int = 0
    references: int = 0
    failing_pages: list[tuple[str, int]] = field(default_factory=list)
    broken_links: list[tuple[str, str, int]] = field(default_factory=list)
    error: MirrorError | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "pages": self.pages,
            "references": self.references,
            "failing_pages": [{"path": p, "status": s} for p, s in self.failing_pages],
            "broken_links": [
                {"target": t, "source": src, "status": s} for t, src, s in self.broken_links
            ],
        }

    def line(self) -> str:
        return (
            f"site: {self.pages} pages served and crawled over HTTP, {self.references} "
            f"internal references checked, {len(self.failing_pages)} failing pages, "
            f"{len(self.broken_links)} broken links"
        )


def check_site(http: httpx.Client, url: str, work_dir: Path | None = None) -> SiteReport:
    """Fetch `url` as the pod does, serve the unpacked site on loopback, crawl it."""
    with tempfile.TemporaryDirectory(prefix="mirror-site-", dir=work_dir) as temp:
        bundle = Path(temp) / "bundle"
        _download(http, url, bundle)
        report = inspect_archive(bundle, observe=SiteScanner)
        assert isinstance(report.observed, SiteScanner)
        base = report.observed.report().base_path
        root = Path(temp) / "site"
        extract_archive(bundle, root)
        bundle.unlink()
        with serving(_site_root(root), base) as origin:
            return crawl(http, origin + base + "/")


def _download(http: httpx.Client, url: str, dest: Path) -> None:
    with http.stream("GET", url) as response, open(dest, "wb") as out:
        if response.status_code != 200:
            raise OperationFailed(f"the bundleUrl answered HTTP {response.status_code}")
        for chunk in response.iter_bytes(CHUNK_SIZE):
            out.write(chunk)


def _site_root(root: Path) -> Path:
    """The directory holding index.html: the root, or its single top directory."""
    if (root / "index.html").is_file():
        return root
    tops = list(root.iterdir())
    if len(tops) == 1 and (tops[0] / "index.html").is_file():
        return tops[0]
    return root


class _Handler(http.server.SimpleHTTPRequestHandler):
    """A static host answering as `mirror.archive.resolve.answer` says (the rule the
    export's scan checks by), below `base`; no directory listing."""

    base = ""

    def send_head(self) -> Any:
        parts = urlsplit(self.path)
        path = unquote(parts.path)
        if self.base and path != self.base and not path.startswith(self.base + "/"):
            self.send_error(HTTPStatus.NOT_FOUND)
            return None
        below = path[len(self.base) :]  # "" for the base itself: a folder without its "/"
        found = answer(below, self._is_file) if below else 301
        if found == 301:
            self.send_response(HTTPStatus.MOVED_PERMANENTLY)
            self.send_header("Location", parts._replace(path=parts.path + "/").geturl())
            self.send_header("Content-Length", "0")
            self.end_headers()
            return None
        if not isinstance(found, str):
            self.send_error(HTTPStatus.NOT_FOUND)
            return None
        self.path = quote("/" + found)  # a file: the standard library sends it
        return super().send_head()

    def translate_path(self, path: str) -> str:
        return os.path.join(self.directory, unquote(urlsplit(path).path).lstrip("/"))

    def _is_file(self, name: str) -> bool:
        return os.path.isfile(os.path.join(self.directory, name))

    def log_message(self, format: str, *args: Any) -> None:
        return None


@contextlib.contextmanager
def serving(root: Path, base: str = "") -> Iterator[str]:
    """A static file server for `root` on 127.0.0.1 (below `base`), for the `with` block."""
    handler = type("SiteHandler", (_Handler,), {"base": base})
    server = QuietHTTPServer(("127.0.0.1", 0), functools.partial(handler, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, name="mirror-site", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def crawl(http: httpx.Client, start: str) -> SiteReport:
    """Every page reachable from `start` on its origin, fetched (redirects followed, at
    most `MAX_REDIRECTS`); every internal reference requested once. Failing pages and
    broken links are in the report and its `error`."""
    origin = "{0.scheme}://{0.netloc}".format(urlsplit(start))
    report = SiteReport()
    seen: dict[str, int] = {}
    parsed: set[str] = set()  # pages read, by the URL that answered (after redirects)
    queue: deque[tuple[str, str]] = deque([(start, "")])
    while queue and report.pages < MAX_PAGES:
        url, source = queue.popleft()
        if url not in seen:
            response, final = _fetch(http, url, origin)
            seen[url] = response.status_code
            if response.status_code == 200 and final not in parsed:
                parsed.add(final)
                queue.extend((target, _path(final)) for target in _read(report, final, response))
        status = seen[url]
        if status != 200:
            if source:
                report.broken_links.append((_path(url), source, status))
            else:
                report.failing_pages.append((_path(url), status))
    report.error = _error(report)
    return report


def _fetch(http: httpx.Client, url: str, origin: str) -> tuple[httpx.Response, str]:
    """The answer to `url` and the URL that gave it: redirects on `origin` followed, at
    most MAX_REDIRECTS of them (a redirect still there after them is the answer)."""
    response = http.get(url, follow_redirects=False)
    for _ in range(MAX_REDIRECTS):
        location = response.headers.get("location")
        if not response.is_redirect or not location:
            break
        found = target(url, location)
        if found is None or found[0] != origin:
            break
        url = url_of(origin, found[1])
        response = http.get(url, follow_redirects=False)
    return response, url


def _read(report: SiteReport, url: str, response: httpx.Response) -> list[str]:
    """The internal references of a page or stylesheet served at `url` (the page
    counted), resolved as `mirror.archive.resolve` says; [] for anything else."""
    kind = response.headers.get("content-type", "")
    if "html" in kind or _path(url).lower().endswith(PAGE_SUFFIXES):
        report.pages += 1
        href, refs = page_links(response.content, kind)
    elif "css" in kind:
        href, refs = None, list(css_references(response.content))
    else:
        return []
    base = base_of(url, href)
    origin = "{0.scheme}://{0.netloc}".format(urlsplit(url))
    found = [t for ref in refs if (t := target(base, ref)) and t[0] == origin]
    report.references += len(found)
    return [url_of(origin, path) for _, path in found]


def _path(url: str) -> str:
    return urlsplit(url).path or "/"


def _error(report: SiteReport) -> MirrorError | None:
    if not report.failing_pages and not report.broken_links:
        return None
    shown = [f"{p} (HTTP {s})" for p, s in report.failing_pages[:SHOWN]]
    shown += [f"{t} from {src} (HTTP {s})" for t, src, s in report.broken_links[:SHOWN]]
    return IntegrityError(
        f"the served site has {len(report.failing_pages)} failing pages and "
        f"{len(report.broken_links)} broken links: {', '.join(shown)}"
    )
