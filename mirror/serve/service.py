"""The service's state and decisions between the socket and the cache: which version a route
names, whether the service is ready, what the pointers are, and the poller that keeps them.

Promises:
- The pointers are read at start and then every `serve.poll_interval`; credentials the
  store refuses at that first read end the service (`fatal`: exit 4, its error the one
  line said, nothing saved); a read that fails keeps the pointers read before (or, right
  after a restart, the ones saved in `CACHE_DIR/pointers.json`), and says so
  (`bucket_error`, the status page, the `mirror_serve_bucket_up` and
  `mirror_serve_pointers_from_disk` gauges).
- After each read (in a thread of its own, mirror.serve.poller: fills never delay a read)
  every domain's current version and rollback target are filled, then the rest of the cache
  is verified again, then the cache is trimmed to `cache_max` (never a current version or a
  rollback target); after each fill too (never the bundle just filled). A `cache_max` below
  what must be kept is a warning once and a line on the status page.
- `health` is how the last call to the store ended, a read or a fill, with its time: what
  the status page says of the store.
- Ready (`/readyz`) once every domain's current version is cached and verified (a domain
  with no current version has nothing to wait for); not ready says why (a refused version:
  the refusal, until a fill of it succeeds), and so does the status page. Not ready from
  SIGTERM on (`draining`). A served domain with no index in the bucket is a warning once
  and a line on the status page. Once a domain's current version was
  ready, a promote or a rollback does not take the service out of rotation while the new
  one fills: every replica would leave at once and the Service would be empty; a request
  for the new version waits for its one fill instead.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from mirror.airgap import records
from mirror.config import ServeSettings
from mirror.errors import AuthError, IntegrityError, MirrorError
from mirror.serve import pointers as pointer_file
from mirror.serve.bucket import ServeBucket
from mirror.serve.cache import Cache, Entry
from mirror.serve.health import StoreHealth
from mirror.serve.metrics import Gauges, Served, ServeMetrics
from mirror.serve.pointers import DomainView, Listed, Pointers, cache_short, read_pointers
from mirror.serve.poller import Poller
from mirror.serve.routes import BundleRoute, Refusal, bundle_path
from mirror.serve.seen import LastServed
from mirror.serve.supply import Supply, Trust
from mirror.timestamps import parse_zoned, utcnow

log = logging.getLogger(__name__)

RECENT = 20
RETRY_AFTER = 10
"""Seconds a 503 asks the client to wait before asking again."""


@dataclass(frozen=True)
class Fetch:
    """One response, as the log line and the status page's last fetches show it."""

    at: datetime
    client: str
    method: str
    path: str
    status: int
    bytes: int
    seconds: float
    domain: str | None = None
    version: str | None = None


class Warned:
    """What the reads of the pointers warned about, each said once while it lasts (the
    status page shows it for as long)."""

    def __init__(self) -> None:
        self.unindexed: set[str] = set()
        self.ignored: set[str] = set()
        self.short: str | None = None

    def domains(self, found: Pointers) -> None:
        """A served domain without an index in the bucket; a name in the bucket with an
        index that is no domain name."""
        missing = {d for d, view in found.domains.items() if not view.indexed}
        for domain in sorted(missing - self.unindexed):
            log.warning(
                "%s has no index.json in the bucket: nothing to serve for it (check "
                "serve.domains, or import a version of it)",
                domain,
                extra={"domain": domain},
            )
        for name in sorted(set(found.ignored) - self.ignored):
            log.warning("ignoring %r in the bucket: it has an index but is no domain name", name)
        self.unindexed, self.ignored = missing, set(found.ignored)

    def cache(self, short: str | None) -> None:
        """serve.cache_max below what must be kept (`short` says by how much, else None)."""
        if short is not None and self.short is None:
            log.warning("%s", short)
        self.short = short


