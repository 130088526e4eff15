"""Prometheus metrics of `mirror serve` (its own registry, served on `/metrics`).

Counters (since start):
    mirror_serve_responses_total{code}            every response, by HTTP status
    mirror_serve_bytes_served_total                body bytes sent
    mirror_serve_served_total{domain,version,current}
                                                   bundle responses (200, 206) per version,
                                                   `current` "true" when it was current then
    mirror_serve_cache_hits_total                  bundle requests found verified in the cache
    mirror_serve_cache_fills_total                 bundles fetched from the bucket and verified
    mirror_serve_cache_evictions_total             bundles removed to stay under cache_max
    mirror_serve_cache_dropped_total               cached files found damaged and dropped
    mirror_serve_refused_total{domain,version}     objects that did not match their manifest
    mirror_serve_clients_cut_total                 clients cut after serve.idle_timeout
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
    mirror_serve_served_version_age_seconds{domain}
                                                   age of that version since the vendor
                                                   exported it (its provenance, else manifest)
No label carries a secret or a client address: labels are domains, versions and codes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.registry import Collector

CONTENT_TYPE = CONTENT_TYPE_LATEST


@dataclass(frozen=True)
class Served:
    """The version last served for a domain, and when the vendor exported it (Unix time)."""

    version: str
    current: bool
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


class _StateCollector(Collector):
    def __init__(self, state: Callable[[], Gauges]) -> None:
        self.state = state

    def describe(self) -> list[GaugeMetricFamily]:
        return []  # read when scraped, not when registered (the service is not built yet)

    def collect(self) -> Iterator[GaugeMetricFamily]:
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
        last.add_metric([domain, served.version, str(served.current).lower()], 1)
        if served.exported is not None:
            age.add_metric([domain], max(0.0, seen.now - served.exported))
    yield last
    yield age


def _gauge(name: str, help_text: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(f"mirror_serve_{name}", help_text, value=float(value))


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
        self.registry.register(_StateCollector(state))

    def _counter(self, name: str, help_text: str, *labels: str) -> Counter:
        return Counter(f"mirror_serve_{name}", help_text, labels, registry=self.registry)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
