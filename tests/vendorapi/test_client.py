"""The vendor API client against the real simulator on loopback (and a scripted HTTP server for
answers the simulator never gives: non-JSON bodies, redirects, hang-ups)."""

from __future__ import annotations

import hashlib
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import certifi
import httpx
import pytest
from stamina.instrumentation import set_on_retry_hooks

from mirror import __version__
from mirror.config import settings_from_dict
from mirror.errors import (
    AuthError,
    ConfigError,
    IntegrityError,
    MirrorError,
    NotFound,
    OperationFailed,
    TemporaryFailure,
)
from mirror.httpserver import QuietHTTPServer
from mirror.logs import install_retry_log
from mirror.sim import Simulator
from mirror.vendorapi.client import (
    AUTH_HINT,
    BundleLink,
    ExportJob,
    VendorClient,
    job_id_problem,
    parse_agent_job,
    parse_count,
    parse_export_job,
    parse_number,
    parse_timestamp,
)
from mirror.vendorapi.transport import (
    DNS_ATTEMPTS,
    DNS_WAIT_MAX,
    StartRefused,
    build_http_client,
    name_resolution_error,
)
from tests.fixtures.daemon import wait_for

DOMAIN = "docs.example.com"


# --- helpers -------------------------------------------------------------------------------------


class FakeTime:
    """An injected clock and sleep: sleeping advances the clock and is recorded, never waits."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []
        self.on_sleep: Callable[[int], None] | None = None

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds
        if self.on_sleep is not None:
            self.on_sleep(len(self.sleeps))


def make_client(
    base_url: str,
    key: str,
    fake: FakeTime | None = None,
    *,
    project_id: str = "proj_sim",
    export_flow: Any = "global",
    **kwargs: Any,
) -> VendorClient:
    fake = fake or FakeTime()
    kwargs.setdefault("sleep", fake.sleep)
    kwargs.setdefault("clock", fake.clock)
    return VendorClient(
        httpx.Client(timeout=30),
        base_url=base_url,
        key=key,
        project_id=project_id,
        export_flow=export_flow,
        **kwargs,
    )


@pytest.fixture
def fake() -> FakeTime:
    return FakeTime()


@pytest.fixture
def client(sim: Simulator, fake: FakeTime) -> Iterator[VendorClient]:
    with make_client(sim.url, sim.key, fake) as vendor:
        yield vendor


@pytest.fixture
def project_client(sim: Simulator, fake: FakeTime) -> Iterator[VendorClient]:
    with make_client(sim.url, sim.key, fake, export_flow="project") as vendor:
        yield vendor


def wait_done(client: VendorClient, job_id: str, timeout: float = 60.0) -> ExportJob:
    deadline = time.monotonic() + timeout
    while True:
        job = client.export_status(job_id)
        if job.completed or job.failed:
            return job
        assert time.monotonic() < deadline, f"job still {job.status}"
        time.sleep(0.05)


def free_port() -> int:
    """A loopback port with nothing listening on it (connections are refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Scripted:
    """One scripted answer; status 0 means hang up after reading the request."""

    status: int
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)


class ScriptedServer:
    """A real HTTP server on loopback that answers from a script and records what it got."""

    def __init__(self, replies: list[Scripted], repeat_last: bool = True) -> None:
        self.replies = list(replies)
        self.repeat_last = repeat_last
        self.requests: list[tuple[str, str, dict[str, str]]] = []
        self._lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                with outer._lock:
                    outer.requests.append((self.command, self.path, dict(self.headers.items())))
                    if len(outer.replies) > 1 or not outer.repeat_last:
                        reply = outer.replies.pop(0)
                    else:
                        reply = outer.replies[0]
                if reply.status == 0:
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                self.send_response(reply.status)
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(reply.body)))
                self.end_headers()
                self.wfile.write(reply.body)

            do_GET = _answer
            do_POST = _answer

        self.server = QuietHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def scripted() -> Iterator[Callable[..., ScriptedServer]]:
    servers: list[ScriptedServer] = []

    def make(*replies: Scripted, repeat_last: bool = True) -> ScriptedServer:
        server = ScriptedServer(list(replies), repeat_last)
        servers.append(server)
        return server

    yield make
    for server in servers:
        server.close()


JSON = {"Content-Type": "application/json"}
HTML = {"Content-Type": "text/html"}


# --- pure parsing --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (42, 42.0),
        (42.5, 42.5),
        ("42", 42.0),
        ("42%", 42.0),
        (" 42.5 % ", 42.5),
        (None, None),
        ("", None),
        ("abc", None),
        ({"done": 1}, None),
        ([42], None),
        (True, None),
        (float("nan"), None),
    ],
)
def test_parse_number_is_tolerant(value: object, expected: float | None) -> None:
    assert parse_number(value) == expected


def test_parse_count_takes_whole_counts() -> None:
    assert parse_count("128") == 128
    assert parse_count(128.0) == 128
    assert parse_count("n/a") is None and parse_count(None) is None  # not reported
    assert parse_count(2**62) == 2**62


