"""The status page on `/`, loaded in a real browser (headless Chromium, Debian's package), read
as a person would: what it says about each domain, its versions and the last fetches."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
from selectolax.lexbor import LexborHTMLParser as HTMLParser

from mirror.airgap import chart
from mirror.serve.routes import bundle_path
from mirror.serve.supply import Trust
from tests.airgap.chart.seeding import DOMAIN, seed_version
from tests.fixtures.memory import MemoryBucket
from tests.fixtures.serving import (
    SwitchableBucket,
    chromium_dom,
    get,
    publish_statement,
    raw,
    serving,
)

V1, V2 = "2026-11-20", "2026-11-21"


def rows(dom: HTMLParser, selector: str) -> list[list[str]]:
    return [
        [cell.text(strip=True) for cell in row.css("td")]
        for row in dom.css(f"{selector} tr")
        if row.css("td")
    ]


def test_the_page_shows_domains_versions_provenance_and_fetches(
    tmp_path: Path, signing: Any, trusted: dict[str, Any]
) -> None:
    bucket = MemoryBucket()
    older, newer = (seed_version(bucket, tmp_path, label) for label in (V1, V2))
    chart.promote(bucket, DOMAIN, V1)
    chart.promote(bucket, DOMAIN, V2)
    publish_statement(
        bucket,
        signing,
        DOMAIN,
        V2,
        newer.sha256,
        vendor={"completed_at": "2026-11-21T03:00:00Z"},
        completeness={"summary": "40 pages, 0 broken links"},
    )
    away = SwitchableBucket(bucket)
    with serving(away, tmp_path / "cache", trust=Trust(trusted)) as running:
        assert httpx.get(running.url + bundle_path(DOMAIN, None, "tar.gz")).status_code == 200
        raw(running.port, get("/<script>alert(1)</script>"))
        dom = HTMLParser(chromium_dom(running.url + "/", tmp_path / "profile"))
        away.away = True
        running.refresh()
        down = HTMLParser(chromium_dom(running.url + "/", tmp_path / "profile"))

    assert dom.css_first("h1").text() == "mirror serve"
    assert dom.css_first("#ready").text().startswith("Ready")
    assert "reachable" in dom.css_first("#bucket").text()
    (section,) = dom.css("section.domain")
    assert section.css_first("h2").text() == DOMAIN
    assert f"Current version: {V2}" in section.text() and f"rollback target: {V1}" in section.text()
    links = [a.attributes["href"] for a in section.css("a")]
    assert links == [bundle_path(DOMAIN, None, "tar.gz"), bundle_path(DOMAIN, V2, "tar.gz")]
    table = rows(dom, "section.domain table")
    assert [row[:2] for row in table] == [[V2, "current"], [V1, "rollback target"]]
    assert table[0][4] == "cached, verified" and table[0][3] == newer.sha256[:16] + "…"
    assert table[0][5] == "2026-11-21T03:00:00Z"
    assert table[0][6] == f"signed by {signing.key_id}"
    assert table[0][7] == "40 pages, 0 broken links"
    assert table[1][4] == "cached, verified" and table[1][6] == "none"
    fetches = rows(dom, "#fetches")
    requests = [row[2] for row in fetches]
    assert f"GET {bundle_path(DOMAIN, None, 'tar.gz')}" in requests
    assert "GET /<script>alert(1)</script>" in requests
    assert dom.css("script") == []  # what a client sent is text, never markup
    assert [row[3] for row in fetches if "bundle" in row[2]] == ["200"]
    assert dom.css_first("#fetches td").text().endswith("Z")

    assert "Object store unreachable since" in down.css_first("#bucket").text()
    assert down.css_first("#ready").text().startswith("Ready")  # still served from the cache
    assert older.sha256 != newer.sha256
