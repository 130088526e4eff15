"""Prometheus metrics and `/healthz` for the daemon, on `daemon.listen`.

The daemon owns one `DaemonMetrics` (its own CollectorRegistry, so tests and
several daemons in one process never share counters). `/metrics` serves the
registry; `/healthz` (and `/readyz`) answer 200 once start-up recovery is done and
the scheduler loop has ticked recently, 503 before that or when the loop is stuck.
No label or value ever carries a secret: labels are domains, states and outcomes.

`seed` (called at start and on reload) makes every series exist before anything
happens: counters at 0 for each configured domain and outcome, run states at 0, and
`mirror_last_success_timestamp_seconds` from the index, so a restart neither hides a
domain's age from an alert nor makes `rate()` miss the first increment. Each scheduler
pass sets `mirror_run_lease_overdue_seconds` from the index (`overdue_leases`): a run
still held past its lease, by any replica, is seen by every replica.
`mirror_build_info{version, python}` says what is running.
"""

from __future__ import annotations

import json
import logging
import platform
import socket
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from http.server import BaseHTTPRequestHandler
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from mirror import __version__
from mirror.errors import ConfigError
from mirror.httpserver import QuietHTTPServer
from mirror.sites import SiteSummary
from mirror.store.models import ExportRun, RunState, SiteCheck

log = logging.getLogger(__name__)

OUTCOMES = ("stored", "unchanged", "failed", "deferred", "interrupted")
RUN_STATES = (
    RunState.PENDING,
    RunState.STARTED,
    RunState.COMPLETED,
    RunState.DOWNLOADING,
    RunState.DOWNLOADED,
)
DOWNLOAD_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, float("inf"))


