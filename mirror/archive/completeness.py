"""Completeness: is the bundle the whole site the vendor exported? Collected in the same pass.

A `SiteScanner` is an archive member sink (`archive.FileSink`): the inspection that checks
an archive as it streams in hands it every checked member, so counting pages and following
links costs no second read of the bundle. At the end, `SiteScanner.report()` says what the
site is: pages (`.html`/`.htm`), assets, and every internal reference (`href`, `src`,
`srcset`, `poster`, CSS `url()` and `@import`, in pages, inline styles and `.css` files)
that resolves to nothing in the bundle, with its first few sources. Fragments are ignored.

Promises:

- pure: bytes in, a `CompletenessReport` out; no I/O but private temporary tables, no
  clock;
- memory is bounded per member: a page or stylesheet is parsed from at most
  `MAX_PARSE_BYTES` (the rest is counted, not kept: `pages_cut` says how many were cut);
  other members are only named. Across the site, at most `MAX_TARGETS` distinct
  references and `SOURCES_KEPT` sources each are kept (`targets_dropped` says so);
- memory is flat in the file count: the paths, the references' targets and the broken
  ones are in memory up to `spill.SPILL_AT` of them, then on disk (`mirror.archive.spill`), with
  the same report either way;
- a page is read as a browser reads it: decoded in the encoding the HTML standard's
  sniffing finds (byte order mark, `<meta>` charset in the first 1024 bytes, else UTF-8
  when the bytes are UTF-8 and windows-1252 when not: `mirror.archive.encoding`), its
  relative references resolved against its first `<base href>` when it has one;
- a reference resolves as the one rule `mirror.archive.resolve` states, which `chart check
  --site` serves and crawls by: `dir/` finds `dir/index.html`; `page` finds `page`, else
  `page/index.html` (a redirect to `page/`), else `page.html`; absolute paths start at
  the site root, which is the bundle root or its single top directory holding
  `index.html`; a site published below a base path (every absolute reference, two at
  least, starting with the same `/base/` that is not a top-level name of the bundle) is
  resolved below that base;
- external references (a scheme or a host, or relative ones below a `<base href>` with a
  host), `data:`, `mailto:`, `javascript:`, pure fragments and queries are not checked;
- `CompletenessReport.digest` is the sha256 of its canonical JSON (`as_dict()`, sorted
  keys, no spaces): what provenance names.

The HTML parser is selectolax (lexbor): measured on 10,000 pages it is the fastest of
selectolax, lxml and html.parser by a wide margin (bench numbers in docs/architecture.md).
Still, on a site of thousands of pages parsing is most of an export's CPU: a scanner made
by `SiteScanner.in_worker` (what `export run` inspects its download with) on a machine of
`WORKER_MIN_CPUS` or more parses the pages past its first `WORKER_AFTER` in a child
process (`mirror.archive.scanworker`), on another core than the inspection's, and records
the answers in the order the pages came: the same report, the same digest.
"""

from __future__ import annotations

import collections
import heapq
import json
import os
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import IO, Any, Literal, cast

from mirror.archive.encoding import decode_page, sniff
from mirror.archive.resolve import SITE, base_of, document_url, served_as, url_text
from mirror.archive.resolve import target as resolved_target
from mirror.archive.scanworker import Links, PageParser, child_main
from mirror.archive.spill import SPILL_AT, SpillMap
from mirror.integrity import hash_bytes

MAX_PARSE_BYTES = 4 * 1024 * 1024
MAX_TARGETS = 500_000
MAX_RESOLVED = 16_384  # the memo of resolved references: a cache, emptied when full
_BATCH = 1024  # paths stored or looked up at once in the tables on disk
SOURCES_KEPT = 3
BROKEN_KEPT = 200
WORKER_AFTER = 256  # pages and stylesheets parsed here before a child parses the rest
# The CPUs a process needs before its scan gets a child: the download (with its hashing) and
# the inspection keep two busy, and on two a child only takes turns with them: measured
# 0.72x of the scan in one process on a 2-CPU machine (bench/RESULTS.md, issue 39).
WORKER_MIN_CPUS = 3