class Service:
    """One `mirror serve`: the bucket, the cache, the pointers and the poller."""

    def __init__(
        self, settings: ServeSettings, bucket: ServeBucket, trust: Trust, *, url_mode: str
    ) -> None:
        self.settings = settings
        self.bucket = bucket
        self.cache = Cache(settings.cache_dir, settings.cache_max)
        self.metrics = ServeMetrics(lambda: gauges_of(self))
        self.health = StoreHealth()
        self.supply = Supply(
            self.cache,
            bucket,
            trust,
            on_refused=self._refused,
            on_fill=self._filled,
            hold=settings.poll_interval,
            health=self.health,
        )
        self.pointers = Pointers()
        self.pointers_from_disk = False
        self.bucket_error: str | None = None
        self.recent: deque[Fetch] = deque(maxlen=RECENT)
        self.last_served = LastServed(settings.cache_dir)
        """What readers see: each domain's version last served, kept across restarts."""
        self.stop = threading.Event()
        self.draining = threading.Event()
        """Set on SIGTERM: not ready from then on (mirror.serve.run)."""
        self.polls = 0
        self._polled = threading.Condition()
        self.once_ready: set[str] = set()
        """The domains whose current version was cached and verified at some settle."""
        self.records = records.Shown(url_mode)
        """What the CronJobs recorded for monitoring (mirror.airgap.records), read each poll;
        the links shown are those in force under `url_mode` (target.url_mode)."""
        self._first_served = threading.Lock()
        self.fatal: AuthError | None = None
        """The store refused the credentials at the first read: `mirror serve` exits 4."""
        self.refusals: dict[tuple[str, str], str] = {}
        """Why a version was refused (domain, label): /readyz and the status page say it."""
        self.warned = Warned()
        self.poller = Poller(self)

    @property
    def pointers_path(self) -> str:
        return str(self.settings.cache_dir / "pointers.json")

    def start(self) -> None:
        """Open the cache (nothing in it verified yet; CacheInUse when another process has
        it) and load the saved pointers and what was last served."""
        self.cache.open()
        self.last_served.load()
        saved = pointer_file.load(self.settings.cache_dir / "pointers.json")
        if saved is not None:
            self.pointers, self.pointers_from_disk = saved, True
            self.warned.cache(self.cache_short())

    def halt(self) -> None:
        """Stop the poller's threads (at once, not at the end of their wait)."""
        self.stop.set()
        self.poller.halt()

    def close(self) -> None:
        self.halt()
        self.cache.close()

    # ---- the poller ------------------------------------------------------------------------

    def poll(self) -> bool:
        """Read the pointers once; True when the bucket answered."""
        try:
            found = read_pointers(self.bucket, self.settings.domains, self.pointers)
        except MirrorError as exc:
            if not self._first_refused(exc):
                self._bucket_failed(str(exc))
            return False
        if self._first_refused(found.refused):
            return False
        self.pointers, self.pointers_from_disk = found, False
        self.warned.domains(found)
        self.warned.cache(self.cache_short())
        if found.errors:
            self._bucket_failed("; ".join(f"{d}: {e}" for d, e in sorted(found.errors.items())))
        else:
            self.bucket_error = None
            self.health.answered()
        pointer_file.save(self.settings.cache_dir / "pointers.json", found)
        self.records.read(self.bucket)
        return not found.errors

    def _first_refused(self, error: MirrorError | None) -> bool:
        """Credentials the store refuses at the first read are a mistake to report (exit 4),
        not an outage to serve through; later, or a store that does not answer, is. True
        when it is that mistake: the read then changes nothing (no pointers saved) and says
        nothing (no "serving what was read before": it is about to exit, and its fatal
        error is the one line)."""
        if self.polls == 0 and isinstance(error, AuthError):
            self.fatal = error
            return True
        return False

    def cache_short(self) -> str | None:
        return cache_short(self.pointers, self.settings.cache_max)

    def _bucket_failed(self, error: str) -> None:
        self.health.failed(error)
        if self.bucket_error is None:
            log.warning(
                "cannot read the pointers from the bucket; serving what was read before: %s", error
            )
        self.bucket_error = error

    def settle(self) -> None:
        """Fill every current version and rollback target, verify the rest, trim the cache."""
        for view in list(self.pointers.domains.values()):
            for label in (view.current, view.rollback):
                if label is not None and label in view.versions:
                    self._ensure_quietly(view.versions[label])
        for entry in list(self.cache.entries.values()):
            if (
                entry.fingerprint is None  # hashed once (a recovered one waits for its vouch)
                and not self.stop.is_set()
                and not self.cache.verify(entry.sha256)
            ):
                self.metrics.dropped.inc()
        self.once_ready |= {d for d, v in self.pointers.domains.items() if self._current_cached(v)}
        evicted = self.cache.evict(self.protected())
        self.metrics.evictions.inc(len(evicted))
        self.cache.persist()  # when each bundle was last served, for the order after a restart

    def _ensure_quietly(self, listed: Listed) -> None:
        try:
            self.supply.ensure(listed)
        except MirrorError as exc:
            log.warning(
                "%s", exc, extra={"domain": listed.ref.domain, "version": str(listed.ref.label)}
            )

    def run_poller(self) -> None:
        """Read the pointers and settle after each read until `stop` (mirror.serve.poller)."""
        self.poller.run()

    def settled(self) -> None:
        """A settle after a read is done (`wait_polled` counts them)."""
        with self._polled:
            self.polls += 1
            self._polled.notify_all()

    def protected(self) -> set[str]:
        found: set[str] = set()
        for view in self.pointers.domains.values():
            found |= view.protected()
        return found

    # ---- decisions -------------------------------------------------------------------------

    def resolve(self, route: BundleRoute) -> Listed | Refusal:
        """The version a bundle route names, or why there is none (`resolve`)."""
        return resolve(self.pointers, route)

    def is_current(self, listed: Listed) -> bool:
        view = self.pointers.domains.get(listed.ref.domain)
        return view is not None and view.current == listed.ref.label

    def not_ready(self) -> str | None:
        """Why the service is not ready, or None when it is (module docstring)."""
        if self.draining.is_set():
            return "draining: stopping once the responses under way are sent"
        if not self.pointers.domains:
            return "not ready: the bucket has not been read yet"
        for domain, view in sorted(self.pointers.domains.items()):
            if view.current is None or domain in self.once_ready:
                continue
            if view.current not in view.versions:
                return f"{domain}'s current version {view.current} is not in its index"
            if not self._current_cached(view):
                refused = self.refusals.get((domain, view.current))
                if refused is not None:
                    return f"{domain}'s current version {view.current} was refused: {refused}"
                return f"{domain}'s current version {view.current} is not cached and verified yet"
        return None

    def _current_cached(self, view: DomainView) -> bool:
        listed = view.versions.get(view.current) if view.current else None
        entry = self.cache.get(listed.ref.sha256) if listed is not None else None
        return entry is not None and entry.verified

    def wait_polled(self, count: int, timeout: float) -> bool:
        """Block until `count` polls have finished (tests, start-up)."""
        with self._polled:
            return self._polled.wait_for(lambda: self.polls >= count, timeout)

    # ---- what happened ---------------------------------------------------------------------

    def _filled(self, entry: Entry) -> None:
        """A fill is in: count it and make room at once (never for the one just filled)."""
        self.metrics.fills.inc()
        for pair in entry.versions:
            self.refusals.pop(pair, None)
        evicted = self.cache.evict(self.protected() | {entry.sha256})
        self.metrics.evictions.inc(len(evicted))

    def _refused(self, listed: Listed, error: IntegrityError) -> None:
        self.metrics.refused.labels(listed.ref.domain, str(listed.ref.label)).inc()
        self.refusals[(listed.ref.domain, str(listed.ref.label))] = error.message

    def served(self, listed: Listed, entry: Entry) -> None:
        """A GET of the bundle (whole or a range) is answered: what readers see now. A HEAD
        sends no docs and is not counted."""
        current = self.is_current(listed)
        domain, label = listed.ref.domain, str(listed.ref.label)
        self.metrics.served.labels(domain, label, str(current).lower()).inc()
        self.last_served.served(domain, Served(label, exported_time(entry)))

    def first_served(self, listed: Listed, entry: Entry) -> None:
        """A 200 GET sent every byte of the bundle: the freshness histogram's "first served"
        (once per version); a HEAD or a range is no pod receiving the docs."""
        domain, label = listed.ref.domain, str(listed.ref.label)
        exported = exported_time(entry)
        key = f"{domain}/{label}"
        with self._first_served:  # one observation per version, however many serve it at once
            if key in entry.first_served:
                return
            entry.first_served[key] = now = time.time()
            if exported is not None:
                self.metrics.freshness.observe(max(0.0, now - exported))
            self.cache.persist()  # counted once across restarts too

    def record(self, fetch: Fetch) -> None:
        self.metrics.responses.labels(str(fetch.status)).inc()
        self.metrics.bytes_served.inc(fetch.bytes)
        self.recent.append(fetch)