@pytest.mark.parametrize(
    "value",
    [-1, 2**63, 10**23, 1e30, float("inf"), "-5", "99999999999999999999", 10**400, "9" * 400],
)
def test_a_count_no_count_can_be_is_refused_never_taken_for_absent(value: object) -> None:
    """Past the one bound (no BIGINT holds it) or negative: exit 5 naming the field, never
    None (a `pageCount` taken for "not reported" turns the completeness check off)."""
    with pytest.raises(IntegrityError, match=r"the vendor reported pageCount .*no count can be"):
        parse_count(value, "pageCount")


def test_a_number_past_every_float_is_no_number_never_an_error() -> None:
    """`progress` and the like (trial37 D1): an int of 400 digits was an OverflowError."""
    assert parse_number(10**400) is None and parse_number("9" * 400) is None
    assert parse_number(-(10**400)) is None


def test_parse_timestamp_reads_iso8601_with_z_and_offsets() -> None:
    expected = datetime(2026, 11, 21, 10, 0, 0, tzinfo=UTC)
    assert parse_timestamp("2026-11-21T10:00:00Z") == expected
    assert parse_timestamp("2026-11-21T10:00:00.000Z") == expected
    assert parse_timestamp("2026-11-21T11:00:00+01:00") == expected
    assert parse_timestamp("2026-11-21T10:00:00") == expected
    assert parse_timestamp("yesterday") is None
    assert parse_timestamp(None) is None
    assert parse_timestamp(1700000000) is None


@pytest.mark.parametrize(
    "text",
    [
        "9999-12-31T23:59:59-01:00",
        "0001-01-01T00:00:00+01:00",
        "9999-12-31T23:59:59Z",
        "1969-12-31T23:59:59Z",
    ],
)
def test_a_time_outside_the_bound_is_no_time(text: str) -> None:
    """Past datetime's range after the offset (an OverflowError once ended `export run`), or
    outside the years any vendor answer means: the same as a time that is not there."""
    assert parse_timestamp(text) is None


def test_parse_export_job_reads_links_and_tolerates_the_rest() -> None:
    job = parse_export_job(
        {
            "jobId": "se_1",
            "status": "Completed",
            "progress": "100%",
            "bundleUrl": "https://s3.example/b.tar.gz?X-Amz-Signature=x",
            "expiresAt": "2026-11-21T10:00:00Z",
        },
        "se_1",
    )
    assert job is not None and job.completed and job.progress == 100.0
    assert job.bundle == BundleLink(
        "se_1",
        "https://s3.example/b.tar.gz?X-Amz-Signature=x",
        None,
        datetime(2026, 11, 21, 10, tzinfo=UTC),
    )
    odd = parse_export_job({"status": 7, "progress": {"x": 1}}, "se_2")
    assert odd is not None
    assert (odd.status, odd.progress, odd.page_count, odd.bundle) == ("unknown", None, None, None)
    assert not odd.completed and not odd.failed
    assert parse_export_job({"status": "queued"}) is None


def test_parse_agent_job_tolerates_missing_fields() -> None:
    job = parse_agent_job({"status": "active", "source": None}, "aj_1")
    assert (job.id, job.status, job.repository, job.ref, job.pr_link) == (
        "aj_1",
        "active",
        "",
        None,
        None,
    )
    assert not job.terminal


def test_bundle_link_expiry() -> None:
    now = datetime(2026, 11, 21, 10, tzinfo=UTC)
    link = BundleLink("j", "u", None, now + timedelta(seconds=60))
    assert not link.expired(now)
    assert link.expired(now, margin=120)
    assert link.expired(now + timedelta(seconds=61))
    assert not BundleLink("j", "u", None, None).expired(now)


# --- global flow ---------------------------------------------------------------------------------


def test_global_flow_start_status_bundle_and_download(sim: Simulator, client: VendorClient) -> None:
    job = client.start_export(DOMAIN, version="2026-11-21", paths=["index", "guides/page-001"])
    assert job.job_id.startswith("se_")
    assert job.status in ("queued", "running")
    assert sim.stats.starts[DOMAIN] == [job.job_id]

    done = wait_done(client, job.job_id)
    assert done.completed and done.progress == 100.0 and done.page_count
    assert done.bundle is None  # the global flow's status carries no link by default

    link = client.export_bundle(job.job_id)
    info = sim.bundle_info(job.job_id)
    assert link.job_id == job.job_id
    assert link.size_bytes == info["size"]
    assert link.expires_at is not None and link.expires_at > datetime.now(UTC)
    response = client.http.get(link.url)
    assert response.status_code == 200
    assert hashlib.sha256(response.content).hexdigest() == info["sha256"]

    fresh = client.fresh_link(job.job_id)
    assert fresh.url != link.url
    assert sim.stats.bundle_calls[job.job_id] == 2


def test_global_flow_uses_a_link_carried_by_the_status(
    sim: Simulator, client: VendorClient
) -> None:
    sim.set_faults(global_flow_bundle_in_status=True)
    job = client.start_export(DOMAIN)
    done = wait_done(client, job.job_id)
    assert done.bundle is not None
    assert done.bundle.size_bytes == sim.bundle_info(job.job_id)["size"]
    assert client.http.get(done.bundle.url).status_code == 200
    assert sim.stats.bundle_calls == {}


