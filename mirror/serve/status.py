"""The status page on `/`: plain HTML and CSS, no script, every value escaped.

What it shows: whether the service is ready (and why not); whether the last call to the
object store that ended (a read of the pointers or a fill) answered, with its time (or
since when calls fail), when the pointers were read (and whether they are the ones an
earlier run saved); whether serve.cache_max is below what must be kept; per domain its
current version and rollback target with their links (and, when the bucket has no index
for it, that there is nothing to serve), and every version the bucket lists with its size,
sha256, whether it is cached and verified or why it was refused, its export time, its
provenance (verified, unverified, none) and its completeness summary; and the last fetches
(time, client, request, status, bytes).
"""

from __future__ import annotations

from html import escape
from typing import TYPE_CHECKING

from mirror.serve.cache import Entry
from mirror.serve.pointers import DomainView, Listed
from mirror.serve.routes import bundle_path
from mirror.timestamps import rfc3339
from mirror.units import format_size
from mirror.versions import VersionLabel

if TYPE_CHECKING:
    from mirror.serve.service import Service

STYLE = """
body { font: 15px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 72em; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 1.6em; }
table { border-collapse: collapse; width: 100%; margin: .5em 0; }
th, td { text-align: left; padding: .25em .6em; border-bottom: 1px solid #ddd; }
th { background: #f4f4f4; } code { font-size: .9em; }
td:first-child, td:nth-child(3), td:nth-child(6) { white-space: nowrap; }
.ok { color: #0a6b2b; } .bad { color: #a30d0d; font-weight: bold; }
.note { color: #555; }
"""


def render_status(service: Service) -> str:
    """The whole page, from the service's state now."""
    parts = [
        "<!doctype html>",
        '<html lang="en"><head><meta charset="utf-8"><title>mirror serve</title>',
        f"<style>{STYLE}</style></head><body>",
        "<h1>mirror serve</h1>",
        _readiness(service),
        _bucket(service),
        _cache(service),
    ]
    for name in sorted(service.pointers.domains):
        parts.append(_domain(service, service.pointers.domains[name]))
    parts.append(_fetches(service))
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def _readiness(service: Service) -> str:
    why = service.not_ready()
    if why is None:
        return '<p id="ready" class="ok">Ready: every current version is cached and verified.</p>'
    return f'<p id="ready" class="bad">Not ready: {escape(why)}</p>'


def _bucket(service: Service) -> str:
    """The store as the last call to it that ended found it (a read of the pointers or a
    fill: mirror.serve.health), with that call's time, and when the pointers were read."""
    read_at = service.pointers.read_at
    when = rfc3339(read_at) if read_at else "never"
    last, down_since = service.health.last, service.health.down_since
    if last is None:
        said, bad = "Object store: not called yet", True
    elif last.error is not None:
        since = rfc3339(down_since) if down_since else rfc3339(last.at)
        said, bad = (
            f"Object store unreachable since {since}: the last call to it failed at "
            f"{rfc3339(last.at)}: {last.error}",
            True,
        )
    else:
        said, bad = (
            f"Object store reachable: the last call to it answered at {rfc3339(last.at)}",
            False,
        )
    if service.pointers_from_disk:
        said += (
            "; not read since start: serving from the cache with the pointers an earlier "
            f"run saved (read {when})"
        )
    elif bad:
        said += f"; serving from the cache with the pointers read {when}"
    else:
        said += f"; pointers read {when}"
    kind = "bad" if bad or service.pointers_from_disk else "ok"
    return f'<p id="bucket" class="{kind}">{escape(said)}.</p>'


def _cache(service: Service) -> str:
    """serve.cache_max below what must be kept (Service.cache_short), when it is."""
    short = service.cache_short()
    return "" if short is None else f'<p id="cache" class="bad">{escape(short)}.</p>'


def _domain(service: Service, view: DomainView) -> str:
    rows = []
    for label in sorted(view.versions, key=VersionLabel, reverse=True):
        listed = view.versions[label]
        refused = service.refusals.get((view.domain, label))
        rows.append(_version_row(view, listed, service.cache.get(listed.ref.sha256), refused))
    links = ""
    if view.current in view.versions:
        fmt = view.versions[view.current].ref.format
        moving, pinned = (
            bundle_path(view.domain, None, fmt),
            bundle_path(view.domain, view.current, fmt),
        )
        links = (
            f' (moving: <a href="{escape(moving)}">{escape(moving)}</a>, pinned: '
            f'<a href="{escape(pinned)}">{escape(pinned)}</a>)'
        )
    head = (
        f"<p>Current version: <strong>{escape(view.current or 'none')}</strong>{links}; "
        f"rollback target: {escape(view.rollback or 'none')}</p>"
    )
    if not view.indexed:
        head += (
            '<p class="bad">The bucket has no index.json for this domain: nothing to serve. '
            "Check serve.domains (a typo?), or import a version of it.</p>"
        )
    table = (
        "<table><tr><th>version</th><th>role</th><th>size</th><th>sha256</th>"
        "<th>cache</th><th>exported</th><th>provenance</th><th>completeness</th></tr>"
        + "".join(rows)
        + "</table>"
    )
    return f'<section class="domain"><h2>{escape(view.domain)}</h2>{head}{table}</section>'


def _version_row(view: DomainView, listed: Listed, entry: Entry | None, refused: str | None) -> str:
    label = str(listed.ref.label)
    role = (
        "current"
        if label == view.current
        else ("rollback target" if label == view.rollback else "")
    )
    facts = entry.provenance if entry is not None else {}
    if entry is None:
        cache = f"refused: {refused}" if refused else "not cached"
    else:
        cache = "cached, verified" if entry.verified else "cached, not verified yet"
    if not facts:
        provenance = "unknown until cached"
    elif facts.get("present"):
        provenance = (
            "signed by " + str(facts.get("key_id"))
            if facts.get("verified")
            else "present, not verified (no target.transfer_keys)"
        )
    else:
        provenance = "none"
    summary = str(facts.get("summary") or "")
    if facts.get("accepted"):
        summary += f"; accepted: {facts['accepted']}"
    cells = [
        label,
        role,
        format_size(listed.ref.size),
        listed.ref.sha256[:16] + "…",
        cache,
        str(facts.get("completed_at") or facts.get("exported_at") or ""),
        provenance,
        summary,
    ]
    return "<tr>" + "".join(f"<td>{escape(cell)}</td>" for cell in cells) + "</tr>"


def _fetches(service: Service) -> str:
    rows = []
    for fetch in reversed(list(service.recent)):
        cells = [
            rfc3339(fetch.at),
            fetch.client,
            f"{fetch.method} {fetch.path}",
            str(fetch.status),
            str(fetch.bytes),
            f"{fetch.seconds:.3f}s",
        ]
        rows.append("<tr>" + "".join(f"<td>{escape(cell)}</td>" for cell in cells) + "</tr>")
    if not rows:
        return '<h2>Last fetches</h2><p class="note">none yet</p>'
    return (
        '<h2>Last fetches</h2><table id="fetches"><tr><th>time</th><th>client</th>'
        "<th>request</th><th>status</th><th>bytes</th><th>took</th></tr>"
        + "".join(rows)
        + "</table>"
    )