PAGE_SUFFIXES = (".html", ".htm")
_CSS_URL = re.compile(rb"""url\(\s*(?:"([^"]*)"|'([^']*)'|([^)'"\s]*))\s*\)""", re.IGNORECASE)
_CSS_IMPORT = re.compile(rb"""@import\s+(?:"([^"]*)"|'([^']*)')""", re.IGNORECASE)
_URL_ATTRIBUTES = ("href", "src", "poster", "data")
_SELECTOR = "[href], [src], [srcset], [poster], [style], style"

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


# One reference target as a table holds it: (first-seen order, count, first sources).
_Entry = tuple[int, int, list[str]]


class _Targets:
    """Every distinct reference target (absolute or not, path) with its count and first
    SOURCES_KEPT sources, the first MAX_TARGETS targets only (`dropped` says when more came).

    Up to `spill_at` targets they are a dict. Past that, the dict is a buffer: each time it
    fills, its entries are merged into a `SpillMap` on disk and it starts empty, so the hot
    targets (navigation on every page) cost a dict lookup a reference and one merge a
    buffer, not a statement a reference. Kept on disk: first-seen order, count and sources,
    so `entries()` gives what the dict alone would have held.
    """

    def __init__(self, spill_at: int) -> None:
        self._spill_at = spill_at
        self.hot: dict[tuple[bool, str], _Target] = {}
        self._disk: SpillMap | None = None
        self.dropped = False
        self._absolute = 0  # on disk: how many absolute targets, their first names (<= 2)
        self._firsts: set[str] = set()

    def get(self, key: tuple[bool, str]) -> _Target | None:
        """The buffer's entry for `key`: a new one when there is room, None when dropped."""
        hot = self.hot
        entry = hot.get(key)
        if entry is None:
            if self._disk is None and len(hot) >= MAX_TARGETS:
                self.dropped = True
                return None
            if len(hot) >= self._spill_at:
                self._flush()
            entry = hot[key] = _Target()
        return entry

    def entries(self) -> Iterator[tuple[bool, str, _Entry | str]]:
        """Every target kept: (absolute, path, (first-seen order, count, sources)), the last
        as `_encode` gives it when it comes from disk."""
        if self._disk is None:
            for n, ((absolute, target), entry) in enumerate(self.hot.items()):
                yield absolute, target, (n, entry.count, entry.sources)
            return
        self._flush()
        for key, value in self._disk.sorted_items():
            yield key[0] == "a", key[1:], value

    def absolute(self) -> tuple[set[str], int]:
        """The first names of the absolute targets kept (two at most: more name no base
        path) and how many such targets there are."""
        if self._disk is None:
            return {t.split("/")[1] for absolute, t in self.hot if absolute}, sum(
                absolute for absolute, _ in self.hot
            )
        return self._firsts, self._absolute

    def _flush(self) -> None:
        """Merge the buffer into the table on disk (in first-seen order), then empty it."""
        disk = self._disk = self._disk or SpillMap(0)
        keys = [("a" if absolute else "r") + target for absolute, target in self.hot]
        known = disk.get_many(keys)
        rows: list[tuple[str, str]] = []
        new: list[tuple[str, str]] = []
        kept = len(disk)
        for key, entry in zip(keys, self.hot.values(), strict=True):
            old = known.get(key)
            if old is not None:
                seen, count, sources = _decode(old)
                sources += [s for s in entry.sources if s not in sources]
                rows.append((key, _encode((seen, count + entry.count, sources[:SOURCES_KEPT]))))
            elif kept >= MAX_TARGETS:
                self.dropped = True
            else:
                new.append((key, _encode((kept, entry.count, entry.sources))))
                kept += 1
                if key[0] == "a":
                    self._absolute += 1
                    if len(self._firsts) < 2:
                        self._firsts.add(key.split("/")[1])
        disk.update(rows)
        disk.insert(new)
        self.hot.clear()


def _encode(entry: _Entry) -> str:
    """`seen count` and each source after a NUL (checked member paths hold no control
    character)."""
    seen, count, sources = entry
    return f"{seen} {count}" + "".join(f"\0{source}" for source in sources)