class DaemonMetrics:
    """Every figure the daemon exports, plus the liveness state behind /healthz."""

    def __init__(self, *, stuck_after: float = 120.0, clock: Callable[[], float] = time.monotonic):
        self.registry = CollectorRegistry(auto_describe=True)
        self._run_series()
        self._download_series()
        self.runs_in_state = self._gauge(
            "mirror_runs_in_state", "Runs this daemon is working on, by state", "state"
        )
        self._site_gauges()
        self._transfer_site_gauges()
        self.store_bytes = self._gauge("mirror_store_bytes", "Bytes of blobs in the store")
        self.store_free_bytes = self._gauge(
            "mirror_store_free_bytes", "Bytes free on the file system that holds the store"
        )
        self.start_budget_remaining = self._gauge(
            "mirror_start_budget_remaining",
            "Vendor export starts still allowed in the current hour (shared by all domains)",
        )
        self.domains = self._gauge("mirror_domains", "Domains configured for scheduled export")
        self.ready_gauge = self._gauge("mirror_ready", "1 once start-up recovery is done")
        self.build = Info("mirror_build", "The running mirror and Python", registry=self.registry)
        self.build.info({"version": __version__, "python": platform.python_version()})
        self.stuck_after = stuck_after
        self._clock = clock
        self._ready = False
        self._last_tick: float | None = None
        self._lock = threading.Lock()

    def _run_series(self) -> None:
        """How runs ended, per domain and outcome, and what the loop survived."""
        self.last_success = self._gauge(
            "mirror_last_success_timestamp_seconds",
            "Unix time of the last run that stored or confirmed a bundle",
            "domain",
        )
        self.runs = self._counter(
            "mirror_runs", "Export runs ended by this daemon, by outcome", "domain", "outcome"
        )
        self.job_timeouts = self._counter(
            "mirror_job_timeouts",
            "Vendor jobs still unsettled after api.job_timeout (the run was deferred)",
            "domain",
        )
        self.loop_errors = self._counter(
            "mirror_daemon_loop_errors",
            "Errors the scheduler loop survived (a pass or one domain's bookkeeping), by type",
            "kind",
        )

    def _download_series(self) -> None:
        """Bundle bytes downloaded and the time each download took."""
        self.download_bytes = self._counter(
            "mirror_download_bytes", "Bundle bytes downloaded", "domain"
        )
        self.download_seconds = Histogram(
            "mirror_download_seconds",
            "Time spent downloading one bundle (per run and process)",
            buckets=DOWNLOAD_BUCKETS,
            registry=self.registry,
        )

    def _site_gauges(self) -> None:
        """The newest stored version's completeness, per domain."""
        self.version_pages = self._gauge(
            "mirror_version_pages",
            "Pages in the newest stored version's bundle (its completeness check)",
            "domain",
        )
        self.version_broken_links = self._gauge(
            "mirror_version_broken_links",
            "Broken internal links and missing assets in the newest stored version's bundle",
            "domain",
        )
        self.version_refused = self._gauge(
            "mirror_version_refused",
            "1 when the domain's newest downloaded bundle was refused for completeness",
            "domain",
        )
        self.consecutive_failures = self._gauge(
            "mirror_export_consecutive_failures",
            "Runs in a row that failed since the domain's last success (or this start)",
            "domain",
        )
        self.lease_overdue = self._gauge(
            "mirror_run_lease_overdue_seconds",
            "Seconds the domain's active run is still held past its lease's expiry (0: none)",
            "domain",
        )

    def _transfer_site_gauges(self) -> None:
        """Per air-gapped site (issue 22): what it still needs."""
        self.site_waiting = self._gauge(
            "mirror_site_versions_waiting", "Versions a site takes that no set carries yet", "site"
        )
        self.site_oldest_age = self._gauge(
            "mirror_site_oldest_unacknowledged_age_seconds",
            "Age of the oldest set packed for a site, not acknowledged and not lost (0: none)",
            "site",
        )
        self.site_last_packed = self._gauge(
            "mirror_site_last_packed_sequence", "The newest set packed for a site (0: none)", "site"
        )
        self.site_last_acknowledged = self._gauge(
            "mirror_site_last_acknowledged_sequence",
            "The newest set a site's receipt acknowledged (0: none)",
            "site",
        )
        self.site_lost = self._gauge("mirror_site_lost_sets", "Sets marked lost", "site")

    def set_transfer_sites(self, summaries: Iterable[SiteSummary]) -> None:
        """Each site's summary (`mirror.sites.summary`) as its gauges."""
        for site in summaries:
            self.site_waiting.labels(site=site.name).set(site.waiting)
            self.site_oldest_age.labels(site=site.name).set(site.oldest_age or 0)
            packed, acked = site.last_packed, site.last_acknowledged
            self.site_last_packed.labels(site=site.name).set(packed.sequence if packed else 0)
            self.site_last_acknowledged.labels(site=site.name).set(acked.sequence if acked else 0)
            self.site_lost.labels(site=site.name).set(len(site.lost))

    def _counter(self, name: str, documentation: str, *labels: str) -> Counter:
        return Counter(name, documentation, list(labels), registry=self.registry)

    def _gauge(self, name: str, documentation: str, *labels: str) -> Gauge:
        return Gauge(name, documentation, list(labels), registry=self.registry)

    def set_ready(self, ready: bool = True) -> None:
        with self._lock:
            self._ready = ready
        self.ready_gauge.set(1 if ready else 0)

    def tick(self) -> None:
        """Called by the scheduler loop on every pass; /healthz fails when it stops."""
        with self._lock:
            self._last_tick = self._clock()

    def health(self) -> tuple[bool, str]:
        """(healthy, reason) for /healthz."""
        with self._lock:
            ready, last_tick = self._ready, self._last_tick
        if not ready:
            return False, "starting: recovery not finished"
        if last_tick is None:
            return False, "scheduler loop has not run yet"
        age = self._clock() - last_tick
        if age > self.stuck_after:
            return False, f"scheduler loop stuck for {int(age)}s"
        return True, "ok"

    def record_outcome(self, domain: str, outcome: str) -> None:
        self.runs.labels(domain=domain, outcome=outcome).inc()
        if outcome in ("stored", "unchanged"):
            self.last_success.labels(domain=domain).set(time.time())
            self.consecutive_failures.labels(domain=domain).set(0)
        elif outcome == "failed":
            self.consecutive_failures.labels(domain=domain).inc()

    def seed(self, domains: Iterable[str], last_success: Mapping[str, float]) -> None:
        """Create every labelled series: 0 for counters of each domain and outcome and for
        each run state; the last success time of each domain the index knows one for."""
        for domain in domains:
            for outcome in OUTCOMES:
                self.runs.labels(domain=domain, outcome=outcome)
            self.download_bytes.labels(domain=domain)
            self.consecutive_failures.labels(domain=domain)
            self.version_refused.labels(domain=domain)
            self.job_timeouts.labels(domain=domain)
            self.lease_overdue.labels(domain=domain)
        for state in RUN_STATES:
            self.runs_in_state.labels(state=state)
        for domain, when in last_success.items():
            self.last_success.labels(domain=domain).set(when)

    def set_sites(
        self, sites: Mapping[str, tuple[int, int]], refused: Mapping[str, bool] | None = None
    ) -> None:
        """The newest site check of each domain: (pages, broken links + missing assets), and
        whether its newest check of all refused the bundle."""
        for domain, (pages, broken) in sites.items():
            self.version_pages.labels(domain=domain).set(pages)
            self.version_broken_links.labels(domain=domain).set(broken)
        for domain, was_refused in (refused or {}).items():
            self.version_refused.labels(domain=domain).set(1 if was_refused else 0)

    def set_leases(self, domains: Iterable[str], overdue: Mapping[str, float]) -> None:
        """Each domain's lease overdue time (`overdue_leases`); 0 for one not in it."""
        for domain in domains:
            self.lease_overdue.labels(domain=domain).set(overdue.get(domain, 0.0))

    def render(self) -> bytes:
        return generate_latest(self.registry)