def test_bundle_before_completion_is_a_temporary_failure(
    sim_factory: Callable[..., Simulator], fake: FakeTime
) -> None:
    sim = sim_factory()
    sim.set_faults(hold_jobs=True)
    with make_client(sim.url, sim.key, fake) as client:
        job = client.start_export(DOMAIN)
        with pytest.raises(TemporaryFailure, match="has not finished yet"):
            client.export_bundle(job.job_id)
    assert fake.sleeps == []


def test_progress_as_strings_and_unknown_states_are_tolerated(
    sim_factory: Callable[..., Simulator],
) -> None:
    sim = sim_factory(queue_seconds=0, run_seconds=1)
    sim.set_faults(progress_as_string=True, unknown_state="rendering", hold_jobs=True)
    with make_client(sim.url, sim.key) as client:
        job = client.start_export(DOMAIN)
        running = wait_for(
            lambda: (
                (read := client.export_status(job.job_id)).progress and read.page_count and read
            ),
            60,
            "some progress and pages of the held job",
        )
        assert running.status == "rendering"
        assert not running.completed and not running.failed
        assert running.progress is not None and 0 < running.progress < 100
        assert isinstance(running.page_count, int) and running.page_count > 0
        sim.set_faults(unknown_state=None, hold_jobs=False)
        done = wait_done(client, job.job_id)
        assert done.completed and done.progress == 100.0


def test_failed_job_reports_the_vendor_error(sim: Simulator, client: VendorClient) -> None:
    sim.set_faults(fail_domains=[DOMAIN])
    job = wait_done(client, client.start_export(DOMAIN).job_id)
    assert job.failed
    assert job.error is not None and "timed out" in job.error


# --- project flow --------------------------------------------------------------------------------


def test_project_flow_takes_the_link_from_the_status(
    sim: Simulator, project_client: VendorClient
) -> None:
    job = project_client.start_export(DOMAIN)
    assert sim.stats.starts[DOMAIN] == [job.job_id]
    done = wait_done(project_client, job.job_id)
    assert done.completed
    assert done.progress is None and done.page_count is None  # absent in this flow
    assert done.bundle is not None and done.bundle.size_bytes == sim.bundle_info(job.job_id)["size"]

    link = project_client.export_bundle(job.job_id)
    fresh = project_client.fresh_link(job.job_id)
    assert link.url != fresh.url != done.bundle.url
    response = project_client.http.get(fresh.url)
    assert hashlib.sha256(response.content).hexdigest() == sim.bundle_sha256(job.job_id)
    assert sim.stats.bundle_calls == {}
    assert sim.stats.status_calls[job.job_id] >= 3


def test_project_flow_without_link_fields(sim: Simulator, project_client: VendorClient) -> None:
    sim.set_faults(omit_size=True)
    done = wait_done(project_client, project_client.start_export(DOMAIN).job_id)
    assert done.bundle is not None
    assert done.bundle.size_bytes is None and done.bundle.expires_at is None


def test_project_flow_bundle_of_failed_or_running_jobs(
    sim_factory: Callable[..., Simulator],
) -> None:
    sim = sim_factory()
    sim.set_faults(fail_domains=["bad.example.com"], hold_jobs=True)
    with make_client(sim.url, sim.key, export_flow="project") as client:
        running = client.start_export(DOMAIN)
        with pytest.raises(TemporaryFailure, match=r"is still (queued|running)"):
            client.export_bundle(running.job_id)
    fast = sim_factory()
    fast.set_faults(fail_domains=["bad.example.com"])
    with make_client(fast.url, fast.key, export_flow="project") as client:
        failed = wait_done(client, client.start_export("bad.example.com").job_id)
        assert failed.failed
        with pytest.raises(OperationFailed, match="failed at the vendor: Export failed"):
            client.export_bundle(failed.job_id)


def test_project_flow_needs_a_project_id(sim: Simulator) -> None:
    with make_client(sim.url, sim.key, project_id="", export_flow="project") as client:
        for call in (
            lambda: client.start_export(DOMAIN),
            lambda: client.export_status("se_1"),
            lambda: client.export_bundle("se_1"),
        ):
            with pytest.raises(ConfigError, match=r"api\.project_id") as caught:
                call()
            assert caught.value.exit_code == 2
    assert sim.stats.requests == 0


def test_project_flow_unknown_job_is_not_found(project_client: VendorClient) -> None:
    with pytest.raises(NotFound, match="No job exists with the provided ID for this deployment"):
        project_client.export_status("se_missing")


# --- vendor errors -------------------------------------------------------------------------------


def test_unknown_job_is_not_found_with_the_vendor_text(
    sim: Simulator, client: VendorClient, fake: FakeTime
) -> None:
    with pytest.raises(NotFound) as caught:
        client.export_status("se_missing")
    assert "No job exists with the provided ID" in str(caught.value)
    assert "se_missing" in str(caught.value)
    assert caught.value.exit_code == 3
    with pytest.raises(NotFound, match="No job exists"):
        client.export_bundle("se_missing")
    assert fake.sleeps == []