def _decode(value: str) -> _Entry:
    head, *sources = value.split("\0")
    seen, count = head.split(" ")
    return int(seen), int(count), sources


class SiteScanner:
    """Collects a site's files and references from archive members (an `archive.FileSink`).

    Memory is flat in the file count: the paths and the reference targets are tables that
    move to disk past `spill_at` entries (`spill.SPILL_AT`; `mirror.archive.spill`), and so is the
    report's table of broken targets (nameless files, freed with the scanner or the report
    made). A member handed over by a failed inspection leaves only counts behind: nothing
    here is kept for the bundle until the inspection that fed it returned.

    With `worker_after` (`in_worker`), the pages and stylesheets past that many are parsed
    by a `scanworker.PageParser` child (started then: a small site never starts one), and
    its answers recorded in the order the pages came; `report()` waits for the last and
    ends the child.
    """

    def __init__(self, spill_at: int | None = None, worker_after: int | None = None) -> None:
        self._spill_at = SPILL_AT if spill_at is None else spill_at
        self.files = SpillMap(self._spill_at)
        self._arrived: list[str] = []  # files not yet in `files` (stored a batch at a time)
        self.pages = 0
        self.targets = _Targets(self._spill_at)
        self.references = 0
        self.pages_cut = 0
        self._resolved: dict[tuple[str, str], str | None] = {}
        self._top: str | None = None  # the one top directory of every file, if so far one
        self._tops = 0  # how many top directories (2: more), 2 too for a file at the root
        self._worker_after = worker_after
        self._parsed_here = 0
        self._parser: PageParser | None = None
        self._waiting: collections.deque[str] = collections.deque()  # sent, not answered
        self.sent_to_worker = 0  # pages and stylesheets the child parsed
        self.worker_pid: int | None = None

    @classmethod
    def in_worker(cls) -> SiteScanner:
        """A scanner that parses past the first WORKER_AFTER pages in a child process, when
        this process may run on WORKER_MIN_CPUS or more (else all in this one)."""
        return cls(worker_after=WORKER_AFTER if usable_cpus() >= WORKER_MIN_CPUS else None)

    @property
    def targets_dropped(self) -> bool:
        return self.targets.dropped

    # -- the FileSink side ------------------------------------------------------------------

    def directory(self, path: str) -> None:
        """Directory members say nothing a file below them does not."""

    def open_file(self, path: str) -> IO[bytes]:
        lower = path.lower()
        page = lower.endswith(PAGE_SUFFIXES)
        # The inspection refused a second member of one path before it came here.
        self._arrived.append(path)
        if len(self._arrived) >= _BATCH:
            self._store_arrived()
        self.pages += page
        self._count_top(path)
        if page:
            return cast(IO[bytes], _Collector(self, path, "html"))
        if lower.endswith(".css"):
            return cast(IO[bytes], _Collector(self, path, "css"))
        return cast(IO[bytes], _Discard())

    def _store_arrived(self) -> None:
        self.files.insert((path, "") for path in self._arrived)
        self._arrived.clear()

    def _count_top(self, path: str) -> None:
        top, slash, _ = path.partition("/")
        if not slash:
            self._tops = 2
        elif self._top is None and not self._tops:
            self._top, self._tops = top, 1
        elif top != self._top:
            self._tops = 2

    # -- collecting ----------------------------------------------------------------------

    def take(self, source: str, text: bytes, kind: str) -> None:
        """One page or stylesheet read (`text` already capped): parsed here, or sent to the
        child (recording the answers it had to wait for)."""
        after = self._worker_after
        if self._parser is None and (after is None or self._parsed_here < after):
            self._parsed_here += 1
            self.collect(source, text, kind)
            return
        if self._parser is None:
            self._parser = PageParser()
            self.worker_pid = self._parser.process.pid
        for href, refs in self._parser.submit(text, kind):
            self.record(self._waiting.popleft(), href, refs)
        self._waiting.append(source)
        self.sent_to_worker += 1

    def _drain(self) -> None:
        """Record every answer still awaited, then end the child."""
        parser, self._parser = self._parser, None
        if parser is None:
            return
        try:
            while self._waiting:
                self.record(self._waiting.popleft(), *parser.next())
        finally:
            parser.close()

    def collect(self, source: str, text: bytes, kind: str) -> None:
        """Record the references of one page or stylesheet (`text` already capped), parsed
        here."""
        href, refs = page_links(text) if kind == "html" else (None, css_references(text))
        self.record(source, href, refs)

    def record(self, source: str, href: str | None, refs: Iterable[str]) -> None:
        """Record a page's or stylesheet's references, each resolved from its base URL
        (`mirror.archive.resolve`)."""
        base = base_of(document_url(source), href)
        rooted = href is not None and url_text(href).startswith("/") and base.startswith(SITE)
        folder = base.rpartition("/")[0]
        on_site = base.startswith(SITE)  # then a path from the root names the same everywhere
        resolved = self._resolved
        targets = self.targets
        hot = targets.hot  # emptied in place when it moves to disk
        for ref in refs:
            # Navigation repeats on every page: resolve each (base folder, reference) once.
            memo = ("" if on_site and ref[:1] == "/" and ref[1:2] != "/" else folder, ref)
            if memo in resolved:
                target = resolved[memo]
            else:
                if len(resolved) >= MAX_RESOLVED:
                    resolved.clear()
                found = resolved_target(base, ref)
                target = resolved[memo] = found[1] if found and found[0] == SITE else None
            if target is None:
                continue
            self.references += 1
            key = (rooted or ref.startswith("/"), target)
            entry = hot.get(key) or targets.get(key)
            if entry is None:
                continue
            entry.count += 1
            if len(entry.sources) < SOURCES_KEPT and source not in entry.sources:
                entry.sources.append(source)

    # -- the end -------------------------------------------------------------------------

    def report(self) -> CompletenessReport:
        """What the members seen so far make as a site."""
        self._drain()
        self._store_arrived()
        root = self._site_root()
        base = _base_path(
            *self.targets.absolute(),
            lambda name: root + name in self.files or self.files.has_prefix(f"{root}{name}/"),
        )
        with SpillMap(self._spill_at) as found:
            self._find_broken(root, base, found)
            broken, links, assets = _ranked(found, root)
        return CompletenessReport(
            pages=self.pages,
            assets=len(self.files) - self.pages,
            references=self.references,
            broken_link_count=links,
            missing_asset_count=assets,
            broken=broken,
            pages_cut=self.pages_cut,
            targets_dropped=self.targets_dropped,
            base_path=base.rstrip("/"),
        )

    def _site_root(self) -> str:
        """ "" when the bundle's root is the site's, else "top/" for a single wrapping
        directory (holding every file and `index.html`)."""
        if "index.html" in self.files or self._tops != 1:
            return ""
        return f"{self._top}/" if f"{self._top}/index.html" in self.files else ""

    def _find_broken(self, root: str, base: str, found: SpillMap) -> None:
        """Each target that resolves to nothing, under its site path in `found`: its
        entries one a line (`_encode`), as several targets can name one path."""
        batch: list[tuple[str, _Entry | str]] = []
        for absolute, target, entry in self.targets.entries():
            path = target
            if absolute and base and (target + "/").startswith(base):
                path = "/" + target[len(base) :]
            path = path.lstrip("/")
            if root and path.startswith(root):
                path = path[len(root) :]
            batch.append((path, entry))
            if len(batch) >= _BATCH:
                self._keep_broken(root, batch, found)
        self._keep_broken(root, batch, found)

    def _keep_broken(
        self, root: str, batch: list[tuple[str, _Entry | str]], found: SpillMap
    ) -> None:
        """Keep those of `batch` that do not resolve: one lookup of the files for all their
        first answers, one for the second answers of those left, one for the third."""
        left = batch
        for answer in range(3):
            asked = [served_as(root + path) for path, _ in left]
            present = self.files.get_many(names[answer] for names in asked if answer < len(names))
            left = [
                item
                for item, names in zip(left, asked, strict=True)
                if answer >= len(names) or names[answer] not in present
            ]
        for path, entry in left:
            line = entry if isinstance(entry, str) else _encode(entry)
            before = found.get(path)
            found[path] = line if before is None else f"{before}\n{line}"
        batch.clear()


