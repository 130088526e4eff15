"""The tree of a realistic site (`site_size` set): which files, how big, which change when.

About 70% of the bytes are HTML pages of 5-60 KiB in a section/topic/page
directory tree, 5% CSS and JS, and the rest PNG and JPEG images (incompressible),
as on a real documentation site. The tree's shape depends only on (seed,
domain, site_size); a page's bytes on (domain, revision, page, generation), where
a page's generation counts the exports that changed it. Changes go round-robin
over a seeded permutation of the pages, so each export changes exactly
`change_count` pages and nothing else (images, CSS and JS stay the same).
"""

from __future__ import annotations

import functools
import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

from mirror.sim.content import (
    TECH_WORDS,
    css_corpus,
    html_corpus,
    image_bytes,
    js_corpus,
    text_of_size,
)

KiB = 1024
HTML_SHARE = 0.70
CODE_SHARE = 0.05
PAGE_SIZES = (5 * KiB, 60 * KiB, 14 * KiB)  # triangular: low, high, mode
IMAGE_SIZES = (16 * KiB, 800 * KiB, 60 * KiB)
CODE_SIZES = (30 * KiB, 300 * KiB, 80 * KiB)
PAGES_PER_SECTION = 300
INDEX_PAGE_SIZE = 12 * KiB

Kind = Literal["page", "png", "jpeg", "css", "js"]


@dataclass(frozen=True)
class PlannedFile:
    name: str
    size: int
    kind: Kind
    number: int
    section: str = ""


@dataclass(frozen=True)
class SitePlan:
    """Pages (page 0 is `index.html`), assets, sections, each page's change position, and
    each section's first page (`starts`, what the navigation links to)."""

    pages: tuple[PlannedFile, ...]
    assets: tuple[PlannedFile, ...]
    sections: tuple[str, ...]
    position: tuple[int, ...]
    starts: tuple[str, ...] = ()

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.pages) + sum(f.size for f in self.assets)


def change_count(pages: int, changes_per_export: int, change_share: float | None) -> int:
    """Pages one export changes: `change_share` of them (at least one when the share is
    above 0) when set, otherwise `changes_per_export`."""
    if change_share is None:
        return changes_per_export
    if change_share <= 0:
        return 0
    return min(pages, max(1, round(change_share * pages)))


def generation(position: int, pages: int, export_number: int, changes: int) -> int:
    """How many of the first `export_number` exports changed the page at `position` of the
    round-robin order."""
    rounds, rest = divmod(export_number * changes, max(pages, 1))
    return rounds + (1 if position < rest else 0)


def _size(rng: random.Random, sizes: tuple[int, int, int]) -> int:
    return int(rng.triangular(*sizes))


def _files_until(
    rng: random.Random, budget: int, sizes: tuple[int, int, int]
) -> Iterator[tuple[int, int]]:
    """(number, size) pairs until `budget` bytes are planned (the last one cut to fit)."""
    planned, number = 0, 0
    while planned < budget:
        size = min(_size(rng, sizes), budget - planned)
        yield number, size
        planned += size
        number += 1