def test_wrong_key_is_an_auth_error_and_never_retried(sim: Simulator, fake: FakeTime) -> None:
    wrong = "mint_wrong_" + "k" * 24
    with make_client(sim.url, wrong, fake) as client, pytest.raises(AuthError) as caught:
        client.export_status("se_1")
    assert sim.stats.auth_failures == 1
    assert sim.stats.requests == 1
    assert fake.sleeps == []
    error = caught.value
    assert error.exit_code == 4 and error.hint == AUTH_HINT
    assert "HTTP 401" in str(error)
    for text in (str(error), repr(error), error.message, repr(client)):
        assert wrong not in text and sim.key not in text


def test_not_enabled_is_an_auth_error_keeping_the_vendor_text(
    sim: Simulator, client: VendorClient
) -> None:
    sim.set_faults(not_enabled_domains=[DOMAIN])
    with pytest.raises(AuthError, match="not enabled for this organization") as caught:
        client.start_export(DOMAIN)
    assert "api.key_file" in str(caught.value)
    assert sim.stats.start_attempts == {DOMAIN: 1}


def test_bad_request_is_a_config_error(sim: Simulator, client: VendorClient) -> None:
    sim.set_faults(bad_request_domains=[DOMAIN])
    with pytest.raises(ConfigError, match="not a reachable hostname") as caught:
        client.start_export(DOMAIN)
    assert caught.value.exit_code == 2


# --- retries -------------------------------------------------------------------------------------


def test_429_then_success_waits_the_retry_after(sim: Simulator) -> None:
    """Real time: the client sleeps the simulator's Retry-After (1 s) before trying again, and
    nothing else (what it asked to sleep is recorded: a busy machine only adds to the time)."""
    waits: list[float] = []

    def sleep(seconds: float) -> None:
        waits.append(seconds)
        time.sleep(seconds)

    with make_client(
        sim.url, sim.key, sleep=sleep, clock=time.monotonic, wait_initial=0.01, wait_jitter=0
    ) as client:
        job = client.start_export(DOMAIN)
        sim.set_faults(rate_limit_next=1, retry_after="1")
        began = time.monotonic()
        status = client.export_status(job.job_id)
        elapsed = time.monotonic() - began
    assert status.job_id == job.job_id
    assert sim.stats.status_calls[job.job_id] == 2
    assert len(waits) == 1 and 0.95 <= waits[0] <= 1.0 <= elapsed


def test_retry_after_http_date_is_the_minimum_wait(
    sim: Simulator, client: VendorClient, fake: FakeTime
) -> None:
    job = client.start_export(DOMAIN)
    when = datetime.now(UTC) + timedelta(seconds=30)
    sim.set_faults(rate_limit_next=1, retry_after=format_datetime(when, usegmt=True))
    assert client.export_status(job.job_id).job_id == job.job_id
    assert len(fake.sleeps) == 1
    assert 27 <= fake.sleeps[0] <= 31


def test_503s_are_retried_with_growing_backoff(
    sim: Simulator, client: VendorClient, fake: FakeTime
) -> None:
    job = client.start_export(DOMAIN)
    sim.set_faults(error_rate=1.0, retry_after="0")

    def heal(sleeps: int) -> None:
        if sleeps == 3:
            sim.set_faults(error_rate=0.0)

    fake.on_sleep = heal
    assert client.export_status(job.job_id).job_id == job.job_id
    assert sim.stats.status_calls[job.job_id] == 4
    assert len(fake.sleeps) == 3
    assert 1.0 <= fake.sleeps[0] <= 2.0
    assert 2.0 <= fake.sleeps[1] <= 3.0
    assert 4.0 <= fake.sleeps[2] <= 5.0


def test_exhausted_retries_are_a_temporary_failure(sim: Simulator, fake: FakeTime) -> None:
    with make_client(sim.url, sim.key, fake, retry_attempts=3) as client:
        job = client.start_export(DOMAIN)
        sim.set_faults(error_rate=1.0, error_status=502)
        with pytest.raises(TemporaryFailure) as caught:
            client.export_status(job.job_id)
    error = caught.value
    assert error.exit_code == 75
    assert f"GET /v1/static-export/jobs/{job.job_id}" in str(error)
    assert "3 attempts" in str(error) and "HTTP 502" in str(error)
    assert sim.stats.status_calls[job.job_id] == 3
    assert len(fake.sleeps) == 2


def test_retry_timeout_bounds_the_total_wait(sim: Simulator, fake: FakeTime) -> None:
    with make_client(sim.url, sim.key, fake, retry_timeout=20.0) as client:
        job = client.start_export(DOMAIN)
        sim.set_faults(rate_limit_next=5, retry_after="60")
        with pytest.raises(TemporaryFailure, match="HTTP 429") as caught:
            client.export_status(job.job_id)
    assert caught.value.retry_after == 60.0
    assert fake.sleeps == []
    assert sim.stats.status_calls[job.job_id] == 1


def test_agent_job_and_bundle_reads_are_retried_too(
    sim: Simulator, client: VendorClient, fake: FakeTime
) -> None:
    job_id = sim.add_agent_job("pr", seconds=0)
    job = wait_done(client, client.start_export(DOMAIN).job_id)
    sim.set_faults(rate_limit_next=2, retry_after="0")
    assert client.export_bundle(job.job_id).url
    sim.set_faults(rate_limit_next=2, retry_after="0")
    assert client.agent_job(job_id).status == "completed"
    assert len(fake.sleeps) == 4


