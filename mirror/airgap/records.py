"""What the air-gapped side's short-lived commands leave in the bucket for monitoring.

`transfer import` and `chart refresh` run as CronJobs: no process of theirs lives long
enough to be scraped. They record how they ended in two small bucket documents
(mirror.airgap.layout: `ImportResults`, `RenderedLinks`), and `mirror serve`, the one
long-running process there, which reads the bucket anyway, shows them as metrics
(mirror.serve.metrics). Why the bucket and not node_exporter's textfile collector:
docs/architecture.md, "Monitoring".

Promises: a record is written after the command's own work, with one conditional
read-modify-write (no lost count when two imports end at once); a record that cannot be
written is never the command's failure and never hides the command's own error (its exit
code and its one line are the ones the command would have had): after a success it is a
warning, after a failure (the bucket may be what failed) a debug line. `mirror serve` shows
only the link records rendered under the `target.url_mode` configured now (`links_in_force`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Protocol, TypeVar

from mirror.airgap import layout
from mirror.errors import IntegrityError, MirrorError
from mirror.timestamps import rfc3339, utcnow

log = logging.getLogger(__name__)

R = TypeVar("R", bound="Imported")


class Imported(Protocol):
    """What a record needs of mirror.airgap.importer.ImportResult."""

    @property
    def sequence(self) -> int: ...

    @property
    def already_imported(self) -> bool: ...


class Link(Protocol):
    """What a record needs of mirror.airgap.chart.refresh.RefreshResult."""

    @property
    def domain(self) -> str: ...

    @property
    def version(self) -> str: ...

    @property
    def expires_at(self) -> datetime | None: ...


def recorded_import(store: layout.Bucket, run: Callable[[], R]) -> R:
    """`run()` (an import), its result recorded in `_mirror/import-results.json`:
    imported or already_imported; refused (an IntegrityError, exit 5) or failed (any other
    error), the error raised again."""
    try:
        result = run()
    except IntegrityError:
        record_import(store, "refused", None)
        raise
    except MirrorError:
        record_import(store, "failed", None)
        raise
    outcome = "already_imported" if result.already_imported else "imported"
    record_import(store, outcome, result.sequence)
    return result


def record_import(
    store: layout.Bucket, result: str, sequence: int | None, now: datetime | None = None
) -> None:
    """Count `result` (one of layout.RESULTS) as the last import's, at `now`."""
    at = rfc3339(now or utcnow())

    def change(old: layout.ImportResults | None) -> layout.ImportResults:
        counts = dict(old.counts) if old is not None else {}
        counts[result] = counts.get(result, 0) + 1
        success = result in ("imported", "already_imported")
        return layout.ImportResults(
            last_at=at,
            last_result=result,
            last_sequence=sequence
            if sequence is not None
            else (old.last_sequence if old else None),
            last_success_at=at if success else (old.last_success_at if old else None),
            counts=counts,
        )

    success = result in ("imported", "already_imported")
    _write(store, layout.RESULTS_PARTS, layout.ImportResults, change, loud=success)


def record_links(
    store: layout.Bucket, url_mode: str, links: Iterable[Link], now: datetime | None = None
) -> None:
    """The link each domain's values file holds now, and its expiry."""
    at = rfc3339(now or utcnow())

    def change(old: layout.RenderedLinks | None) -> layout.RenderedLinks:
        domains = dict(old.domains) if old is not None else {}
        for link in links:
            expires = rfc3339(link.expires_at) if link.expires_at is not None else None
            domains[link.domain] = layout.LinkRecord(
                version=link.version, url_mode=url_mode, expires_at=expires, rendered_at=at
            )
        return layout.RenderedLinks(domains=domains)

    _write(store, layout.LINKS_PARTS, layout.RenderedLinks, change, loud=True)


def links_in_force(
    found: layout.RenderedLinks | None, url_mode: str
) -> layout.RenderedLinks | None:
    """The link records of `found` rendered under `url_mode`, the one configured now.

    A record rendered under another mode is from before a switch: after `presigned` gives
    way to `serve`, nothing renders the presigned values files again (the refresh CronJob
    is presigned's only), so their links' expiry would be reported, and alerted on, for
    ever, for values no pod is given any more. None when nothing was recorded."""
    if found is None:
        return None
    kept = {d: link for d, link in found.domains.items() if link.url_mode == url_mode}
    return found.model_copy(update={"domains": kept})


class Shown:
    """The records as `mirror serve` shows them: read each poll (`read`), the links those in
    force under `url_mode` (`links_in_force`); a read that fails keeps the ones read before."""

    def __init__(self, url_mode: str) -> None:
        self.url_mode = url_mode
        self.imports: layout.ImportResults | None = None
        self.links: layout.RenderedLinks | None = None

    def read(self, store: layout.Bucket) -> None:
        """Read both again (a debug line when that fails: the pointers' read says whether
        the bucket is up)."""
        try:
            self.imports = layout.read_import_results(store) or self.imports
            links = links_in_force(layout.read_rendered_links(store), self.url_mode)
            self.links = links or self.links
        except MirrorError as exc:
            log.debug("cannot read the monitoring records: %s", exc)


D = TypeVar("D", layout.ImportResults, layout.RenderedLinks)


def _write(
    store: layout.Bucket,
    parts: tuple[str, ...],
    model: type[D],
    change: Callable[[D | None], D],
    *,
    loud: bool,
) -> None:
    key = store.key(*parts)
    try:
        layout.update_document(store, key, model, change)
    except (MirrorError, OSError) as exc:
        level = logging.WARNING if loud else logging.DEBUG
        log.log(level, "cannot record %s for monitoring: %s", key, exc, extra={"key": key})
