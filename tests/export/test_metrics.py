"""The metrics registry and the /metrics + /healthz listener, over real HTTP on loopback."""

from __future__ import annotations

import logging
import platform
import socket
import struct
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from sqlalchemy import select

from mirror import __version__
from mirror.config import settings_from_dict
from mirror.errors import ConfigError
from mirror.export.daemon import measure_store
from mirror.export.metrics import (
    OUTCOMES,
    DaemonMetrics,
    MetricsServer,
    last_success_times,
    newest_refused,
    overdue_leases,
    parse_listen,
)
from mirror.outbound.pack import Selection, pack
from mirror.store.app import App
from mirror.store.db import Database
from mirror.store.models import Bundle, ExportRun, RunState, SiteCheck
from tests.fixtures.s3 import new_key_pair, transfer_config
from tests.fixtures.versions import add_version


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def served(clock: FakeClock) -> Iterator[tuple[DaemonMetrics, str]]:
    metrics = DaemonMetrics(stuck_after=60, clock=clock)
    server = MetricsServer(metrics, "127.0.0.1", 0).start()
    host, port = server.address
    try:
        yield metrics, f"http://{host}:{port}"
    finally:
        server.stop()


def test_healthz_503_until_ready_then_200_then_503_when_stuck(
    served: tuple[DaemonMetrics, str], clock: FakeClock
) -> None:
    metrics, url = served
    answer = httpx.get(f"{url}/healthz")
    assert answer.status_code == 503
    assert "recovery" in answer.json()["reason"]
    metrics.set_ready()
    assert httpx.get(f"{url}/healthz").status_code == 503
    metrics.tick()
    assert httpx.get(f"{url}/healthz").status_code == 200
    clock.now += 61
    answer = httpx.get(f"{url}/healthz")
    assert answer.status_code == 503
    assert "stuck" in answer.json()["reason"]
    metrics.tick()
    assert httpx.get(f"{url}/readyz").status_code == 200
    assert httpx.get(f"{url}/nope").status_code == 404


def test_metrics_show_the_figures(served: tuple[DaemonMetrics, str]) -> None:
    metrics, url = served
    metrics.record_outcome("docs.example.com", "stored")
    metrics.record_outcome("docs.example.com", "deferred")
    metrics.download_bytes.labels(domain="docs.example.com").inc(4096)
    metrics.download_seconds.observe(2.5)
    metrics.runs_in_state.labels(state="downloading").set(2)
    metrics.store_bytes.set(123456)
    metrics.start_budget_remaining.set(7)
    text = httpx.get(f"{url}/metrics").text
    assert 'mirror_runs_total{domain="docs.example.com",outcome="stored"} 1.0' in text
    assert 'mirror_runs_total{domain="docs.example.com",outcome="deferred"} 1.0' in text
    assert 'mirror_download_bytes_total{domain="docs.example.com"} 4096.0' in text
    assert "mirror_download_seconds_count 1.0" in text
    assert 'mirror_runs_in_state{state="downloading"} 2.0' in text
    assert "mirror_store_bytes 123456.0" in text
    assert "mirror_start_budget_remaining 7.0" in text
    assert 'mirror_last_success_timestamp_seconds{domain="docs.example.com"}' in text


def test_registries_are_separate() -> None:
    first, second = DaemonMetrics(), DaemonMetrics()
    first.record_outcome("a.example.com", "failed")
    assert b"a.example.com" not in second.render()


def test_parse_listen() -> None:
    assert parse_listen("") is None
    assert parse_listen("127.0.0.1:9464") == ("127.0.0.1", 9464)
    assert parse_listen("[::1]:0") == ("::1", 0)
    with pytest.raises(ConfigError):
        parse_listen("127.0.0.1:99999")


def test_busy_port_is_a_config_error(served: tuple[DaemonMetrics, str]) -> None:
    _metrics, url = served
    port = int(url.rsplit(":", 1)[1])
    with pytest.raises(ConfigError, match="cannot listen"):
        MetricsServer(DaemonMetrics(), "127.0.0.1", port)


