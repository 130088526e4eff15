"""Issue 8, the vendor and storage-host side: a hostile simulator on loopback.

Each test switches one of the simulator's hostile faults on (mirror/sim/config.py) and
checks the promise still holds: no spliced bytes, no link kept for ever, no stuck run,
no memory growth, one clear line with the documented exit code.
"""

from __future__ import annotations

import contextlib
import threading
import time
import tracemalloc
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from mirror.config import settings_from_dict
from mirror.errors import IntegrityError, MirrorError, TemporaryFailure
from mirror.export.outcome import RunEvent
from mirror.export.runner import JobTimedOut, run_export
from mirror.httpserver import QuietHTTPServer
from mirror.sim import Simulator
from mirror.store.app import App
from mirror.store.models import ExportRun, RunState
from mirror.vendorapi.client import BundleLink, VendorClient
from mirror.vendorapi.download import LinkFailed, download_bundle
from tests.fixtures.cli import mirror_cli, write_config

MiB = 1024 * 1024
FAST_API = {"poll_interval": "0.05s", "max_poll_interval": "0.1s", "max_starts_per_hour": 1000}
POLL_MAX = 0.1  # FAST_API's max_poll_interval; a download's backoff starts at 0.5 s


@pytest.fixture
def http() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=30) as client:
        yield client


@pytest.fixture
def make_app(tmp_path: Path) -> Iterator[Callable[..., App]]:
    made: list[App] = []

    def make(download: dict[str, Any] | None = None, **api: Any) -> App:
        document: dict[str, Any] = {
            "store": {"path": str(tmp_path / "store")},
            "api": {**FAST_API, **api},
            "download": download or {},
        }
        made.append(App(settings_from_dict(document)))
        return made[-1]

    yield make
    for application in made:
        application.close()


def vendor(sim: Simulator, http: httpx.Client, **kwargs: Any) -> VendorClient:
    return VendorClient(http, base_url=sim.url, key=sim.key, sleep=lambda _s: None, **kwargs)


def waited(waits: list[float]) -> Callable[[float], None]:
    """A run's sleep that records each wait it asked for, then waits it."""

    def sleep(seconds: float) -> None:
        waits.append(seconds)
        time.sleep(seconds)

    return sleep


def the_run(app: App) -> ExportRun:
    with app.db.session() as session:
        run = session.scalars(select(ExportRun).order_by(ExportRun.id.desc())).first()
    assert run is not None
    return run


def cli_config(tmp_path: Path, sim: Simulator) -> Path:
    document = {"api": {"base_url": sim.url, **FAST_API}, "store": {"path": str(tmp_path / "s")}}
    return write_config(tmp_path / "config.toml", document)


def refused_on_one_line(tmp_path: Path, sim: Simulator, code: int, got: list[str]) -> str:
    """`mirror export run` against the faulty simulator: exit `code`, one error line."""
    config = cli_config(tmp_path, sim)
    result = mirror_cli(
        "--config",
        str(config),
        "export",
        "run",
        "--adhoc",
        "docs.cli.test",
        env={"MIRROR_API_KEY": sim.key},
    )
    stderr = result.stderr.strip()
    got.append(f"exit {result.returncode}: {stderr[:70]}")
    assert result.returncode == code and len(stderr.splitlines()) == 1, stderr
    assert stderr.startswith("mirror: error:")
    return stderr


# --- 8.1 ------------------------------------------------------------------------------------


@pytest.mark.fault(
    "8.1 resumed download, object changed under the link",
    "If-Range sent; restart from zero; stored sha256 = the new object's",
)
@pytest.mark.parametrize("if_range", ["honoured", "ignored"])
def test_object_changed_between_cut_and_resume_restarts_from_zero(
    sim_factory: Callable[..., Simulator],
    http: httpx.Client,
    make_app: Callable[..., App],
    fault_got: list[str],
    if_range: str,
) -> None:
    sim = sim_factory(bundle_size=3 * MiB)
    sim.set_faults(
        cut_after_bytes=MiB,
        cuts_remaining=1,
        change_object_on_range=1,
        ignore_if_range=if_range == "ignored",
    )
    outcome = run_export(make_app(), vendor(sim, http), "docs.splice.test", sleep=lambda _s: None)
    assert sim.faults.change_object_on_range == 0, "the object never changed"
    now_served = sim.bundle_sha256(outcome.job_id)
    downloads = sim.stats.snapshot()["downloads"]
    fault_got.append(
        f"statuses {[d['status'] for d in downloads]}, sha256 = "
        f"{'new object' if outcome.ref.sha256 == now_served else 'SPLICED'}"
    )
    assert outcome.ref.sha256 == now_served
    assert outcome.ref.size == sim.bundle_info(outcome.job_id)["size"]