def test_connection_refused_is_retried_then_temporary(fake: FakeTime) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    with make_client(url, "mint_test_key_1234", fake, retry_attempts=4) as client:
        with pytest.raises(TemporaryFailure, match="ConnectError") as caught:
            client.export_status("se_1")
        assert len(fake.sleeps) == 3
        # Nothing was sent, so a start may be retried as well.
        with pytest.raises(StartRefused, match="POST /v1/static-export/jobs"):
            client.start_export(DOMAIN)
        assert len(fake.sleeps) == 6
    assert caught.value.exit_code == 75


def test_retries_can_be_turned_off_through_stamina(sim: Simulator, client: VendorClient) -> None:
    import stamina

    job = client.start_export(DOMAIN)
    sim.set_faults(error_rate=1.0)
    stamina.set_active(False)
    try:
        with pytest.raises(TemporaryFailure, match="1 attempt "):
            client.export_status(job.job_id)
    finally:
        stamina.set_active(True)
    assert sim.stats.status_calls[job.job_id] == 1


# --- starting is never blindly repeated ----------------------------------------------------------


def test_start_while_a_job_runs_is_deferred_not_retried(
    sim_factory: Callable[..., Simulator], fake: FakeTime
) -> None:
    sim = sim_factory()
    sim.set_faults(hold_jobs=True)
    with make_client(sim.url, sim.key, fake) as client:
        first = client.start_export(DOMAIN)
        with pytest.raises(TemporaryFailure, match="HTTP 409") as caught:
            client.start_export(DOMAIN)
    assert caught.value.retry_after is None
    assert isinstance(caught.value, StartRefused) and caught.value.__cause__ is None
    assert sim.stats.start_attempts == {DOMAIN: 2}
    assert sim.stats.starts == {DOMAIN: [first.job_id]}
    assert fake.sleeps == []


def test_start_rate_limited_is_deferred_with_retry_after(sim: Simulator, fake: FakeTime) -> None:
    sim.set_faults(rate_limit_next=1, retry_after="7")
    with (
        make_client(sim.url, sim.key, fake) as client,
        pytest.raises(TemporaryFailure, match="rate limit") as caught,
    ):
        client.start_export(DOMAIN)
    assert caught.value.retry_after == 7.0
    assert caught.value.exit_code == 75
    assert isinstance(caught.value, StartRefused) and caught.value.__cause__ is None
    assert sim.stats.start_attempts == {DOMAIN: 1}
    assert DOMAIN not in sim.stats.starts
    assert fake.sleeps == []


def test_start_budget_of_the_vendor(sim_factory: Callable[..., Simulator], fake: FakeTime) -> None:
    sim = sim_factory(max_starts_per_hour=1, one_active_job=False)
    with make_client(sim.url, sim.key, fake, export_flow="project") as client:
        client.start_export(DOMAIN)
        with pytest.raises(TemporaryFailure) as caught:
            client.start_export(DOMAIN)
    assert caught.value.retry_after is not None and 3500 <= caught.value.retry_after <= 3600
    assert sim.stats.start_attempts == {DOMAIN: 2}
    assert len(sim.stats.starts[DOMAIN]) == 1


def test_start_answered_503_is_retried_once_healed(sim: Simulator, fake: FakeTime) -> None:
    sim.set_faults(error_rate=1.0, retry_after="0")
    fake.on_sleep = lambda n: sim.set_faults(error_rate=0.0) if n == 2 else None
    with make_client(sim.url, sim.key, fake) as client:
        job = client.start_export(DOMAIN)
    assert sim.stats.start_attempts == {DOMAIN: 3}
    assert sim.stats.starts == {DOMAIN: [job.job_id]}


def test_start_answered_503_until_exhausted_is_refused(sim: Simulator, fake: FakeTime) -> None:
    sim.set_faults(error_rate=1.0, retry_after="0")
    with (
        make_client(sim.url, sim.key, fake, retry_attempts=2) as client,
        pytest.raises(StartRefused, match="HTTP 503") as caught,
    ):
        client.start_export(DOMAIN)
    assert caught.value.__cause__ is None
    assert sim.stats.start_attempts == {DOMAIN: 2}
    assert DOMAIN not in sim.stats.starts


def test_start_answered_500_is_not_retried(sim: Simulator, fake: FakeTime) -> None:
    sim.set_faults(error_rate=1.0, error_status=500)
    with (
        make_client(sim.url, sim.key, fake) as client,
        pytest.raises(TemporaryFailure, match="HTTP 500") as caught,
    ):
        client.start_export(DOMAIN)
    assert not isinstance(caught.value, StartRefused)
    assert sim.stats.start_attempts == {DOMAIN: 1}
    assert fake.sleeps == []


def test_start_hang_up_after_sending_is_not_retried(
    scripted: Callable[..., ScriptedServer], fake: FakeTime
) -> None:
    server = scripted(Scripted(0))
    with make_client(server.url, "mint_test_key_1234", fake) as client:
        with pytest.raises(TemporaryFailure, match="may or may not have started a job") as err:
            client.start_export(DOMAIN)
        assert not isinstance(err.value, StartRefused)
        assert len(server.requests) == 1
        assert fake.sleeps == []
        # The same hang-up on a read is retried.
        with pytest.raises(TemporaryFailure, match="RemoteProtocolError"):
            client.export_status("se_1")
    assert len(server.requests) == 1 + 6
    assert len(fake.sleeps) == 5


