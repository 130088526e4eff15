"""Completeness: is the bundle the whole site the vendor exported? Collected in the same pass.

A `SiteScanner` is an archive member sink (`archive.FileSink`): the inspection that checks
an archive as it streams in hands it every checked member, so counting pages and following
links costs no second read of the bundle. At the end, `SiteScanner.report()` says what the
site is: pages (`.html`/`.htm`), assets, and every internal reference (`href`, `src`,
`srcset`, `poster`, CSS `url()` and `@import`, in pages, inline styles and `.css` files)
that resolves to nothing in the bundle, with its first few sources. Fragments are ignored.

Promises:

- pure: bytes in, a `CompletenessReport` out; no I/O, no clock;
- memory is bounded per member: a page or stylesheet is parsed from at most
  `MAX_PARSE_BYTES` (the rest is counted, not kept: `pages_cut` says how many were cut);
  other members are only named. Across the site, at most `MAX_TARGETS` distinct
  references and `SOURCES_KEPT` sources each are kept (`targets_dropped` says so);
- a reference resolves as a static server would serve it: `dir/` and `dir` find
  `dir/index.html`, `page` finds `page.html`; absolute paths start at the site root, which
  is the bundle root or its single top directory holding `index.html`; a site published
  below a base path (every absolute reference, two at least, starting with the same
  `/base/` that is not a top-level name of the bundle) is resolved below that base;
- external references (a scheme or a host), `data:`, `mailto:`, `javascript:` and pure
  fragments are not checked;
- `CompletenessReport.digest` is the sha256 of its canonical JSON (`as_dict()`, sorted
  keys, no spaces): what provenance names.

The HTML parser is selectolax (lexbor): measured on 10,000 pages it is the fastest of
selectolax, lxml and html.parser by a wide margin (bench numbers in docs/architecture.md).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import IO, Any, Literal, cast
from urllib.parse import unquote, urlsplit

from mirror.integrity import hash_bytes

MAX_PARSE_BYTES = 4 * 1024 * 1024
MAX_TARGETS = 500_000
MAX_RESOLVED = 16_384  # the memo of resolved references: a cache, emptied when full
SOURCES_KEPT = 3
BROKEN_KEPT = 200

PAGE_SUFFIXES = (".html", ".htm")
_CSS_URL = re.compile(rb"""url\(\s*(?:"([^"]*)"|'([^']*)'|([^)'"\s]*))\s*\)""", re.IGNORECASE)
_CSS_IMPORT = re.compile(rb"""@import\s+(?:"([^"]*)"|'([^']*)')""", re.IGNORECASE)
_URL_ATTRIBUTES = ("href", "src", "poster", "data")
_SELECTOR = "[href], [src], [srcset], [poster], [style], style"
_SKIPPED_SCHEMES = ("data:", "mailto:", "javascript:", "tel:", "about:", "blob:")

Kind = Literal["page", "asset"]


@dataclass(frozen=True)
class BrokenReference:
    """One internal reference that resolves to nothing: what it names, how often, from where."""

    target: str
    kind: Kind
    count: int
    sources: tuple[str, ...]

    def as_dict(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "kind": self.kind,
            "count": self.count,
            "sources": list(self.sources),
        }