def test_ipv6_loopback() -> None:
    try:
        server = MetricsServer(DaemonMetrics(), "::1", 0).start()
    except ConfigError:
        pytest.skip("no IPv6 loopback here")
    try:
        _host, port = server.address
        assert httpx.get(f"http://[::1]:{port}/healthz").status_code == 503
    finally:
        server.stop()


def test_last_success_times_come_from_the_index(tmp_path: Path) -> None:
    database = Database(f"sqlite:///{tmp_path}/index.db")
    database.upgrade()
    at = datetime(2026, 11, 20, 8, 30, tzinfo=UTC)
    rows = [
        ("a.example.com", RunState.STORED, at - timedelta(days=1)),
        ("a.example.com", RunState.UNCHANGED, at),
        ("a.example.com", RunState.FAILED, at + timedelta(hours=1)),
        ("b.example.com", RunState.FAILED, at),
        ("gone.example.com", RunState.STORED, at),
    ]
    with database.session() as session:
        for domain, state, finished in rows:
            session.add(ExportRun(domain=domain, state=state, active=False, finished_at=finished))
    with database.session() as session:
        found = last_success_times(session, ["a.example.com", "b.example.com", "c.example.com"])
    database.dispose()
    assert found == {"a.example.com": at.timestamp()}


def test_a_run_held_past_its_lease_is_overdue_and_a_released_one_is_not(tmp_path: Path) -> None:
    """Only an active run that still names a holder counts: live (0), expired (seconds past
    the expiry); a released lease, an ended run and a domain without a run are not there."""
    database = Database(f"sqlite:///{tmp_path}/index.db")
    database.upgrade()
    now = datetime(2026, 11, 20, 8, 30, tzinfo=UTC)
    rows = [
        ("live.example.com", True, "h:1:a", now + timedelta(seconds=20)),
        ("stuck.example.com", True, "h:2:b", now - timedelta(minutes=15)),
        ("released.example.com", True, None, None),
        ("ended.example.com", False, "h:3:c", now - timedelta(hours=2)),
    ]
    with database.session() as session:
        for domain, active, owner, expires in rows:
            session.add(
                ExportRun(
                    domain=domain,
                    state=RunState.DOWNLOADING if active else RunState.STORED,
                    active=active,
                    lease_owner=owner,
                    lease_expires_at=expires,
                )
            )
    with database.session() as session:
        found = overdue_leases(session, now)
    database.dispose()
    assert found == {"live.example.com": 0.0, "stuck.example.com": 900.0}
    metrics = DaemonMetrics()
    metrics.set_leases(["stuck.example.com", "other.example.com"], found)
    value = metrics.registry.get_sample_value
    assert value("mirror_run_lease_overdue_seconds", {"domain": "stuck.example.com"}) == 900.0
    assert value("mirror_run_lease_overdue_seconds", {"domain": "other.example.com"}) == 0.0


def test_seeded_series_exist_before_anything_happens(served: tuple[DaemonMetrics, str]) -> None:
    metrics, url = served
    metrics.seed(["a.example.com", "b.example.com"], {"a.example.com": 1_763_600_000.0})
    text = httpx.get(f"{url}/metrics").text
    for domain in ("a.example.com", "b.example.com"):
        for outcome in OUTCOMES:
            assert f'mirror_runs_total{{domain="{domain}",outcome="{outcome}"}} 0.0' in text
        assert f'mirror_download_bytes_total{{domain="{domain}"}} 0.0' in text
        assert f'mirror_run_lease_overdue_seconds{{domain="{domain}"}} 0.0' in text
    assert 'mirror_last_success_timestamp_seconds{domain="a.example.com"} 1.7636e+09' in text
    assert 'mirror_last_success_timestamp_seconds{domain="b.example.com"}' not in text
    assert 'mirror_runs_in_state{state="downloading"} 0.0' in text
    build = f'mirror_build_info{{python="{platform.python_version()}",version="{__version__}"}} 1.0'
    assert build in text