@functools.lru_cache(maxsize=8)
def site_plan(seed: int, domain: str, site_size: int) -> SitePlan:
    """The tree of a site of about `site_size` bytes of files."""
    rng = random.Random(f"{seed}|{domain}|{site_size}|plan")  # noqa: S311
    html_budget = int(site_size * HTML_SHARE)
    code_budget = int(site_size * CODE_SHARE)
    image_budget = site_size - html_budget - code_budget
    mean_page = sum(PAGE_SIZES) // 3
    count = max(1, html_budget // mean_page // PAGES_PER_SECTION + 1)
    sections = tuple(rng.sample(TECH_WORDS, min(count, len(TECH_WORDS))))
    topics = {section: rng.sample(TECH_WORDS, 8) for section in sections}
    pages = [PlannedFile("index.html", min(INDEX_PAGE_SIZE, html_budget), "page", 0)]
    for number, size in _files_until(rng, html_budget - pages[0].size, PAGE_SIZES):
        section = sections[number % len(sections)]
        topic = rng.choice(topics[section])
        slug = f"{rng.choice(TECH_WORDS)}-{rng.choice(TECH_WORDS)}-{number + 1}"
        name = f"{section}/{topic}/{slug}/index.html"
        pages.append(PlannedFile(name, size, "page", number + 1, section))
    assets: list[PlannedFile] = []
    for number, size in _files_until(rng, code_budget, CODE_SIZES):
        kind: Kind = "css" if number % 3 == 0 else "js"
        name = f"assets/{kind}/{'site' if kind == 'css' else 'app'}-{number}.{kind}"
        assets.append(PlannedFile(name, size, kind, number))
    for number, size in _files_until(rng, image_budget, IMAGE_SIZES):
        section = sections[number % len(sections)]
        image: Kind = "jpeg" if number % 2 else "png"
        extension = "jpg" if image == "jpeg" else "png"
        name = f"assets/images/{section}/{rng.choice(TECH_WORDS)}-{number}.{extension}"
        assets.append(PlannedFile(name, size, image, number, section))
    order = list(range(len(pages)))
    rng.shuffle(order)
    position = [0] * len(pages)
    for place, page in enumerate(order):
        position[page] = place
    first: dict[str, str] = {}
    for planned in pages[1:]:
        first.setdefault(planned.section, page_slug(planned))
    starts = tuple(first.get(section, "") for section in sections)
    return SitePlan(tuple(pages), tuple(assets), sections, tuple(position), starts)


def _asset_tags(plan: SitePlan, base: str) -> str:
    """The stylesheet and script of every page: the site's first of each, when it has one."""
    css = next((a.name for a in plan.assets if a.kind == "css"), None)
    js = next((a.name for a in plan.assets if a.kind == "js"), None)
    tags = f'<link rel="stylesheet" href="{base}/{css}">\n' if css else ""
    return tags + (f'<script src="{base}/{js}" defer></script>\n' if js else "")


def section_start(plan: SitePlan, section: str) -> str:
    """The slug of a section's first page (what the navigation links to; a section has no
    index page of its own)."""
    return plan.starts[plan.sections.index(section)]


def page_slug(page: PlannedFile) -> str:
    return "" if page.number == 0 else page.name.removesuffix("/index.html")


def render_page(
    plan: SitePlan, page: PlannedFile, *, domain: str, base: str, seed: str, version: str
) -> bytes:
    """Exactly `page.size` bytes of HTML: head, section navigation, body text, footer."""
    title = f"{domain} documentation" if page.number == 0 else page_slug(page).split("/")[-1]
    nav = "".join(
        f'<li class="nav-item"><a class="nav-link" href="{base}/{section_start(plan, s)}/">'
        f"{s.capitalize()}</a></li>"
        for s in plan.sections
    )
    head = (
        '<!doctype html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{title} - {domain}</title>\n"
        f'<meta name="generator" content="mirror-sim revision {version}">\n'
        f"{_asset_tags(plan, base)}</head>\n<body>\n"
        f'<header class="site-header"><a class="brand" href="{base}/">{domain}</a>\n'
        f'<nav class="site-nav"><ul class="nav-list">{nav}</ul></nav></header>\n'
        f'<main class="content">\n<h1 class="page-title">{title}</h1>\n'
    ).encode()
    tail = (
        '</main>\n<footer class="site-footer"><p>Generated by the documentation platform. '
        f'<a href="{base}/">Home</a></p></footer>\n</body>\n</html>\n'
    ).encode()
    body = text_of_size(html_corpus(), seed, max(page.size - len(head) - len(tail), 0))
    whole = body.rfind(b"\n") + 1  # no element cut in half: the rest is blank
    body = body[:whole] + b" " * (len(body) - whole)
    return (head + body + tail)[: page.size]


def render_asset(asset: PlannedFile, seed: str) -> bytes:
    """Exactly `asset.size` bytes: CSS or JS text, or image bytes (the same every export)."""
    key = f"{seed}|{asset.kind}|{asset.number}"
    if asset.kind == "css":
        return text_of_size(css_corpus(), key, asset.size)
    if asset.kind == "js":
        return text_of_size(js_corpus(), key, asset.size)
    return image_bytes(key, asset.size, jpeg=asset.kind == "jpeg")