# --- odd answers ---------------------------------------------------------------------------------


def test_any_2xx_is_success(scripted: Callable[..., ScriptedServer]) -> None:
    server = scripted(Scripted(201, b'{"jobId": "se_9"}', JSON))
    with make_client(server.url, "mint_test_key_1234") as client:
        job = client.start_export(DOMAIN)
    assert (job.job_id, job.status) == ("se_9", "queued")


def test_non_json_2xx_is_a_clear_error(scripted: Callable[..., ScriptedServer]) -> None:
    server = scripted(Scripted(200, b"<html>Sign in to the proxy</html>", HTML))
    with (
        make_client(server.url, "mint_test_key_1234") as client,
        pytest.raises(MirrorError, match="not a JSON object") as caught,
    ):
        client.export_status("se_1")
    assert type(caught.value) is MirrorError
    assert "\n" not in str(caught.value) and "<html>" not in str(caught.value)


def test_start_answer_without_job_id_is_a_clear_error(
    scripted: Callable[..., ScriptedServer],
) -> None:
    server = scripted(Scripted(202, b'{"status": "queued"}', JSON))
    with (
        make_client(server.url, "mint_test_key_1234") as client,
        pytest.raises(MirrorError, match="sent no jobId"),
    ):
        client.start_export(DOMAIN)


def test_start_answer_with_a_numeric_job_id_says_so(
    scripted: Callable[..., ScriptedServer],
) -> None:
    server = scripted(Scripted(202, b'{"jobId": 12345, "status": "queued"}', JSON))
    with (
        make_client(server.url, "mint_test_key_1234") as client,
        pytest.raises(MirrorError, match=r"sent a jobId that is not text \(12345\)"),
    ):
        client.start_export(DOMAIN)


def test_non_json_5xx_is_retried_then_temporary(
    scripted: Callable[..., ScriptedServer], fake: FakeTime
) -> None:
    server = scripted(Scripted(502, b"<html>Bad gateway</html>", HTML))
    with (
        make_client(server.url, "mint_test_key_1234", fake, retry_attempts=2) as client,
        pytest.raises(TemporaryFailure, match=r"last: HTTP 502 \("),
    ):
        client.export_status("se_1")
    assert len(server.requests) == 2


def test_redirects_are_not_followed(scripted: Callable[..., ScriptedServer]) -> None:
    server = scripted(Scripted(301, b"", {"Location": "https://elsewhere.example/v1"}))
    with (
        make_client(server.url, "mint_test_key_1234") as client,
        pytest.raises(MirrorError, match=r"redirect .*elsewhere.*api\.base_url"),
    ):
        client.agent_job("aj_1")


def test_the_key_goes_only_into_the_authorization_header(
    scripted: Callable[..., ScriptedServer],
) -> None:
    key = "mint_only_in_header_1234"
    server = scripted(Scripted(200, b'{"id": "aj_1", "status": "active"}', JSON))
    with make_client(server.url, key) as client:
        client.agent_job("aj_1")
        assert "authorization" not in {name.lower() for name in client.http.headers}
    method, path, headers = server.requests[0]
    assert (method, path) == ("GET", "/v2/agent/proj_sim/job/aj_1")
    assert headers["Authorization"] == f"Bearer {key}"
    assert key not in path


def test_a_vendor_echoing_the_key_is_scrubbed(scripted: Callable[..., ScriptedServer]) -> None:
    key = "mint_echoed_secret_5678"
    body = ('{"error": "key ' + key + ' is revoked"}').encode()
    server = scripted(Scripted(401, body, JSON))
    with make_client(server.url, key) as client, pytest.raises(AuthError) as caught:
        client.export_status("se_1")
    assert key not in str(caught.value)
    assert "revoked" in str(caught.value)


def test_a_key_that_cannot_go_in_a_header_is_refused() -> None:
    with pytest.raises(AuthError, match="cannot carry") as caught:
        VendorClient(httpx.Client(), base_url="http://x", key="mint_bad\nkey")
    assert "mint_bad" not in str(caught.value)


# --- agent jobs ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("outcome", "status", "pr"),
    [("pr", "completed", True), ("no_changes", "completed", False), ("failed", "failed", False)],
)
def test_agent_job_reads(
    sim: Simulator, client: VendorClient, outcome: str, status: str, pr: bool
) -> None:
    job_id = sim.add_agent_job(outcome, seconds=0)
    job = client.agent_job(job_id)
    assert (job.id, job.status, job.terminal) == (job_id, status, True)
    assert (job.pr_link is not None) == pr
    assert job.repository.startswith("https://github.com/")
    assert job.ref and job.model
    assert job.created_at is not None and job.created_at.tzinfo is not None
    assert job.archived_at is None


def test_agent_job_archived_and_active(sim: Simulator, client: VendorClient) -> None:
    archived = client.agent_job(sim.add_agent_job("archived", seconds=0))
    assert archived.status == "archived" and archived.archived_at is not None
    sim.set_faults(hold_jobs=True)
    active = client.agent_job(sim.add_agent_job("pr", seconds=0))
    assert active.status == "active" and not active.terminal and active.pr_link is None