@dataclass(frozen=True)
class CompletenessReport:
    """What a bundle holds as a site. `broken` lists at most BROKEN_KEPT targets (page links
    first, then by count); the `*_count` fields count all of them."""

    pages: int
    assets: int
    references: int
    broken_link_count: int
    missing_asset_count: int
    broken: tuple[BrokenReference, ...] = ()
    pages_cut: int = 0
    targets_dropped: bool = False
    base_path: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {
            "pages": self.pages,
            "assets": self.assets,
            "references": self.references,
            "broken_links": self.broken_link_count,
            "missing_assets": self.missing_asset_count,
            "broken": [b.as_dict() for b in self.broken],
            "pages_cut": self.pages_cut,
            "targets_dropped": self.targets_dropped,
            "base_path": self.base_path,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CompletenessReport:
        """The report `as_dict()` gave (as stored beside a bundle)."""
        broken = tuple(
            BrokenReference(b["target"], b["kind"], int(b["count"]), tuple(b["sources"]))
            for b in data.get("broken", [])
        )
        return cls(
            pages=int(data["pages"]),
            assets=int(data["assets"]),
            references=int(data["references"]),
            broken_link_count=int(data["broken_links"]),
            missing_asset_count=int(data["missing_assets"]),
            broken=broken,
            pages_cut=int(data.get("pages_cut", 0)),
            targets_dropped=bool(data.get("targets_dropped", False)),
            base_path=str(data.get("base_path", "")),
        )

    def canonical(self) -> bytes:
        """The canonical JSON bytes that `digest` hashes."""
        return json.dumps(self.as_dict(), sort_keys=True, separators=(",", ":")).encode()

    @property
    def digest(self) -> str:
        return hash_bytes(self.canonical())

    def summary(self) -> str:
        """One line for operators: `1234 pages, 56 assets, 2 broken links, 1 missing asset`."""
        return (
            f"{self.pages} pages, {self.assets} assets, "
            f"{_plural(self.broken_link_count, 'broken link')}, "
            f"{_plural(self.missing_asset_count, 'missing asset')}"
        )


def site_line(pages: int, page_count: int | None, broken_links: int, missing_assets: int) -> str:
    """The one line a version's completeness is shown as:
    `40 pages of pageCount 40, 0 broken links, 1 missing asset`."""
    reported = f" of pageCount {page_count}" if page_count is not None else ""
    return (
        f"{pages} pages{reported}, {_plural(broken_links, 'broken link')}, "
        f"{_plural(missing_assets, 'missing asset')}"
    )


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


class _Target:
    __slots__ = ("count", "sources")

    def __init__(self) -> None:
        self.count = 0
        self.sources: list[str] = []


class SiteScanner:
    """Collects a site's files and references from archive members (an `archive.FileSink`).

    A member handed over by a failed inspection leaves only counts behind: nothing here is
    kept for the bundle until the inspection that fed it returned.
    """

    def __init__(self) -> None:
        self.files: set[str] = set()
        self.directories: set[str] = set()
        self.targets: dict[tuple[bool, str], _Target] = {}
        self.references = 0
        self.pages_cut = 0
        self.targets_dropped = False
        self._resolved: dict[tuple[str, str], str | None] = {}

    # -- the FileSink side ------------------------------------------------------------------

    def directory(self, path: str) -> None:
        self.directories.add(path)

    def open_file(self, path: str) -> IO[bytes]:
        self.files.add(path)
        lower = path.lower()
        if lower.endswith(PAGE_SUFFIXES):
            return cast(IO[bytes], _Collector(self, path, "html"))
        if lower.endswith(".css"):
            return cast(IO[bytes], _Collector(self, path, "css"))
        return cast(IO[bytes], _Discard())

    # -- collecting ----------------------------------------------------------------------

    def collect(self, source: str, text: bytes, kind: str) -> None:
        """Record the references of one page or stylesheet (`text` already capped)."""
        refs = html_references(text) if kind == "html" else css_references(text)
        folder = source.rpartition("/")[0]
        resolved = self._resolved
        for ref in refs:
            # Navigation repeats on every page: resolve each (folder, reference) once.
            memo = ("" if ref.startswith("/") else folder, ref)
            if memo in resolved:
                target = resolved[memo]
            else:
                if len(resolved) >= MAX_RESOLVED:
                    resolved.clear()
                target = resolved[memo] = _target_of(source, ref)
            if target is None:
                continue
            key = (ref.startswith("/"), target)
            self.references += 1
            entry = self.targets.get(key)
            if entry is None:
                if len(self.targets) >= MAX_TARGETS:
                    self.targets_dropped = True
                    continue
                entry = self.targets[key] = _Target()
            entry.count += 1
            if len(entry.sources) < SOURCES_KEPT and source not in entry.sources:
                entry.sources.append(source)

    # -- the end -------------------------------------------------------------------------

    def report(self) -> CompletenessReport:
        """What the members seen so far make as a site."""
        root = _site_root(self.files)
        site_files = {p[len(root) :] for p in self.files if p.startswith(root)}
        base = _base_path([t for absolute, t in self.targets if absolute], site_files)
        found: dict[str, tuple[int, list[str]]] = {}
        for (absolute, target), entry in self.targets.items():
            path = target
            if absolute and base and (target + "/").startswith(base):
                path = "/" + target[len(base) :]
            path = path.lstrip("/")
            if root and path.startswith(root):
                path = path[len(root) :]
            if _resolves(path, site_files):
                continue
            count, sources = found.setdefault(path, (0, []))
            for source in entry.sources:
                shown = source.lstrip("/")
                shown = shown[len(root) :] if root and shown.startswith(root) else shown
                if len(sources) < SOURCES_KEPT and shown not in sources:
                    sources.append(shown)
            found[path] = (count + entry.count, sources)
        broken = [
            BrokenReference(path, _kind_of(path), count, tuple(sources))
            for path, (count, sources) in found.items()
        ]
        pages = sum(1 for p in site_files if p.lower().endswith(PAGE_SUFFIXES))
        broken.sort(key=lambda b: (b.kind != "page", -b.count, b.target))
        return CompletenessReport(
            pages=pages,
            assets=len(site_files) - pages,
            references=self.references,
            broken_link_count=sum(1 for b in broken if b.kind == "page"),
            missing_asset_count=sum(1 for b in broken if b.kind == "asset"),
            broken=tuple(broken[:BROKEN_KEPT]),
            pages_cut=self.pages_cut,
            targets_dropped=self.targets_dropped,
            base_path=base.rstrip("/"),
        )


class _Collector:
    """The writable end for one page or stylesheet: keeps up to MAX_PARSE_BYTES, then parses."""

    def __init__(self, scanner: SiteScanner, path: str, kind: str) -> None:
        self.scanner = scanner
        self.path = path
        self.kind = kind
        self.buffer = bytearray()
        self.cut = False

    def write(self, data: bytes) -> int:
        room = MAX_PARSE_BYTES - len(self.buffer)
        if len(data) > room:
            self.cut = True
        self.buffer += data[: max(room, 0)]
        return len(data)

    def close(self) -> None:
        if self.cut:
            self.scanner.pages_cut += 1
        self.scanner.collect("/" + self.path, bytes(self.buffer), self.kind)
        self.buffer = bytearray()

    def __enter__(self) -> _Collector:
        return self

    def __exit__(self, *exc: object) -> None:
        if exc[0] is None:
            self.close()


class _Discard:
    """The writable end for a member whose content does not matter (an image, a script)."""

    def write(self, data: bytes) -> int:
        return len(data)

    def close(self) -> None:
        return None

    def __enter__(self) -> _Discard:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


# ---------------------------------------------------------------------------
# Extracting references (also used by `chart check --site`, which crawls over HTTP).


def html_references(text: bytes) -> Iterator[str]:
    """Every URL a page names in href/src/srcset/poster attributes, inline styles and
    <style> blocks, in document order."""
    from selectolax.lexbor import LexborHTMLParser  # only runs that meet a page load it

    tree = LexborHTMLParser(text)
    for node in tree.css(_SELECTOR):
        if node.tag == "style":
            yield from css_references((node.text(deep=True) or "").encode())
            continue
        attrs = node.attributes
        for name in _URL_ATTRIBUTES:
            value = attrs.get(name)
            if value and (name != "data" or node.tag == "object"):
                yield value.strip()
        srcset = attrs.get("srcset")
        if srcset:
            yield from _srcset_urls(srcset)
        style = attrs.get("style")
        if style:
            yield from css_references(style.encode())


def css_references(text: bytes) -> Iterator[str]:
    """Every URL a stylesheet names in url(...) and @import "..."."""
    for pattern in (_CSS_URL, _CSS_IMPORT):
        for match in pattern.finditer(text):
            raw = next((g for g in match.groups() if g is not None), b"")
            if raw.strip():
                yield raw.strip().decode("utf-8", "replace")


def _srcset_urls(srcset: str) -> Iterable[str]:
    for candidate in srcset.split(","):
        url = candidate.strip().split(" ")[0]
        if url:
            yield url


def _target_of(source: str, ref: str) -> str | None:
    """The site path (starting with "/") that `ref` on page `source` names, or None when it
    is external, not a file reference, or only a fragment."""
    if not ref or ref.startswith("#") or ref.lower().startswith(_SKIPPED_SCHEMES):
        return None
    try:
        parts = urlsplit(ref)
    except ValueError:
        return None
    if parts.scheme or parts.netloc:
        return None
    path = unquote(parts.path)
    if not path:
        return None
    if not path.startswith("/"):
        path = source.rpartition("/")[0] + "/" + path
    return _normalise(path)


def _normalise(path: str) -> str:
    parts: list[str] = []
    for part in path.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if parts:
                parts.pop()
            continue
        parts.append(part)
    trailing = "/" if path.endswith("/") and parts else ""
    return "/" + "/".join(parts) + trailing


def _site_root(files: set[str]) -> str:
    """ "" when the bundle's root is the site's, else "top/" for a single wrapping directory."""
    if "index.html" in files:
        return ""
    tops = {p.partition("/")[0] for p in files if "/" in p}
    if len(tops) == 1 and not any("/" not in p for p in files):
        top = tops.pop()
        if f"{top}/index.html" in files:
            return top + "/"
    return ""


def _base_path(absolute: list[str], files: set[str]) -> str:
    """ "/base/" when every absolute reference (two at least) starts with it (or is `/base`)
    and the bundle has no top-level `base`."""
    firsts = {t.split("/")[1] for t in absolute}
    if len(firsts) != 1 or len(absolute) < 2:
        return ""
    first = firsts.pop()
    tops = {p.partition("/")[0] for p in files}
    if not first or first in tops:
        return ""
    return f"/{first}/"


def _resolves(path: str, files: set[str]) -> bool:
    if path == "" or path.endswith("/"):
        return f"{path}index.html" in files
    return path in files or f"{path}/index.html" in files or f"{path}.html" in files


def _kind_of(path: str) -> Kind:
    name = path.rstrip("/").rpartition("/")[2]
    if path.endswith("/") or "." not in name or name.lower().endswith(PAGE_SUFFIXES):
        return "page"
    return "asset"


@dataclass(frozen=True)
class PageVerdict:
    """How the pages found compare with the vendor's reported `pageCount`."""

    found: int
    reported: int | None
    tolerance: int = 0
    compared: bool = field(default=True)

    @property
    def shortfall(self) -> int:
        return max((self.reported or 0) - self.found, 0) if self.compared else 0

    @property
    def refused(self) -> bool:
        return self.compared and self.reported is not None and self.shortfall > self.tolerance

    @property
    def tolerance_used(self) -> bool:
        return self.compared and 0 < self.shortfall <= self.tolerance


def page_tolerance(reported: int, percent: float, pages: int) -> int:
    """The allowed shortfall: `percent` of `reported` or `pages`, whichever is larger."""
    return max(int(reported * percent / 100), pages)


def judge_pages(
    found: int, reported: int | None, *, paths_named: bool, percent: float, pages: int
) -> PageVerdict:
    """Compare pages found with `pageCount` (not when the export named `paths`, whose count
    the vendor does not define against the bundle)."""
    if paths_named or reported is None:
        return PageVerdict(found, reported, 0, compared=False)
    return PageVerdict(found, reported, page_tolerance(reported, percent, pages))
