"""CPU per page of reading a page's links: lexbor's tree against the tags alone (issue 39).

`python -m bench.bench_pagelinks`: MIRROR_BENCH_PAGES pages (default 3000) of the
simulator's realistic MIRROR_BENCH_SITE_MIB site (default 500, `make bench`'s page-heavy
site), every k-th so that all sizes are met, each read in turn, in alternating order, by:
the tree (`completeness.tree_links`, what `page_links` was), `page_links` (the tags where
they tell, else the tree) and `pagetokens.quick_links` alone. CPU time of this process
(`time.process_time_ns`), median and mean per page, so the figure holds on a busy
machine; also how many pages the tags decided.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable

from mirror.archive.completeness import css_references, page_links, tree_links
from mirror.archive.pagetokens import quick_links
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


def cpu_ms(read: Callable[[bytes], object], page: bytes) -> float:
    started = time.process_time_ns()
    read(page)
    return (time.process_time_ns() - started) / 1e6


def main() -> None:
    pages = site_pages(PAGES, SITE_MIB)
    readers: dict[str, Callable[[bytes], object]] = {
        "tree (lexbor)": tree_links,
        "page_links": page_links,
        "tags alone": lambda page: quick_links(page, css_references),
    }
    times: dict[str, list[float]] = {name: [] for name in readers}
    for n, page in enumerate(pages):
        order = list(readers.items())
        for name, read in order if n % 2 else reversed(order):
            times[name].append(cpu_ms(read, page))
    decided = sum(quick_links(p, css_references) is not None for p in pages)
    same = sum(page_links(p) == tree_links(p) for p in pages)
    size = statistics.mean(len(p) for p in pages) / 1024
    print(f"{len(pages)} pages, {size:.1f} KiB mean; decided by the tags: {decided}; same: {same}")
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    base = statistics.median(times["tree (lexbor)"])
    for name, spent in times.items():
        median = statistics.median(spent)
        print(
            f"{name:>14}: median {median:.3f} ms, mean {statistics.mean(spent):.3f} ms a page,"
            f" {base / median:.2f}x the tree"
        )


if __name__ == "__main__":
    main()
