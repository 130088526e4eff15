"""Prometheus metrics of `mirror serve` (its own registry, served on `/metrics`).

Counters (since start):
    mirror_serve_responses_total{code}            every response, by HTTP status
    mirror_serve_bytes_served_total                body bytes sent
    mirror_serve_served_total{domain,version,current}
                                                   bundle GETs answered (200, 206) per version,
                                                   `current` "true" when it was current then
    mirror_serve_cache_hits_total                  bundle requests found verified in the cache
    mirror_serve_cache_fills_total                 bundles fetched from the bucket and verified
    mirror_serve_cache_evictions_total             bundles removed to stay under cache_max
    mirror_serve_cache_dropped_total               cached files found damaged and dropped
    mirror_serve_refused_total{domain,version}     objects that did not match their manifest
    mirror_serve_clients_cut_total                 clients cut after serve.idle_timeout
Histogram:
    mirror_serve_freshness_seconds                 from the vendor's export of a version (its
                                                   signed provenance) to the first time this
                                                   cache served it whole to a pod (a 200 GET
                                                   that sent every byte; never a HEAD or a
                                                   range): once per version
Gauges (read when scraped):
    mirror_serve_ready                             1 once every current version is verified
    mirror_serve_bucket_up                         1 when the last read of the pointers worked
    mirror_serve_pointers_age_seconds              since the pointers were last read
    mirror_serve_pointers_from_disk                1 while serving on pointers saved by an
                                                   earlier run (the bucket not read since start)
    mirror_serve_cache_bytes                       bytes of cached bundles
    mirror_serve_current_info{domain,version}      1 for each domain's current version
    mirror_serve_last_served_info{domain,version,current}
                                                   1 for the version last served per domain
                                                   (a GET), `current` "true" while it is
                                                   the current version (read when scraped);
                                                   kept across restarts (mirror.serve.seen)
    mirror_serve_served_version_age_seconds{domain}
                                                   age of that version since the vendor
                                                   exported it (its provenance, else manifest):
                                                   the age of the docs readers see now
    mirror_serve_current_version_age_seconds{domain}
                                                   the same of the current version (once cached)
    mirror_serve_newest_info{domain,version}       1 for each domain's newest complete version
    mirror_serve_current_is_newest{domain}         1 when the current version is the newest
                                                   (0 after a rollback, or a promote of an
                                                   older one)
    mirror_serve_refused_versions{domain}          versions of the domain (still in its
                                                   index) whose last fill was refused: the
                                                   object is not what its manifest and
                                                   provenance name (0 normally; back to 0 when
                                                   a fill of each succeeds or it leaves the index)
What the air-gapped CronJobs recorded in the bucket (mirror.airgap.records), read each poll:
    mirror_import_last_timestamp_seconds           when the last `transfer import` ended
    mirror_import_last_success_timestamp_seconds   when the last one that imported ended
    mirror_import_last_result{result}              1 for the last import's result
    mirror_import_last_sequence                    the set it imported (or found imported)
    mirror_import_sets_total{result}               imports by result (imported,
                                                   already_imported, refused, failed)
    mirror_values_link_expiry_timestamp_seconds{domain,version,url_mode}
                                                   when the link in the domain's values file
                                                   expires (only links that do)
    mirror_values_link_info{domain,version,url_mode}
                                                   1 for each values file's link
No label carries a secret or a client address: labels are domains, versions and codes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.registry import Collector

from mirror.airgap import layout
from mirror.timestamps import parse_zoned

CONTENT_TYPE = CONTENT_TYPE_LATEST
HOUR = 3600.0
FRESHNESS_BUCKETS = (
    *(60.0, 300.0, 900.0, 1800.0),
    *(HOUR * h for h in (1, 3, 6, 12, 24, 48, 72, 168, 336, 720)),
    float("inf"),
)


@dataclass(frozen=True)
class Served:
    """The version last served for a domain, and when the vendor exported it (Unix time)."""

    version: str
    exported: float | None


@dataclass(frozen=True)
class Gauges:
    """The state the gauges show, as the service sees it at scrape time."""

    ready: bool
    bucket_up: bool
    pointers_age: float | None
    pointers_from_disk: bool
    cache_bytes: int
    current: dict[str, str] = field(default_factory=dict)
    last_served: dict[str, Served] = field(default_factory=dict)
    now: float = 0.0
    newest: dict[str, str] = field(default_factory=dict)
    current_exported: dict[str, float] = field(default_factory=dict)
    refused: dict[str, int] = field(default_factory=dict)
    """Per domain read: how many of its listed versions are refused now."""
    imports: layout.ImportResults | None = None
    links: layout.RenderedLinks | None = None


class _StateCollector(Collector):
    def __init__(self, state: Callable[[], Gauges]) -> None:
        self.state = state

    def describe(self) -> list[GaugeMetricFamily]:
        return []  # read when scraped, not when registered (the service is not built yet)

    def collect(self) -> Iterator[Metric]:
        seen = self.state()
        yield _gauge("ready", "1 once every domain's current version is verified", seen.ready)
        yield _gauge("bucket_up", "1 when the last read of the pointers worked", seen.bucket_up)
        if seen.pointers_age is not None:
            yield _gauge(
                "pointers_age_seconds", "Seconds since the pointers were read", seen.pointers_age
            )
        yield _gauge(
            "pointers_from_disk",
            "1 while serving on pointers an earlier run saved",
            seen.pointers_from_disk,
        )
        yield _gauge("cache_bytes", "Bytes of cached bundles", seen.cache_bytes)
        current = GaugeMetricFamily(
            "mirror_serve_current_info",
            "Each domain's current version",
            labels=["domain", "version"],
        )
        for domain, version in sorted(seen.current.items()):
            current.add_metric([domain, version], 1)
        yield current
        yield from _served(seen)
        yield from _versions(seen)
        yield from _imports(seen.imports)
        yield from _links(seen.links)


def _served(seen: Gauges) -> Iterator[GaugeMetricFamily]:
    last = GaugeMetricFamily(
        "mirror_serve_last_served_info",
        "The version last served per domain",
        labels=["domain", "version", "current"],
    )
    age = GaugeMetricFamily(
        "mirror_serve_served_version_age_seconds",
        "Age of the version last served since the vendor exported it",
        labels=["domain"],
    )
    for domain, served in sorted(seen.last_served.items()):
        current = seen.current.get(domain) == served.version  # now, not when it was served
        last.add_metric([domain, served.version, str(current).lower()], 1)
        if served.exported is not None:
            age.add_metric([domain], max(0.0, seen.now - served.exported))
    yield last
    yield age


def _versions(seen: Gauges) -> Iterator[GaugeMetricFamily]:
    newest = GaugeMetricFamily(
        "mirror_serve_newest_info",
        "Each domain's newest complete version",
        labels=["domain", "version"],
    )
    is_newest = GaugeMetricFamily(
        "mirror_serve_current_is_newest",
        "1 when the domain's current version is its newest",
        labels=["domain"],
    )
    age = GaugeMetricFamily(
        "mirror_serve_current_version_age_seconds",
        "Age of the current version since the vendor exported it",
        labels=["domain"],
    )
    for domain, version in sorted(seen.newest.items()):
        newest.add_metric([domain, version], 1)
        is_newest.add_metric([domain], float(seen.current.get(domain) == version))
    for domain, exported in sorted(seen.current_exported.items()):
        age.add_metric([domain], max(0.0, seen.now - exported))
    refused = GaugeMetricFamily(
        "mirror_serve_refused_versions",
        "Versions of the domain whose last fill was refused (the object is not what its "
        "manifest and provenance name)",
        labels=["domain"],
    )
    for domain, count in sorted(seen.refused.items()):
        refused.add_metric([domain], count)
    yield from (newest, is_newest, age, refused)


def _imports(
    found: layout.ImportResults | None,
) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
    """The bucket's import results (nothing before the first recorded import)."""
    if found is None:
        return
    yield _gauge(
        "last_timestamp_seconds", "When the last import ended", _unix(found.last_at), "import"
    )
    if found.last_success_at:
        yield _gauge(
            "last_success_timestamp_seconds",
            "When the last import that imported ended",
            _unix(found.last_success_at),
            "import",
        )
    if found.last_sequence is not None:
        yield _gauge("last_sequence", "The set the last import took", found.last_sequence, "import")
    last = GaugeMetricFamily(
        "mirror_import_last_result", "1 for the last import's result", labels=["result"]
    )
    sets = CounterMetricFamily(
        "mirror_import_sets", "Imports recorded in the bucket, by result", labels=["result"]
    )
    for result in layout.RESULTS:
        last.add_metric([result], float(found.last_result == result))
        sets.add_metric([result], found.counts.get(result, 0))
    yield from (last, sets)