def test_each_site_has_its_gauges(served: tuple[DaemonMetrics, str], tmp_path: Path) -> None:
    """What each air-gapped site still needs, per site (measured at start and after each
    stored version)."""
    metrics, url = served
    document = transfer_config(tmp_path / "store", new_key_pair(tmp_path))
    document["sites"] = [{"name": "staging"}, {"name": "prod"}]
    app = App(settings_from_dict(document))
    try:
        add_version(app, "docs.example.com", "2026-11-20")
        pack(app, tmp_path / "set", Selection(site="staging"))
        measure_store(app, metrics)
    finally:
        app.close()
    text = httpx.get(f"{url}/metrics").text
    assert 'mirror_site_versions_waiting{site="prod"} 1.0' in text
    assert 'mirror_site_versions_waiting{site="staging"} 0.0' in text
    assert 'mirror_site_last_packed_sequence{site="staging"} 1.0' in text
    assert 'mirror_site_last_acknowledged_sequence{site="staging"} 0.0' in text
    assert 'mirror_site_lost_sets{site="prod"} 0.0' in text
    assert 'mirror_site_oldest_unacknowledged_age_seconds{site="prod"} 0.0' in text


def test_a_scraper_that_resets_mid_request_is_a_debug_line_not_a_traceback(
    served: tuple[DaemonMetrics, str],
    capfd: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The daemon's stderr is the journal: a client cut off mid-request (a scrape timed out)
    must not print socketserver's traceback there."""
    caplog.set_level(logging.DEBUG, logger="mirror.export.metrics")
    _, url = served
    host, port = httpx.URL(url).host, httpx.URL(url).port
    for _ in range(3):
        client = socket.create_connection((host, port or 80))
        client.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
        client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        client.close()  # an RST: the server's next read fails with a reset
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and "went away" not in caplog.text:
        time.sleep(0.05)
    assert "went away" in caplog.text
    assert httpx.get(f"{url}/healthz").status_code in (200, 503)
    err = capfd.readouterr().err
    assert "Exception occurred during processing of request" not in err  # socketserver's
    assert "Traceback" not in err


def test_failures_in_a_row_count_until_a_success(served: tuple[DaemonMetrics, str]) -> None:
    metrics, url = served
    metrics.seed(["a.example.com"], {})
    seen = []
    for outcome in ("failed", "deferred", "failed", "stored", "failed"):
        metrics.record_outcome("a.example.com", outcome)
        seen.append(
            metrics.registry.get_sample_value(
                "mirror_export_consecutive_failures", {"domain": "a.example.com"}
            )
        )
    assert seen == [1.0, 1.0, 2.0, 0.0, 1.0]
    text = httpx.get(f"{url}/metrics").text
    assert 'mirror_job_timeouts_total{domain="a.example.com"} 0.0' in text
    assert 'mirror_version_refused{domain="a.example.com"} 0.0' in text


def test_a_refusal_for_completeness_and_the_free_space_are_shown(
    served: tuple[DaemonMetrics, str], tmp_path: Path
) -> None:
    """The newest site check of a domain decides its refusal gauge; the store's disk, its
    free space."""
    metrics, _ = served
    document = transfer_config(tmp_path / "store", new_key_pair(tmp_path))
    app = App(settings_from_dict(document))
    try:
        add_version(app, "docs.example.com", "2026-11-20")
        with app.db.session() as session:
            sha256 = session.scalars(select(Bundle.sha256)).first()
            for status in ("ok", "refused"):
                session.add(_check("docs.example.com", str(sha256), status))
        with app.db.session() as session:
            refused = newest_refused(session, ["docs.example.com", "api.example.com"])
        measure_store(app, metrics)
    finally:
        app.close()
    assert refused == {"docs.example.com": True, "api.example.com": False}
    metrics.set_sites({}, refused)
    value = metrics.registry.get_sample_value
    assert value("mirror_version_refused", {"domain": "docs.example.com"}) == 1.0
    assert (value("mirror_store_free_bytes") or 0) > 0


def _check(domain: str, sha256: str, status: str) -> SiteCheck:
    return SiteCheck(
        domain=domain,
        bundle_sha256=sha256,
        status=status,
        pages=1,
        broken_links=0,
        missing_assets=0,
        report={},
        report_sha256="0" * 64,
    )