# --- 8.2 ------------------------------------------------------------------------------------


@pytest.mark.fault(
    "8.2 bundleUrl or redirect not http(s)",
    "refused at once (exit 75), saved link dropped, next run asks for a fresh one",
)
@pytest.mark.parametrize(
    ("fault", "url"),
    [
        ("bundle_url_override", "file:///etc/passwd"),
        ("bundle_url_override", "ftp://files.example.com/site.tar.gz"),
        ("bundle_url_override", "javascript:alert(1)"),
        ("redirect_downloads_to", "file:///etc/passwd"),
    ],
)
def test_unusable_link_is_refused_at_once_and_dropped(
    sim: Simulator,
    http: httpx.Client,
    make_app: Callable[..., App],
    fault_got: list[str],
    fault: str,
    url: str,
) -> None:
    app = make_app()
    sim.set_faults(**{fault: url})
    waits: list[float] = []
    started = time.monotonic()
    with pytest.raises(LinkFailed, match="only http and https are followed") as caught:
        run_export(app, vendor(sim, http), "docs.scheme.test", sleep=waited(waits))
    seconds = time.monotonic() - started
    run = the_run(app)
    fault_got.append(f"exit {caught.value.exit_code} in {seconds:.1f}s, link {run.bundle_url!r}")
    assert caught.value.exit_code == 75
    assert max(waits, default=0.0) <= POLL_MAX, waits  # the polls' waits, no download backoff
    assert run.active and run.bundle_url is None
    sim.set_faults(**{fault: None})
    outcome = run_export(app, vendor(sim, http), "docs.scheme.test")
    assert outcome.state == "stored" and outcome.job_id == run.vendor_job_id
    assert sim.stats.snapshot()["bundle_calls"][outcome.job_id] == 2
    fault_got.append("next run: fresh link, stored")


@pytest.mark.fault(
    "8.2 `mirror export run` with a file: bundleUrl", "one `mirror: error:` line, exit 75"
)
def test_unusable_link_cli_line(sim: Simulator, tmp_path: Path, fault_got: list[str]) -> None:
    sim.set_faults(bundle_url_override="file:///etc/passwd")
    stderr = refused_on_one_line(tmp_path, sim, 75, fault_got)
    assert "'file'" in stderr


@pytest.mark.fault(
    "8.2 storage host keeps failing", "attempts spent: exit 75 and the saved link is dropped"
)
def test_spent_attempts_drop_the_saved_link(
    sim: Simulator, http: httpx.Client, make_app: Callable[..., App], fault_got: list[str]
) -> None:
    app = make_app()
    sim.set_faults(cut_after_bytes=0, cuts_remaining=1000)
    with pytest.raises(TemporaryFailure, match="failed 8 times in a row") as caught:
        run_export(app, vendor(sim, http), "docs.failing.test", sleep=lambda _s: None)
    run = the_run(app)
    fault_got.append(f"exit {caught.value.exit_code}, saved link {run.bundle_url!r}")
    assert run.active and run.bundle_url is None


# --- 8.3 ------------------------------------------------------------------------------------


