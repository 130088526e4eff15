"""CPU per page of reading a page's links (`completeness.page_links`, issue 39).

`python -m bench.bench_pagelinks`: MIRROR_BENCH_PAGES pages (default 3000) of the
simulator's realistic MIRROR_BENCH_SITE_MIB site (default 500, `make bench`'s page-heavy
site), every k-th so that all sizes are met, each read in turn, in alternating order, by:
`page_links` as it was before issue 39 (`links_before`: two queries of lexbor's tree),
`page_links` now (one walk), and lexbor's parse alone (the floor of any reading of the
tree). CPU time of this process (`time.process_time_ns`), median and mean per page, so
the figure holds on a busy machine; also whether every page read the same both ways.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable

from selectolax.lexbor import LexborHTMLParser

from mirror.archive.completeness import _SELECTOR, _add_node_references, css_references, page_links
from mirror.archive.encoding import sniff
from mirror.sim import tree

PAGES = int(os.environ.get("MIRROR_BENCH_PAGES", "3000"))
SITE_MIB = int(os.environ.get("MIRROR_BENCH_SITE_MIB", "500"))


def site_pages(count: int, site_mib: int) -> list[bytes]:
    """`count` pages of the realistic site, spread over it."""
    plan = tree.site_plan(1, "docs.example.com", site_mib * 1024 * 1024)
    step = max(len(plan.pages) // count, 1)
    return [
        tree.render_page(plan, page, domain="docs.example.com", base="", seed=str(n), version="1")
        for n, page in enumerate(plan.pages[::step][:count])
    ]


def links_before(data: bytes) -> tuple[str | None, list[str]]:
    """`page_links` before issue 39 (two queries of the tree), for UTF-8 pages."""
    if sniff(data) != "utf-8":
        raise ValueError("a UTF-8 page, as the realistic site's are")
    parsed = LexborHTMLParser(data)
    base = parsed.css_first("base[href]")
    refs: list[str] = []
    for node in parsed.css(_SELECTOR):
        if node.tag == "style":
            refs += css_references((node.text(deep=True) or "").encode())
        elif node.tag != "base":
            _add_node_references(refs, node.tag, node.attributes)
    return (base.attributes.get("href") or "") if base is not None else None, refs


def cpu_ms(read: Callable[[bytes], object], page: bytes) -> float:
    started = time.process_time_ns()
    read(page)
    return (time.process_time_ns() - started) / 1e6


def main() -> None:
    pages = site_pages(PAGES, SITE_MIB)
    readers: dict[str, Callable[[bytes], object]] = {
        "before": links_before,
        "page_links": page_links,
        "parse alone": LexborHTMLParser,
    }
    times: dict[str, list[float]] = {name: [] for name in readers}
    for n, page in enumerate(pages):
        order = list(readers.items())
        for name, read in order if n % 2 else reversed(order):
            times[name].append(cpu_ms(read, page))
    same = sum(page_links(p) == links_before(p) for p in pages)
    size = statistics.mean(len(p) for p in pages) / 1024
    print(f"{len(pages)} pages, {size:.1f} KiB mean; read the same both ways: {same}")
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    base = statistics.median(times["before"])
    for name, spent in times.items():
        median = statistics.median(spent)
        print(
            f"{name:>14}: median {median:.3f} ms, mean {statistics.mean(spent):.3f} ms a page,"
            f" {base / median:.2f}x cheaper than before"
        )


if __name__ == "__main__":
    main()