def test_agent_job_project_from_argument_or_settings(sim: Simulator, fake: FakeTime) -> None:
    job_id = sim.add_agent_job("pr", seconds=0)
    with make_client(sim.url, sim.key, fake, project_id="") as client:
        with pytest.raises(ConfigError, match=r"api\.project_id or pass --project"):
            client.agent_job(job_id)
        assert client.agent_job(job_id, "proj_sim").status == "completed"
        with pytest.raises(NotFound, match="Agent job not found"):
            client.agent_job(job_id, "proj_other")


# --- settings, logging ---------------------------------------------------------------------------


def test_from_settings_builds_the_http_client(
    sim: Simulator, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MIRROR_API_KEY", sim.key)
    settings = settings_from_dict(
        {
            "api": {
                "base_url": sim.url + "/",
                "project_id": "proj_sim",
                "export_flow": "project",
                "timeout": "7s",
                "ca_bundle": certifi.where(),
                "retry_attempts": 2,
            },
            "store": {"path": str(tmp_path)},
        }
    )
    with VendorClient.from_settings(settings) as client:
        assert client.http.headers["User-Agent"] == f"mirror/{__version__}"
        assert client.http.timeout.read == 7.0
        assert "authorization" not in {name.lower() for name in client.http.headers}
        assert (client.export_flow, client.project_id, client.transport.retry_attempts) == (
            "project",
            "proj_sim",
            2,
        )
        assert sim.key not in repr(client)
        job = client.start_export(DOMAIN)
        assert sim.stats.starts[DOMAIN] == [job.job_id]


def test_a_missing_ca_bundle_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"api\.ca_bundle"):
        build_http_client(timeout=5, ca_bundle=str(tmp_path / "missing.pem"))


@pytest.fixture
def stamina_own_hooks() -> Iterator[None]:
    """stamina's default hooks, as a library user who set up no logging has them, whatever an
    earlier test in this worker installed (`install_retry_log` changes them process-wide)."""
    set_on_retry_hooks(None)
    yield
    set_on_retry_hooks(None)


@pytest.mark.usefixtures("stamina_own_hooks")
def test_requests_are_logged_at_debug_without_secrets(
    sim: Simulator, client: VendorClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    job = client.start_export(DOMAIN)
    sim.set_faults(rate_limit_next=1, retry_after="0")
    client.export_status(job.job_id)
    lines = [r for r in caplog.records if r.name == "mirror.vendorapi.client"]
    assert [(r.method, r.path, r.status) for r in lines] == [  # type: ignore[attr-defined]
        ("POST", "/v1/static-export/jobs", 202),
        ("GET", f"/v1/static-export/jobs/{job.job_id}", 429),
        ("GET", f"/v1/static-export/jobs/{job.job_id}", 200),
    ]
    assert all(r.levelno == logging.DEBUG for r in lines)
    retries = [r for r in caplog.records if r.name == "stamina"]  # via stamina's retry hooks
    assert [getattr(r, "stamina.callable") for r in retries] == [
        "mirror.vendorapi.client.VendorClient.export_status"
    ]
    everything = caplog.text + " ".join(str(r.__dict__) for r in caplog.records)
    assert sim.key not in everything
    assert "Bearer" not in everything


# --- operators' view of retries and name resolution ---------------------------------------------


@pytest.fixture
def retry_lines(caplog: pytest.LogCaptureFixture) -> Iterator[Callable[[], list[str]]]:
    """The messages of mirror's retry lines, and a check that stamina logged none itself."""
    install_retry_log()

    def lines() -> list[str]:
        assert not [r for r in caplog.records if r.name == "stamina"]
        records = [r for r in caplog.records if r.name == "mirror.retry"]
        assert all(r.levelno == logging.WARNING for r in records)
        return [r.getMessage() for r in records]

    with caplog.at_level(logging.INFO):
        yield lines
    set_on_retry_hooks(None)


def test_each_retry_is_one_readable_line(
    sim: Simulator, fake: FakeTime, retry_lines: Callable[[], list[str]]
) -> None:
    with make_client(sim.url, sim.key, fake, retry_attempts=3) as client:
        job = client.start_export(DOMAIN)
        sim.set_faults(error_rate=1.0, error_status=502)
        with pytest.raises(TemporaryFailure):
            client.export_status(job.job_id)
    lines = retry_lines()
    assert len(lines) == 2
    endpoint = f"GET /v1/static-export/jobs/{job.job_id}"
    assert lines[0] == (
        f"vendor API {endpoint} (export job {job.job_id}) failed: "
        "HTTP 502: Service temporarily unavailable; "
        f"retrying in {fake.sleeps[0]:.1f}s (attempt 2 of 3)"
    )
    assert lines[1].endswith(f"retrying in {fake.sleeps[1]:.1f}s (attempt 3 of 3)")
    assert sim.key not in " ".join(lines)


def test_an_unresolvable_host_is_tried_briefly_and_named(
    fake: FakeTime, retry_lines: Callable[[], list[str]]
) -> None:
    with make_client("http://vendor-api.invalid", "mint_test_key_1234", fake) as client:
        with pytest.raises(TemporaryFailure) as caught:
            client.export_status("se_1")
        assert len(fake.sleeps) == DNS_ATTEMPTS - 1
        assert sum(fake.sleeps) <= DNS_WAIT_MAX * (DNS_ATTEMPTS - 1)
        with pytest.raises(StartRefused, match="cannot resolve"):
            client.start_export(DOMAIN)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("cannot resolve the vendor API host 'vendor-api.invalid'")
    assert "GET /v1/static-export/jobs/se_1" in message
    assert caught.value.exit_code == 75
    assert "api.base_url" in (caught.value.hint or "")
    lines = retry_lines()
    assert len(lines) == 2 * (DNS_ATTEMPTS - 1)
    assert lines[0].startswith(
        "vendor API GET /v1/static-export/jobs/se_1 (export job se_1) failed: ConnectError"
    )


def test_name_resolution_error_is_found_in_the_chain() -> None:
    with pytest.raises(httpx.ConnectError) as caught, httpx.Client() as http:
        http.get("http://vendor-api.invalid/")
    assert isinstance(name_resolution_error(caught.value), socket.gaierror)
    refused = httpx.ConnectError("refused")
    assert name_resolution_error(refused) is None


# --- hostile answers (issue 8) -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("job_id", "problem"),
    [
        ("", "empty"),
        ("  ", "empty"),
        (".", "dot segment"),
        ("..", "dot segment"),
        ("x" * 257, "longer than 256"),
        ("se_\n1", "control"),
        ("se_\x7f", "control"),
        ("se_\x85", "control"),
    ],
)
def test_unusable_job_ids_are_named(job_id: str, problem: str) -> None:
    assert problem in (job_id_problem(job_id) or "")