@pytest.mark.fault(
    "8.3 newer vendor revision (link in status, /bundle 404), link expires",
    "fresh link from the status; stored with one vendor job",
)
@pytest.mark.parametrize("flow", ["global", "project"])
def test_newer_revision_refreshes_the_link_from_the_status(
    sim: Simulator,
    http: httpx.Client,
    make_app: Callable[..., App],
    fault_got: list[str],
    flow: str,
) -> None:
    sim.set_faults(newer_revision=True)
    expired: list[bool] = []

    def expire_when_downloading(event: RunEvent) -> None:
        if event.state == RunState.DOWNLOADING and event.bytes_done is None and not expired:
            expired.append(True)
            sim.expire_links()

    client = vendor(sim, http, export_flow=flow, project_id=sim.config.project_id)
    outcome = run_export(make_app(), client, "docs.newer.test", on_event=expire_when_downloading)
    stats = sim.stats.snapshot()
    fault_got.append(
        f"{outcome.state}, starts {len(stats['starts']['docs.newer.test'])}, "
        f"status calls {stats['status_calls'][outcome.job_id]}"
    )
    assert expired and outcome.state == "stored"
    assert outcome.ref.sha256 == sim.bundle_sha256(outcome.job_id)
    assert stats["starts"]["docs.newer.test"] == [outcome.job_id]