def _links(found: layout.RenderedLinks | None) -> Iterator[GaugeMetricFamily]:
    info = GaugeMetricFamily(
        "mirror_values_link_info",
        "Each values file's link",
        labels=["domain", "version", "url_mode"],
    )
    expiry = GaugeMetricFamily(
        "mirror_values_link_expiry_timestamp_seconds",
        "When the link in a domain's values file expires",
        labels=["domain", "version", "url_mode"],
    )
    for domain, link in sorted(found.domains.items()) if found is not None else []:
        labels = [domain, link.version, link.url_mode]
        info.add_metric(labels, 1)
        if link.expires_at:
            expiry.add_metric(labels, _unix(link.expires_at))
    yield from (info, expiry)


def _unix(text: str) -> float:
    try:
        return parse_zoned(text).timestamp()
    except ValueError:
        return 0.0


def _gauge(name: str, help_text: str, value: float, prefix: str = "serve") -> GaugeMetricFamily:
    return GaugeMetricFamily(f"mirror_{prefix}_{name}", help_text, value=float(value))


class ServeMetrics:
    """The counters the service increments, and the gauges read from `state` when scraped."""

    def __init__(self, state: Callable[[], Gauges]) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.responses = self._counter("responses", "Responses by HTTP status", "code")
        self.bytes_served = self._counter("bytes_served", "Body bytes sent")
        self.served = self._counter(
            "served", "Bundle responses per version", "domain", "version", "current"
        )
        self.hits = self._counter("cache_hits", "Bundle requests served from the verified cache")
        self.fills = self._counter("cache_fills", "Bundles fetched from the bucket and verified")
        self.evictions = self._counter("cache_evictions", "Bundles evicted to fit cache_max")
        self.dropped = self._counter("cache_dropped", "Cached files found damaged and dropped")
        self.refused = self._counter(
            "refused", "Objects that did not match their manifest", "domain", "version"
        )
        self.cut = self._counter("clients_cut", "Clients cut after serve.idle_timeout")
        self.freshness = Histogram(
            "mirror_serve_freshness_seconds",
            "From the vendor's export of a version to its first serve from this cache",
            buckets=FRESHNESS_BUCKETS,
            registry=self.registry,
        )
        self.registry.register(_StateCollector(state))

    def _counter(self, name: str, help_text: str, *labels: str) -> Counter:
        return Counter(f"mirror_serve_{name}", help_text, labels, registry=self.registry)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