def current_labels(views: Iterable[DomainView]) -> dict[str, str]:
    return {view.domain: view.current for view in views if view.current is not None}


def newest_labels(views: Iterable[DomainView]) -> dict[str, str]:
    """Each domain's newest complete version (mirror.versions orders the labels)."""
    return {
        view.domain: str(max(listed.ref.label for listed in view.versions.values()))
        for view in views
        if view.versions
    }


def exported_time(entry: Entry) -> float | None:
    """When the vendor exported the bundle (its provenance's completion, else the manifest's
    export time), as Unix time; None when neither is known."""
    for key in ("completed_at", "exported_at"):
        value = entry.provenance.get(key)
        if isinstance(value, str) and value:
            try:
                return parse_zoned(value).timestamp()
            except ValueError:
                continue
    return None


def gauges_of(service: Service) -> Gauges:
    """The state the gauges show, read at scrape time."""
    read_at = service.pointers.read_at
    return Gauges(
        ready=service.not_ready() is None,
        bucket_up=service.bucket_error is None and not service.pointers_from_disk,
        pointers_age=(utcnow() - read_at).total_seconds() if read_at else None,
        pointers_from_disk=service.pointers_from_disk,
        cache_bytes=service.cache.total(),
        current=current_labels(service.pointers.domains.values()),
        last_served=service.last_served.snapshot(),
        now=time.time(),
        newest=newest_labels(service.pointers.domains.values()),
        current_exported=_current_exported(service),
        refused=_refused_now(service),
        imports=service.records.imports,
        links=service.records.links,
    )