@pytest.mark.fault(
    "8.3 daemon, newer revision, short-lived links",
    "the domain is stored by the daemon with no second vendor job",
)
def test_daemon_finishes_a_newer_revision_domain_with_one_job(
    sim_factory: Callable[..., Simulator],
    tmp_path: Path,
    fault_got: list[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from mirror.export.daemon import Daemon, DaemonOptions

    sim = sim_factory(link_ttl=5.0)  # under the exporter's 30 s margin: every link is renewed
    sim.set_faults(newer_revision=True)
    settings = settings_from_dict(
        {
            "api": {"base_url": sim.url, **FAST_API},
            "store": {"path": str(tmp_path / "store")},
            "daemon": {"listen": "", "concurrency": 1},
            "exports": [{"domain": "docs.daemon-newer.test", "every": "1h"}],
        }
    )
    monkeypatch.setenv("MIRROR_API_KEY", sim.key)
    daemon = Daemon(settings, options=DaemonOptions(exit_when_idle=True))
    assert daemon.run() == 0
    stored = daemon.metrics.runs.labels(domain="docs.daemon-newer.test", outcome="stored")
    starts = sim.stats.snapshot()["starts"]["docs.daemon-newer.test"]
    fault_got.append(f"stored runs {stored._value.get():.0f}, vendor jobs {len(starts)}")
    assert stored._value.get() == 1 and len(starts) == 1


# --- 8.6 ------------------------------------------------------------------------------------


@pytest.mark.fault(
    "8.6 storage host trickles bytes",
    "below download.min_speed for download.stall_time: cut and resumed",
)
def test_trickling_host_is_cut_and_resumed(
    sim_factory: Callable[..., Simulator],
    http: httpx.Client,
    make_app: Callable[..., App],
    fault_got: list[str],
) -> None:
    sim = sim_factory(bundle_size=2 * MiB)
    sim.set_faults(trickle_bytes_per_second=2000, trickles_remaining=1)
    app = make_app(download={"min_speed": "256KiB", "stall_time": "0.5s"})
    started = time.monotonic()
    outcome = run_export(app, vendor(sim, http), "docs.trickle.test", sleep=lambda _s: None)
    seconds = time.monotonic() - started
    downloads = sim.stats.snapshot()["downloads"]
    fault_got.append(f"stored in {seconds:.1f}s after {len(downloads)} requests")
    assert outcome.ref.sha256 == sim.bundle_sha256(outcome.job_id)
    assert sim.faults.trickles_remaining == 0 and len(downloads) == 2
    assert downloads[1]["status"] == 206
    assert seconds < 60  # not cut, the trickle would take 17 minutes


# --- unsafe archive in pieces ------------------------------------------------------------


@pytest.mark.fault(
    "12.1 unsafe archive whose download is cut and resumed (inspected as it arrives)",
    "exit 5 (unsafe archive), run FAILED, nothing stored",
)
@pytest.mark.parametrize("kind", ["traversal", "bomb"])
def test_unsafe_archive_arriving_in_pieces_is_refused_and_nothing_stored(
    sim: Simulator,
    http: httpx.Client,
    make_app: Callable[..., App],
    fault_got: list[str],
    kind: str,
) -> None:
    sim.set_faults(
        malicious_domains={"docs.pieces.test": kind}, cut_after_bytes=700, cuts_remaining=2
    )
    app = make_app()
    with pytest.raises(IntegrityError) as caught:
        run_export(app, vendor(sim, http), "docs.pieces.test", sleep=lambda _s: None)
    run = the_run(app)
    downloads = sim.stats.snapshot()["downloads"]
    fault_got.append(f"exit {caught.value.exit_code} after {len(downloads)} requests")
    assert caught.value.exit_code == 5 and "unsafe archive" in str(caught.value)
    assert sim.faults.cuts_remaining == 0 and len(downloads) == 4  # it did arrive in pieces
    assert downloads[-1]["range"] is None  # then once more from zero, in case a piece was bad
    assert run.state == RunState.FAILED and run.error == str(caught.value)
    assert list(app.store.iter_blobs()) == [] and app.store.temp_files() == []


# --- 8.7 ------------------------------------------------------------------------------------


@pytest.mark.fault(
    "8.7 50 MB vendor answer (status 200 and 500)",
    "cut at 1 MiB / 64 KiB, clear error, peak memory flat",
)
@pytest.mark.parametrize("status", [200, 500])
def test_huge_vendor_answers_are_cut_and_memory_stays_flat(
    sim: Simulator, http: httpx.Client, fault_got: list[str], status: int
) -> None:
    sim.set_faults(huge_body_bytes=50_000_000, huge_body_status=status)
    client = vendor(sim, http, retry_attempts=1)
    tracemalloc.start()
    try:
        with pytest.raises(MirrorError) as caught:
            client.export_status("se_any")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    message = str(caught.value)
    fault_got.append(f"exit {caught.value.exit_code}, peak {peak / MiB:.1f} MiB traced")
    assert len(message.splitlines()) == 1
    assert ("over 1 MiB" if status == 200 else "over 64 KiB") in message
    assert peak < 8 * MiB


# --- 8.8 ------------------------------------------------------------------------------------


@pytest.mark.fault(
    "8.8 vendor answers a start with a job id of '.', '..', '', 300 chars or control chars",
    "exit 1, one line naming the answer, no status call elsewhere",
)
@pytest.mark.parametrize("job_id", [".", "..", "", "x" * 300, "se_\x07\x1b[2J"])
def test_unusable_job_ids_are_refused(
    sim: Simulator,
    http: httpx.Client,
    make_app: Callable[..., App],
    fault_got: list[str],
    job_id: str,
) -> None:
    sim.set_faults(job_id_override=job_id)
    app = make_app()
    with pytest.raises(MirrorError) as caught:
        run_export(app, vendor(sim, http), "docs.jobid.test")
    message = str(caught.value)
    fault_got.append(f"exit {caught.value.exit_code}: {message[:80]}")
    assert caught.value.exit_code == 1
    assert len(message.splitlines()) == 1 and "\x07" not in message and "\x1b" not in message
    assert "job id" in message and repr(job_id)[:40] in message
    assert sim.stats.snapshot()["status_calls"] == {}
    assert the_run(app).state == RunState.FAILED


@pytest.mark.fault(
    "8.8 `mirror export run`, vendor job id '..'", "one `mirror: error:` line, exit 1"
)
def test_dot_dot_job_id_cli_line(sim: Simulator, tmp_path: Path, fault_got: list[str]) -> None:
    sim.set_faults(job_id_override="..")
    stderr = refused_on_one_line(tmp_path, sim, 1, fault_got)
    assert "'..'" in stderr and sim.stats.snapshot()["status_calls"] == {}


# --- 8.9 ------------------------------------------------------------------------------------


@pytest.mark.fault(
    "8.9 vendor job never settles",
    "past api.job_timeout: exit 75, run resumable, same job finishes later",
)
def test_job_timeout_defers_and_the_run_stays_resumable(
    sim: Simulator, http: httpx.Client, make_app: Callable[..., App], fault_got: list[str]
) -> None:
    sim.set_faults(never_settle=True)
    app = make_app(job_timeout="0.5s")
    waits: list[float] = []
    started = time.monotonic()
    with pytest.raises(JobTimedOut) as caught:
        run_export(app, vendor(sim, http), "docs.slowjob.test", sleep=waited(waits))
    seconds = time.monotonic() - started
    run = the_run(app)
    fault_got.append(f"exit {caught.value.exit_code} after {seconds:.1f}s, run {run.state}")
    assert caught.value.exit_code == 75 and seconds >= 0.5
    # polled until api.job_timeout and no longer: its waits add up to at most one poll more
    assert sum(waits) <= 0.5 + POLL_MAX, waits
    assert run.active and run.state == RunState.STARTED
    sim.set_faults(never_settle=False)
    outcome = run_export(app, vendor(sim, http), "docs.slowjob.test")
    assert outcome.job_id == run.vendor_job_id and outcome.state == "stored"
    assert sim.stats.snapshot()["starts"]["docs.slowjob.test"] == [run.vendor_job_id]


@pytest.mark.fault(
    "8.9 daemon, vendor job never settles", "deferred and counted in mirror_job_timeouts_total"
)
def test_daemon_defers_a_timed_out_job_and_counts_it(
    sim: Simulator, tmp_path: Path, fault_got: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from mirror.export.daemon import Daemon, DaemonOptions

    sim.set_faults(never_settle=True)
    domain = "docs.daemon-slowjob.test"
    settings = settings_from_dict(
        {
            "api": {"base_url": sim.url, **FAST_API, "job_timeout": "0.3s"},
            "store": {"path": str(tmp_path / "store")},
            "daemon": {"listen": "", "concurrency": 1},
            "exports": [{"domain": domain, "every": "1h"}],
        }
    )
    monkeypatch.setenv("MIRROR_API_KEY", sim.key)
    daemon = Daemon(settings, options=DaemonOptions(max_sleep=0.2))
    counter = daemon.metrics.job_timeouts.labels(domain=domain)
    deferred = daemon.metrics.runs.labels(domain=domain, outcome="deferred")

    def stop_once_counted() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and counter._value.get() < 1:
            time.sleep(0.05)
        daemon.request_stop()

    watcher = threading.Thread(target=stop_once_counted, daemon=True)
    watcher.start()
    assert daemon.run() == 0
    watcher.join()
    fault_got.append(f"timeouts {counter._value.get():.0f}, deferred {deferred._value.get():.0f}")
    assert counter._value.get() >= 1 and deferred._value.get() >= 1
    app = App(settings)
    with contextlib.closing(app):
        run = the_run(app)
    assert run.active and run.state == RunState.STARTED


# --- 8.1/8.6: a storage host whose answers keep disagreeing ----------------------------------


class _LyingLengthHost:
    """A real loopback server that announces 1000 bytes more than it sends, then closes: the
    resumed range reveals the true total, the client restarts, and so on round and round."""

    def __init__(self, body: bytes) -> None:
        self.body = body
        self.requests = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                outer.requests += 1
                asked = self.headers.get("Range")
                start = int(asked.removeprefix("bytes=").rstrip("-")) if asked else 0
                self.send_response(206 if asked else 200)
                if asked:
                    last = len(outer.body) - 1
                    self.send_header("Content-Range", f"bytes {start}-{last}/{len(outer.body)}")
                self.send_header("Content-Length", str(len(outer.body) - start + 1000))
                self.end_headers()
                self.wfile.write(outer.body[start:])
                self.close_connection = True

            def log_message(self, *args: object) -> None:
                pass

        self.server = QuietHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/bundle.tar.gz"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.fault(
    "8.6 storage host lies about Content-Length (every answer)",
    "restarts bounded: exit 75 with the link dropped, not a run held for ever",
)
def test_host_lying_about_length_does_not_hold_the_run_for_ever(
    http: httpx.Client, tmp_path: Path, fault_got: list[str]
) -> None:
    host = _LyingLengthHost(bytes(range(256)) * 400)
    link = BundleLink(job_id="se_liar", url=host.url, size_bytes=None, expires_at=None)
    started = time.monotonic()
    try:
        with pytest.raises(LinkFailed) as caught:
            download_bundle(
                http, link, tmp_path / "p", refresh_link=lambda: link, sleep=lambda _s: None
            )
    finally:
        host.close()
    fault_got.append(
        f"{type(caught.value).__name__} (exit {caught.value.exit_code}) after "
        f"{host.requests} requests, {time.monotonic() - started:.1f}s"
    )
    assert caught.value.exit_code == 75 and "restarted from zero" in str(caught.value)
    assert host.requests < 40