@pytest.mark.parametrize("job_id", ["se_abc", "x" * 256, "a.b", "...", "job/1", "é"])
def test_usable_job_ids_pass(job_id: str) -> None:
    assert job_id_problem(job_id) is None


def test_a_start_answering_a_dot_segment_is_refused(sim: Simulator, client: VendorClient) -> None:
    sim.set_faults(job_id_override="..")
    with pytest.raises(OperationFailed, match=r"job id '\.\.' \(POST /v1/static-export/jobs\)"):
        client.start_export(DOMAIN)
    with pytest.raises(ConfigError, match="not a usable export job id"):
        client.export_status("..")
    assert sim.stats.status_calls == {}


def test_newer_revision_links_come_from_the_status(sim: Simulator, fake: FakeTime) -> None:
    """The newer revision has no POST .../bundle (404): a job whose status carried the link is
    asked again by status; a client that never saw the status learns it from the 404."""
    sim.set_faults(newer_revision=True)
    with make_client(sim.url, sim.key, fake) as first:
        job = first.start_export(DOMAIN)
        assert wait_done(first, job.job_id).bundle is not None
        assert first.export_bundle(job.job_id).url
        assert sim.stats.bundle_calls == {}
    with make_client(sim.url, sim.key, fake) as later:
        link = later.fresh_link(job.job_id)
        assert later.http.get(link.url).status_code == 200
        assert later.fresh_link(job.job_id).url != link.url
    assert sim.stats.bundle_calls == {job.job_id: 1}


def test_bundle_answering_405_falls_back_to_the_status(
    scripted: Callable[..., ScriptedServer],
) -> None:
    status = b'{"jobId": "se_1", "status": "completed", "bundleUrl": "https://s3.test/b.tgz"}'
    server = scripted(
        Scripted(405, b'{"error": "Method not allowed"}', {**JSON, "Allow": "GET"}),
        Scripted(200, status, JSON),
    )
    with make_client(server.url, "mint_k") as client:
        assert client.export_bundle("se_1").url == "https://s3.test/b.tgz"
    assert [(method, path) for method, path, _ in server.requests] == [
        ("POST", "/v1/static-export/jobs/se_1/bundle"),
        ("GET", "/v1/static-export/jobs/se_1"),
    ]


def test_error_bodies_are_cut_at_64_kib(scripted: Callable[..., ScriptedServer]) -> None:
    body = b'{"error": "' + b"x" * (300 * 1024) + b'"}'
    server = scripted(Scripted(400, body, JSON))
    with make_client(server.url, "mint_k") as client, pytest.raises(ConfigError) as caught:
        client.export_status("se_1")
    assert "error body of over 64 KiB, cut unread" in str(caught.value)
    assert len(str(caught.value)) < 400


def test_json_answers_over_1_mib_are_refused_even_compressed(
    scripted: Callable[..., ScriptedServer],
) -> None:
    """The cap counts decoded bytes, so a gzip bomb is cut too."""
    import gzip

    bomb = gzip.compress(b'{"jobId": "se_1", "pad": "' + b" " * (20 * 1024 * 1024) + b'"}')
    server = scripted(Scripted(200, bomb, {**JSON, "Content-Encoding": "gzip"}))
    with make_client(server.url, "mint_k") as client, pytest.raises(MirrorError) as caught:
        client.export_status("se_1")
    assert "body of over 1 MiB" in str(caught.value) and len(bomb) < 1024 * 1024