def last_success_times(session: Session, domains: Iterable[str]) -> dict[str, float]:
    """Unix time of each domain's newest run that stored or confirmed a bundle (as
    `record_outcome` sets it), read from the index; domains without one are left out."""
    wanted = sorted(set(domains))
    found: dict[str, float] = {}
    for start in range(0, len(wanted), 500):
        rows = session.execute(
            select(ExportRun.domain, func.max(ExportRun.finished_at))
            .where(
                ExportRun.domain.in_(wanted[start : start + 500]),
                ExportRun.state.in_(RunState.SUCCESS),
            )
            .group_by(ExportRun.domain)
        )
        for domain, finished in rows:
            if isinstance(finished, datetime):
                found[domain] = finished.timestamp()
    return found


def newest_sites(session: Session, domains: Iterable[str]) -> dict[str, tuple[int, int]]:
    """(pages, broken links + missing assets) of each domain's newest stored site check."""
    wanted = set(domains)
    found: dict[str, tuple[int, int]] = {}
    rows = session.scalars(
        select(SiteCheck).where(SiteCheck.status != "refused").order_by(SiteCheck.id)
    )
    for check in rows:
        if check.domain in wanted:
            found[check.domain] = (check.pages, check.broken_links + check.missing_assets)
    return found


def newest_refused(session: Session, domains: Iterable[str]) -> dict[str, bool]:
    """Whether each domain's newest site check (of any status) refused its bundle."""
    wanted = sorted(set(domains))
    found = {domain: False for domain in wanted}
    rows = session.execute(
        select(SiteCheck.domain, SiteCheck.status)
        .where(SiteCheck.domain.in_(wanted))
        .order_by(SiteCheck.id)
    )
    for domain, status in rows:
        found[domain] = status == "refused"
    return found


def overdue_leases(session: Session, now: datetime) -> dict[str, float]:
    """Seconds past its lease's expiry of each domain's active run that still names a holder.

    A live holder renews its lease every third of `daemon.lease` and a replica takes an
    expired one over at its next pass, so a lease long past its expiry is a run nobody
    works on and nobody takes over: what the alert MirrorLeaseStuck is for. A released
    lease (no holder: a deferred run, resumable by anyone) is not overdue."""
    rows = session.execute(
        select(ExportRun.domain, ExportRun.lease_expires_at).where(
            ExportRun.active.is_(True), ExportRun.lease_owner.is_not(None)
        )
    )
    found: dict[str, float] = {}
    for domain, expires in rows:
        if isinstance(expires, datetime):
            found[domain] = max(0.0, (now - expires).total_seconds())
    return found


def parse_listen(listen: str) -> tuple[str, int] | None:
    """'HOST:PORT' or '[v6]:PORT' -> (host, port); '' -> None (metrics off)."""
    if not listen:
        return None
    host, _, port = listen.rpartition(":")
    host = host.strip("[]")
    try:
        number = int(port)
    except ValueError:
        raise ConfigError(f"daemon.listen: not HOST:PORT: {listen!r}") from None
    if not 0 <= number <= 65535:
        raise ConfigError(f"daemon.listen: port out of range in {listen!r}")
    return host, number


class _Server(QuietHTTPServer):
    metrics: DaemonMetrics


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/metrics":
            self._reply(200, self.server.metrics.render(), CONTENT_TYPE_LATEST)
        elif path in ("/healthz", "/readyz"):
            healthy, reason = self.server.metrics.health()
            body = json.dumps({"status": "ok" if healthy else "unavailable", "reason": reason})
            self._reply(200 if healthy else 503, body.encode() + b"\n", "application/json")
        elif path == "/":
            self._reply(200, b"mirror daemon: /metrics /healthz\n", "text/plain")
        else:
            self._reply(404, b"not found\n", "text/plain")

    def _reply(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("metrics http: " + format, *args)


class MetricsServer:
    """The HTTP listener; `address` is the bound (host, port) (port 0 picks a free one)."""

    def __init__(self, metrics: DaemonMetrics, host: str, port: int) -> None:
        server_class = _Server
        if ":" in host:

            class _Server6(_Server):
                address_family = socket.AF_INET6

            server_class = _Server6
        try:
            self._server = server_class((host, port), _Handler)
        except OSError as exc:
            raise ConfigError(
                f"daemon.listen: cannot listen on {host}:{port}: {exc.strerror or exc}",
                hint='choose a free port, or set daemon.listen = "" to turn metrics off',
            ) from None
        self._server.metrics = metrics
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 1.0},
            name="mirror-metrics",
            daemon=True,
        )

    @property
    def address(self) -> tuple[str, int]:
        host, port = self._server.server_address[:2]
        return str(host), int(port)

    def start(self) -> MetricsServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def start_metrics(listen: str, metrics: DaemonMetrics) -> MetricsServer | None:
    """The /metrics and /healthz listener on `daemon.listen`, started; None when it is off."""
    address = parse_listen(listen)
    if address is None:
        log.info("metrics listener off (daemon.listen is empty)")
        return None
    server = MetricsServer(metrics, *address).start()
    host, port = server.address
    url_host = f"[{host}]" if ":" in host else host
    log.info(
        "metrics listening",
        extra={"host": host, "port": port, "url": f"http://{url_host}:{port}/metrics"},
    )
    return server