def _ranked(found: SpillMap, root: str) -> tuple[tuple[BrokenReference, ...], int, int]:
    """The first BROKEN_KEPT broken targets (page links first, then by count) and how many
    page links and assets are broken. Each one's sources are those of its targets in the
    order the targets were first met, shown from the site root."""
    counts = {"page": 0, "asset": 0}

    def merged() -> Iterator[BrokenReference]:
        for path, value in found.sorted_items():
            count, sources = 0, list[str]()
            for _, more, kept in sorted(_decode(line) for line in value.split("\n")):
                count += more
                for source in kept:
                    shown = source.lstrip("/")
                    shown = shown[len(root) :] if root and shown.startswith(root) else shown
                    if len(sources) < SOURCES_KEPT and shown not in sources:
                        sources.append(shown)
            kind = _kind_of(path)
            counts[kind] += 1
            yield BrokenReference(path, kind, count, tuple(sources))

    first = heapq.nsmallest(
        BROKEN_KEPT, merged(), key=lambda b: (b.kind != "page", -b.count, b.target)
    )
    return tuple(first), counts["page"], counts["asset"]


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
        self.scanner.take("/" + self.path, bytes(self.buffer), self.kind)
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


def page_links(data: bytes, content_type: str = "") -> tuple[str | None, list[str]]:
    """A page read as a browser reads it: the href of its first `<base href>` (None when it
    has none) and every URL it names in href/src/srcset/poster attributes, inline styles
    and <style> blocks, in document order; decoded in the encoding `encoding.sniff` finds
    (`content_type`: an HTTP answer's).

    One walk over lexbor's answer to `_SELECTOR`, in document order: an element comes once
    for each selector of the list it matches (an `<img src srcset>` twice), so its
    references count that many times, as they always have (the report's digest depends on
    it). The first `<base>` with an href is the first such element met (every one matches
    `[href]`): no second query of the tree. Reading the tags alone instead of building the
    tree was tried and measured no cheaper (bench/RESULTS.md, issue 39)."""
    from selectolax.lexbor import LexborHTMLParser  # only runs that meet a page load it

    name = sniff(data, content_type)
    # UTF-8 without a BOM goes to the parser as it is (lexbor reads bytes as UTF-8).
    text = (
        data
        if name == "utf-8" and not data.startswith(b"\xef\xbb\xbf")
        else decode_page(data, content_type)
    )
    base: str | None = None
    refs: list[str] = []
    for node in LexborHTMLParser(text).css(_SELECTOR):
        tag = node.tag
        if tag == "style":
            refs += css_references((node.text(deep=True) or "").encode())
            continue
        attrs = node.attributes
        if tag != "base":
            _add_node_references(refs, tag, attrs)
        elif base is None and "href" in attrs:
            base = attrs["href"] or ""
    return base, refs