def _current_exported(service: Service) -> dict[str, float]:
    """When the vendor exported each domain's current version (once it is cached)."""
    found: dict[str, float] = {}
    for view in service.pointers.domains.values():
        listed = view.versions.get(view.current) if view.current else None
        entry = service.cache.get(listed.ref.sha256) if listed is not None else None
        exported = exported_time(entry) if entry is not None else None
        if exported is not None:
            found[view.domain] = exported
    return found


def _refused_now(service: Service) -> dict[str, int]:
    """Per domain read: its versions still in the index whose last fill was refused."""
    refused = list(service.refusals)  # a copy: fills and refusals change it meanwhile
    return {
        domain: sum(1 for d, label in refused if d == domain and label in view.versions)
        for domain, view in service.pointers.domains.items()
    }


def resolve(pointers: Pointers, route: BundleRoute) -> Listed | Refusal:
    """The version a bundle route names, or a 404 line saying why there is none; 503
    (ask again) while the domain's pointers have never been read: a 404 is final to
    the vendor's pod, and before the first read nothing says the domain is not served."""
    view = pointers.domains.get(route.domain)
    if view is None and pointers.read_at is None:
        return Refusal(503, "not ready: the bucket has not been read yet", RETRY_AFTER)
    if view is None and route.domain in pointers.errors:
        error = pointers.errors[route.domain]
        return Refusal(
            503, f"{route.domain} cannot be read from the bucket now: {error}", RETRY_AFTER
        )
    if view is None:
        return Refusal(404, f"no domain {route.domain} is served here")
    label = route.label or view.current
    if label is None:
        return Refusal(404, f"{route.domain} has no current version")
    listed = view.versions.get(label)
    if listed is None:
        return Refusal(404, f"no version {label} of {route.domain}")
    if listed.ref.format != route.format:
        where = bundle_path(route.domain, route.label, listed.ref.format)
        return Refusal(
            404, f"version {label} of {route.domain} is a {listed.ref.format} bundle: {where}"
        )
    return listed