def _add_node_references(refs: list[str], tag: str | None, attrs: dict[str, str | None]) -> None:
    for name in _URL_ATTRIBUTES:
        value = attrs.get(name)
        if value and (name != "data" or tag == "object"):
            refs.append(url_text(value))
    srcset = attrs.get("srcset")
    if srcset:
        refs += _srcset_urls(srcset)
    style = attrs.get("style")
    if style:
        refs += css_references(style.encode())


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


def _base_path(firsts: set[str], count: int, is_top: Callable[[str], bool]) -> str:
    """ "/base/" when every absolute reference (two at least: `count`) starts with it (or
    is `/base`: `firsts` are their first names) and the bundle has no top-level `base`
    (`is_top`)."""
    if len(firsts) != 1 or count < 2:
        return ""
    first = next(iter(firsts))
    if not first or is_top(first):
        return ""
    return f"/{first}/"


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


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity where the system says)."""
    affinity = getattr(os, "sched_getaffinity", None)
    return len(affinity(0)) if affinity is not None else os.cpu_count() or 1


def _parse(text: bytes, page: bool) -> Links:
    """What the page parser process answers for a page or a stylesheet."""
    return page_links(text) if page else (None, list(css_references(text)))


if __name__ == "__main__":  # the page parser process (`scanworker.PageParser`)
    child_main(_parse)
