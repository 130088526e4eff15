"""run_export against the simulator on loopback, with a real SQLite index and blob store."""

from __future__ import annotations

import logging
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import select, update

from mirror.archive import inspect_archive
from mirror.config import settings_from_dict
from mirror.errors import (
    AuthError,
    ConfigError,
    IntegrityError,
    Interrupted,
    OperationFailed,
    TemporaryFailure,
)
from mirror.export.claim import RunSnapshot, budget_wait, start_budget_wait
from mirror.export.lease import lease_held_by_other, parse_owner
from mirror.export.outcome import RunEvent
from mirror.export.runner import (
    Step,
    next_poll_delay,
    next_step,
    run_export,
    unfinished_runs,
)
from mirror.integrity import hash_file
from mirror.sim import MALICIOUS_KINDS, Simulator
from mirror.store import digests
from mirror.store.app import App
from mirror.store.models import Bundle, ExportRun, RunState, Version
from mirror.vendorapi.client import ExportJob, VendorClient

MiB = 1024 * 1024
FAST_API = {"poll_interval": "0.02s", "max_poll_interval": "0.1s"}


# --- fixtures and helpers ----------------------------------------------------------------------


@pytest.fixture
def make_app(store_dir: Path) -> Iterator[Callable[..., App]]:
    made: list[App] = []

    def make(**api: Any) -> App:
        document: dict[str, Any] = {"store": {"path": str(store_dir)}, "api": {**FAST_API, **api}}
        exports = document["api"].pop("exports", None)
        if exports is not None:
            document["exports"] = exports
        made.append(App(settings_from_dict(document)))
        return made[-1]

    yield make
    for application in made:
        application.close()


@pytest.fixture
def app(make_app: Callable[..., App]) -> App:
    return make_app()


@pytest.fixture
def http() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=30) as client:
        yield client


def vendor(
    sim: Simulator, http: httpx.Client, sleeps: list[float] | None = None, **kwargs: Any
) -> VendorClient:
    record = sleeps.append if sleeps is not None else (lambda _s: None)
    return VendorClient(http, base_url=sim.url, key=sim.key, sleep=record, **kwargs)


def runs(app: App, domain: str | None = None) -> list[ExportRun]:
    with app.db.session() as session:
        query = select(ExportRun).order_by(ExportRun.id)
        if domain is not None:
            query = query.where(ExportRun.domain == domain)
        return list(session.scalars(query))


def versions(app: App, domain: str | None = None) -> list[Version]:
    with app.db.session() as session:
        query = select(Version).order_by(Version.id)
        if domain is not None:
            query = query.where(Version.domain == domain)
        return list(session.scalars(query))


def bundles(app: App) -> list[Bundle]:
    with app.db.session() as session:
        return list(session.scalars(select(Bundle)))


def served(sim: Simulator, job_id: str) -> int:
    return int(sim.stats.snapshot()["bytes_served"].get(job_id, 0))


def dead_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def snapshot(**values: Any) -> RunSnapshot:
    base: dict[str, Any] = {
        "id": 1,
        "domain": "d.test",
        "state": RunState.PENDING,
        "active": True,
        "requested_version": None,
        "requested_paths": None,
        "vendor_job_id": None,
        "vendor_started_at": None,
        "bundle_url": None,
        "bundle_expires_at": None,
        "expected_size": None,
        "partial_name": "run-1.part",
        "bytes_done": 0,
        "sha256": None,
        "version_label": None,
        "error": None,
        "lease_owner": None,
        "lease_expires_at": None,
        "finished_at": None,
    }
    return RunSnapshot(**{**base, **values})


# --- the pure core -----------------------------------------------------------------------------


def test_next_step_follows_the_saved_state() -> None:
    assert next_step(snapshot()) is Step.START
    assert next_step(snapshot(state=RunState.STARTED, vendor_job_id="j")) is Step.POLL
    assert next_step(snapshot(state=RunState.COMPLETED, vendor_job_id="j")) is Step.FETCH_LINK
    assert next_step(snapshot(state=RunState.DOWNLOADING, vendor_job_id="j")) is Step.DOWNLOAD
    downloaded = snapshot(state=RunState.DOWNLOADED, vendor_job_id="j", sha256="a" * 64)
    assert next_step(downloaded) is Step.STORE
    # a missing prerequisite sends the run back one step, never forward
    assert next_step(snapshot(state=RunState.STARTED)) is Step.START
    assert next_step(snapshot(state=RunState.DOWNLOADED, vendor_job_id="j")) is Step.DOWNLOAD
    for state in RunState.TERMINAL:
        assert next_step(snapshot(state=state, vendor_job_id="j")) is Step.DONE


def test_poll_delay_backs_off_only_while_queued_or_unknown() -> None:
    def job(status: str) -> ExportJob:
        return ExportJob("j", status, None, None, None, None)

    assert next_poll_delay(1.0, job("queued"), 1.0, 4.0) == 1.5
    assert next_poll_delay(3.0, job("mystery"), 1.0, 4.0) == 4.0
    assert next_poll_delay(4.0, job("running"), 1.0, 4.0) == 1.0


def test_budget_wait_counts_a_rolling_hour() -> None:
    now = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
    started = [now - timedelta(minutes=m) for m in (50, 30, 10)]
    assert budget_wait(started, now, 4) == 0
    assert budget_wait(started, now, 3) == pytest.approx(600)
    assert budget_wait(started, now, 2) == pytest.approx(1800)
    assert budget_wait([], now, 1) == 0


def test_lease_rules() -> None:
    now = datetime(2026, 11, 22, tzinfo=UTC)
    later = now + timedelta(minutes=5)
    host = "h1"

    def held(owner: str | None, expires: datetime | None, alive: bool = True) -> bool:
        return lease_held_by_other(
            owner, expires, me="h1:1:me", now=now, host=host, pid_alive=lambda _p: alive
        )

    assert not held(None, None)
    assert not held("h1:1:me", later)  # our own
    assert held("h1:2:x", later)
    assert not held("h1:2:x", later, alive=False)  # dead local process
    assert held("h2:2:x", later, alive=False)  # another host: only expiry counts
    assert not held("h2:2:x", now - timedelta(seconds=1))
    assert parse_owner("h:42:abc") == ("h", 42)
    assert parse_owner("custom-owner") == ("custom-owner", None)


# --- whole runs against the simulator ---------------------------------------------------------


def test_two_domains_are_stored_with_versions(
    sim: Simulator, http: httpx.Client, app: App, caplog: pytest.LogCaptureFixture
):
    caplog.set_level(logging.INFO, logger="mirror.export.runner")
    events: list[RunEvent] = []
    client = vendor(sim, http)
    when = datetime(2026, 11, 21, 23, 59, tzinfo=UTC)
    first = run_export(app, client, "docs.a.test", on_event=events.append, now=lambda: when)
    second = run_export(app, client, "Docs.B.test")
    assert (first.state, second.state) == ("stored", "stored")
    assert first.ref.label == "2026-11-21" and second.ref.domain == "docs.b.test"
    for outcome in (first, second):
        assert outcome.ref.sha256 == sim.bundle_sha256(outcome.job_id)
        assert hash_file(outcome.blob_path).sha256 == outcome.ref.sha256
        assert outcome.blob_path == app.store.blob_path(outcome.ref.sha256)
        assert outcome.ref.format == "tar.gz" and outcome.file_count > 0
        assert not outcome.resumed
        kept = digests.load(app.store, outcome.ref.sha256, outcome.tree_sha256)
        assert kept is not None and len(kept) == outcome.file_count  # a delta pack's base side
    assert {b.sha256 for b in bundles(app)} == {first.ref.sha256, second.ref.sha256}
    assert [(v.domain, v.label) for v in versions(app)] == [
        ("docs.a.test", "2026-11-21"),
        ("docs.b.test", second.ref.label),
    ]
    assert all(r.state == RunState.STORED and not r.active for r in runs(app))
    assert all(r.lease_owner is None and r.finished_at is not None for r in runs(app))
    assert app.store.temp_files() == []
    states = [e.state for e in events if e.bytes_done is None and e.progress is None]
    assert states == ["pending", "started", "completed", "downloading", "downloaded", "stored"]
    assert any(e.progress is not None for e in events)
    assert any(e.bytes_done == first.ref.size and e.bytes_total == first.ref.size for e in events)
    logged = [r for r in caplog.records if r.getMessage() == "export state"]
    assert [getattr(r, "state", None) for r in logged][:6] == states
    assert all(getattr(r, "domain", None) and getattr(r, "run_id", None) for r in logged)
    assert all("X-Amz-" not in r.getMessage() for r in caplog.records)


def test_same_content_is_unchanged_and_makes_no_version(
    sim_factory: Callable[..., Simulator], http: httpx.Client, app: App
):
    sim = sim_factory(changes_per_export=0)
    client = vendor(sim, http)
    first = run_export(app, client, "docs.same.test")
    again = run_export(app, client, "docs.same.test")
    assert again.state == "unchanged" and again.ref.label == first.ref.label
    assert again.ref.sha256 == first.ref.sha256 and again.blob_path == first.blob_path
    assert again.job_id != first.job_id
    assert len(versions(app)) == 1 and len(bundles(app)) == 1
    assert [r.state for r in runs(app)] == [RunState.STORED, RunState.UNCHANGED]
    assert runs(app)[1].version_label == first.ref.label
    assert app.store.temp_files() == []
    sim.publish("docs.same.test")
    changed = run_export(app, client, "docs.same.test")
    assert changed.state == "stored" and changed.ref.label == f"{first.ref.label}.2"


def test_link_in_the_status_means_no_bundle_call(sim: Simulator, http: httpx.Client, app: App):
    sim.set_faults(global_flow_bundle_in_status=True)
    outcome = run_export(app, vendor(sim, http), "docs.status-link.test")
    assert outcome.state == "stored"
    assert outcome.job_id not in sim.stats.snapshot()["bundle_calls"]
    assert [r.state for r in runs(app)] == [RunState.STORED]


def test_project_flow(sim: Simulator, http: httpx.Client, make_app: Callable[..., App]):
    app = make_app(export_flow="project", project_id="proj_sim")
    client = vendor(sim, http, export_flow="project", project_id="proj_sim")
    outcome = run_export(app, client, "docs.sim.test")
    assert outcome.state == "stored" and outcome.ref.sha256 == sim.bundle_sha256(outcome.job_id)
    assert outcome.job_id not in sim.stats.snapshot()["bundle_calls"]


def test_version_and_paths_come_from_the_settings(
    sim: Simulator, http: httpx.Client, make_app: Callable[..., App]
):
    exports = [{"domain": "docs.paths.test", "version": "v7", "paths": ["guides/page-003"]}]
    app = make_app(exports=exports)
    outcome = run_export(app, vendor(sim, http), "docs.paths.test")
    assert runs(app)[0].requested_version == "v7"
    assert runs(app)[0].requested_paths == ["guides/page-003"]
    full = run_export(app, vendor(sim, http), "docs.other.test")
    assert outcome.file_count < full.file_count
    overridden = run_export(app, vendor(sim, http), "docs.paths.test", paths=[])
    assert runs(app, "docs.paths.test")[-1].requested_paths == []
    assert overridden.file_count <= outcome.file_count


def test_failed_vendor_job_fails_the_run(sim: Simulator, http: httpx.Client, app: App):
    sim.set_faults(fail_domains=["docs.broken.test"])
    with pytest.raises(OperationFailed, match="failed at the vendor: Export failed"):
        run_export(app, vendor(sim, http), "docs.broken.test")
    (run,) = runs(app)
    assert run.state == RunState.FAILED and not run.active and "timed out" in (run.error or "")
    assert versions(app) == [] and app.store.temp_files() == []
    # the next run is a new one
    sim.set_faults(fail_domains=[])
    assert run_export(app, vendor(sim, http), "docs.broken.test").run_id != run.id


@pytest.mark.parametrize("kind", sorted(MALICIOUS_KINDS))
def test_unsafe_archive_stores_nothing(sim: Simulator, http: httpx.Client, app: App, kind: str):
    sim.set_faults(malicious_domains={"docs.evil.test": kind})
    with pytest.raises(IntegrityError):
        run_export(app, vendor(sim, http), "docs.evil.test")
    (run,) = runs(app)
    assert run.state == RunState.FAILED and not run.active and run.error
    assert bundles(app) == [] and versions(app) == []
    assert list(app.store.iter_blobs()) == [] and app.store.temp_files() == []


def test_cut_download_resumes_to_the_right_bytes(
    sim_factory: Callable[..., Simulator], http: httpx.Client, app: App
):
    sim = sim_factory(bundle_size=12 * MiB)
    sim.set_faults(cut_after_bytes=5 * MiB, cuts_remaining=2)
    outcome = run_export(app, vendor(sim, http), "docs.cut.test", sleep=lambda _s: None)
    assert outcome.ref.sha256 == sim.bundle_sha256(outcome.job_id)
    assert served(sim, outcome.job_id) == outcome.ref.size
    assert sim.faults.cuts_remaining == 0
    assert outcome.tree_sha256 == inspect_archive(outcome.blob_path).tree_sha256


def test_range_ignored_restarts_and_is_still_right(
    sim_factory: Callable[..., Simulator], http: httpx.Client, app: App
):
    sim = sim_factory(bundle_size=6 * MiB)
    sim.set_faults(cut_after_bytes=2 * MiB, cuts_remaining=1, ignore_range=True)
    outcome = run_export(app, vendor(sim, http), "docs.norange.test", sleep=lambda _s: None)
    assert outcome.ref.sha256 == sim.bundle_sha256(outcome.job_id)
    assert served(sim, outcome.job_id) == 2 * MiB + outcome.ref.size


def test_expired_link_is_refreshed(sim: Simulator, http: httpx.Client, app: App):
    def expire_when_downloading(event: RunEvent) -> None:
        if event.state == RunState.DOWNLOADING and event.bytes_done is None:
            sim.expire_links()

    outcome = run_export(
        app, vendor(sim, http), "docs.expire.test", on_event=expire_when_downloading
    )
    assert outcome.ref.sha256 == sim.bundle_sha256(outcome.job_id)
    assert sim.stats.snapshot()["bundle_calls"][outcome.job_id] == 2
    assert runs(app)[0].bundle_url is not None


def test_saved_link_past_its_expiry_is_replaced_before_downloading(
    sim_factory: Callable[..., Simulator], http: httpx.Client, app: App
):
    sim = sim_factory(link_ttl=1.0)
    cancel = threading.Event()

    def stop_at_download(event: RunEvent) -> None:
        if event.state == RunState.DOWNLOADING:
            cancel.set()

    with pytest.raises(Interrupted):
        run_export(
            app, vendor(sim, http), "docs.ttl.test", cancel=cancel, on_event=stop_at_download
        )
    (saved,) = runs(app)
    expires = saved.bundle_expires_at
    assert saved.bundle_url is not None and expires is not None
    while datetime.now(UTC) <= expires.replace(tzinfo=UTC):  # truly past it, however slowly
        time.sleep(0.05)
    sim.config.link_ttl = 300.0  # the fresh link outlives a busy machine's download
    outcome = run_export(app, vendor(sim, http), "docs.ttl.test")
    assert outcome.resumed and outcome.ref.sha256 == sim.bundle_sha256(outcome.job_id)
    assert sim.stats.snapshot()["bundle_calls"][outcome.job_id] == 2


def test_rate_limits_and_503_are_waited_out(sim: Simulator, http: httpx.Client, app: App):
    sleeps: list[float] = []

    def api_sleep(seconds: float) -> None:
        sleeps.append(seconds)
        if len(sleeps) == 2:  # after two 429s, two 503s, then the vendor is fine again
            sim.set_faults(error_rate=1.0, error_status=503, retry_after="3")
        if len(sleeps) == 4:
            sim.set_faults(error_rate=0.0)

    def on_event(event: RunEvent) -> None:
        if event.state == RunState.STARTED and event.progress is None and not sleeps:
            sim.set_faults(rate_limit_next=2, retry_after="2")

    client = VendorClient(http, base_url=sim.url, key=sim.key, sleep=api_sleep)
    outcome = run_export(app, client, "docs.busy.test", on_event=on_event)
    assert outcome.state == "stored"
    assert len(sleeps) == 4
    assert min(sleeps[:2]) >= 2.0 and min(sleeps[2:]) >= 3.0


def test_vendor_busy_defers_and_the_same_run_starts_later(
    sim_factory: Callable[..., Simulator], http: httpx.Client, app: App
):
    sim = sim_factory()
    sim.set_faults(hold_jobs=True)
    client = vendor(sim, http)
    other = client.start_export("docs.busy409.test")  # one active job for the domain already
    with pytest.raises(TemporaryFailure, match="409") as caught:
        run_export(app, client, "docs.busy409.test")
    assert not isinstance(caught.value, Interrupted)
    (run,) = runs(app)
    assert run.state == RunState.PENDING and run.active
    assert run.lease_owner is None and run.vendor_started_at is None  # refused: not counted
    sim.set_faults(hold_jobs=False)
    deadline = time.monotonic() + 60
    while not client.export_status(other.job_id).completed:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    outcome = run_export(app, client, "docs.busy409.test")
    assert outcome.run_id == run.id and outcome.resumed
    assert len(sim.stats.snapshot()["starts"]["docs.busy409.test"]) == 2


def test_vendor_start_rate_limit_defers(
    sim_factory: Callable[..., Simulator], http: httpx.Client, app: App
):
    sim = sim_factory(max_starts_per_hour=1)
    run_export(app, vendor(sim, http), "docs.one.test")
    with pytest.raises(TemporaryFailure) as caught:
        run_export(app, vendor(sim, http), "docs.two.test")
    assert caught.value.retry_after is not None and caught.value.retry_after > 0
    assert runs(app, "docs.two.test")[0].state == RunState.PENDING


def test_start_budget_is_shared_by_domains(
    sim: Simulator, http: httpx.Client, make_app: Callable[..., App]
):
    app = make_app(max_starts_per_hour=2)
    client = vendor(sim, http)
    run_export(app, client, "docs.b1.test")
    run_export(app, client, "docs.b2.test")
    with pytest.raises(TemporaryFailure, match="start budget") as caught:
        run_export(app, client, "docs.b3.test")
    assert caught.value.retry_after is not None and 3500 < caught.value.retry_after <= 3600
    assert "docs.b3.test" not in sim.stats.snapshot()["start_attempts"]
    assert runs(app, "docs.b3.test") == []  # budgeted in the claim: no run without a start
    with app.db.session() as session:
        assert start_budget_wait(session, datetime.now(UTC), 3) == 0
        assert start_budget_wait(session, datetime.now(UTC) + timedelta(hours=1), 2) == 0


def test_bad_request_and_auth_fail_the_run_without_counting_a_start(
    sim: Simulator, http: httpx.Client, app: App
):
    sim.set_faults(bad_request_domains=["docs.bad.test"], not_enabled_domains=["docs.off.test"])
    with pytest.raises(ConfigError):
        run_export(app, vendor(sim, http), "docs.bad.test")
    with pytest.raises(AuthError, match="not enabled"):
        run_export(app, vendor(sim, http), "docs.off.test")
    assert [(r.state, r.vendor_started_at) for r in runs(app)] == [
        (RunState.FAILED, None),
        (RunState.FAILED, None),
    ]


def test_second_concurrent_run_of_a_domain_is_refused(
    sim_factory: Callable[..., Simulator], http: httpx.Client, app: App
):
    sim = sim_factory()
    sim.set_faults(hold_jobs=True)  # the first run polls until the test lets its job end
    results: list[Any] = []
    first = threading.Thread(
        target=lambda: results.append(run_export(app, vendor(sim, http), "docs.lease.test"))
    )
    first.start()
    try:
        deadline = time.monotonic() + 60
        while not any(r.vendor_job_id for r in runs(app)):
            assert time.monotonic() < deadline
            time.sleep(0.02)
        with pytest.raises(TemporaryFailure, match="being exported by") as caught:
            run_export(app, vendor(sim, http), "docs.lease.test")
    finally:
        sim.set_faults(hold_jobs=False)
        first.join(60)
    assert caught.value.retry_after is not None and caught.value.retry_after > 0
    assert results and results[0].state == "stored"
    assert len(sim.stats.snapshot()["starts"]["docs.lease.test"]) == 1


def test_lease_of_a_dead_local_process_is_taken_over(sim: Simulator, http: httpx.Client, app: App):
    cancel = threading.Event()
    with pytest.raises(Interrupted):
        run_export(
            app,
            vendor(sim, http),
            "docs.dead.test",
            cancel=cancel,
            on_event=lambda e: cancel.set() if e.state == RunState.STARTED else None,
        )
    (run,) = runs(app)
    future = datetime.now(UTC) + timedelta(minutes=10)
    with app.db.session() as session:
        session.execute(
            update(ExportRun)
            .where(ExportRun.id == run.id)
            .values(lease_owner=f"other-host:{dead_pid()}:x", lease_expires_at=future)
        )
    with pytest.raises(TemporaryFailure, match="other-host"):
        run_export(app, vendor(sim, http), "docs.dead.test")
    with app.db.session() as session:
        session.execute(
            update(ExportRun)
            .where(ExportRun.id == run.id)
            .values(lease_owner=f"{socket.gethostname()}:{dead_pid()}:x")
        )
    outcome = run_export(app, vendor(sim, http), "docs.dead.test")
    assert outcome.resumed and outcome.run_id == run.id
    assert len(sim.stats.snapshot()["starts"]["docs.dead.test"]) == 1


def test_cancel_while_downloading_saves_state_and_resumes(
    sim_factory: Callable[..., Simulator], http: httpx.Client, app: App
):
    sim = sim_factory(bundle_size=24 * MiB)
    cancel = threading.Event()

    def stop_midway(event: RunEvent) -> None:
        if (event.bytes_done or 0) > 0:  # the first progress reading (after a 1 MiB block)
            cancel.set()

    with pytest.raises(Interrupted):
        run_export(app, vendor(sim, http), "docs.cancel.test", cancel=cancel, on_event=stop_midway)
    (run,) = unfinished_runs(app)
    assert run.state == RunState.DOWNLOADING and run.lease_owner is None
    assert 0 < run.bytes_done < 24 * MiB
    assert app.store.temp_path(run.partial_name or "").stat().st_size == run.bytes_done
    assert run.vendor_job_id is not None
    before = served(sim, run.vendor_job_id)
    outcome = run_export(app, vendor(sim, http), "docs.cancel.test")
    assert outcome.resumed and outcome.run_id == run.id
    assert outcome.ref.sha256 == sim.bundle_sha256(run.vendor_job_id)
    assert served(sim, run.vendor_job_id) - before == outcome.ref.size - run.bytes_done
    assert len(sim.stats.snapshot()["starts"]["docs.cancel.test"]) == 1
    assert unfinished_runs(app) == []


def test_partial_beyond_the_checkpoint_is_cut_back(
    sim_factory: Callable[..., Simulator], http: httpx.Client, app: App
):
    sim = sim_factory(bundle_size=20 * MiB)
    cancel = threading.Event()
    with pytest.raises(Interrupted):
        run_export(
            app,
            vendor(sim, http),
            "docs.tail.test",
            cancel=cancel,
            on_event=lambda e: cancel.set() if (e.bytes_done or 0) > 0 else None,
        )
    (run,) = runs(app)
    partial = app.store.temp_path(run.partial_name or "")
    with open(partial, "ab") as handle:  # bytes that were never checkpointed: garbage
        handle.write(b"\0" * 123_456)
    outcome = run_export(app, vendor(sim, http), "docs.tail.test")
    assert outcome.ref.sha256 == sim.bundle_sha256(outcome.job_id)


def test_resume_after_the_download_rehashes_and_stores(
    sim: Simulator, http: httpx.Client, app: App
):
    cancel = threading.Event()

    def stop_after_download(event: RunEvent) -> None:
        if event.state == RunState.DOWNLOADED:
            cancel.set()

    with pytest.raises(Interrupted):
        run_export(
            app, vendor(sim, http), "docs.dl.test", cancel=cancel, on_event=stop_after_download
        )
    (run,) = runs(app)
    assert run.state == RunState.DOWNLOADED and run.sha256
    outcome = run_export(app, vendor(sim, http), "docs.dl.test")
    assert outcome.state == "stored" and outcome.ref.sha256 == run.sha256 and outcome.resumed
    assert served(sim, outcome.job_id) == outcome.ref.size  # nothing fetched again
    assert digests.load(app.store, outcome.ref.sha256, outcome.tree_sha256) is not None


def test_crash_between_adopt_and_commit_is_finished_from_the_blob(
    sim: Simulator, http: httpx.Client, app: App
):
    cancel = threading.Event()
    with pytest.raises(Interrupted):
        run_export(
            app,
            vendor(sim, http),
            "docs.adopt.test",
            cancel=cancel,
            on_event=lambda e: cancel.set() if e.state == RunState.DOWNLOADED else None,
        )
    (run,) = runs(app)
    assert run.sha256 is not None
    app.store.adopt(app.store.temp_path(run.partial_name or ""), run.sha256, run.bytes_done)
    outcome = run_export(app, vendor(sim, http), "docs.adopt.test")
    assert outcome.state == "stored" and outcome.ref.sha256 == run.sha256
    assert [b.sha256 for b in bundles(app)] == [run.sha256]


def test_damaged_finished_download_is_fetched_again(sim: Simulator, http: httpx.Client, app: App):
    cancel = threading.Event()
    with pytest.raises(Interrupted):
        run_export(
            app,
            vendor(sim, http),
            "docs.rot.test",
            cancel=cancel,
            on_event=lambda e: cancel.set() if e.state == RunState.DOWNLOADED else None,
        )
    (run,) = runs(app)
    partial = app.store.temp_path(run.partial_name or "")
    data = bytearray(partial.read_bytes())
    data[len(data) // 2] ^= 0xFF
    partial.write_bytes(bytes(data))
    outcome = run_export(app, vendor(sim, http), "docs.rot.test")
    assert outcome.ref.sha256 == sim.bundle_sha256(outcome.job_id)
    assert served(sim, outcome.job_id) == 2 * outcome.ref.size
    assert len(sim.stats.snapshot()["starts"]["docs.rot.test"]) == 1


def test_cancel_while_polling_keeps_the_job(sim_factory: Callable[..., Simulator], http, app):
    sim = sim_factory()
    sim.set_faults(hold_jobs=True)  # still polling when the first progress is seen
    cancel = threading.Event()
    with pytest.raises(Interrupted, match="state started"):
        run_export(
            app,
            vendor(sim, http),
            "docs.poll.test",
            cancel=cancel,
            on_event=lambda e: cancel.set() if e.progress is not None else None,
        )
    (run,) = unfinished_runs(app)
    assert run.state == RunState.STARTED
    sim.set_faults(hold_jobs=False)
    outcome = run_export(app, vendor(sim, http), "docs.poll.test")
    assert outcome.job_id == run.vendor_job_id
    assert len(sim.stats.snapshot()["starts"]["docs.poll.test"]) == 1


def test_a_start_of_unknown_outcome_is_not_free(sim: Simulator, http: httpx.Client, app: App):
    """A run that died during the start call is started again on the same row (and logged)."""
    stamp = datetime.now(UTC) - timedelta(minutes=1)
    with app.db.session() as session:
        row = ExportRun(
            domain="docs.unknown.test",
            state=RunState.PENDING,
            vendor_started_at=stamp,
            lease_owner=f"{socket.gethostname()}:{dead_pid()}:x",
            lease_expires_at=datetime.now(UTC) + timedelta(minutes=5),
        )
        session.add(row)
        session.flush()
        row.partial_name = f"run-{row.id}.part"
    outcome = run_export(app, vendor(sim, http), "docs.unknown.test")
    assert outcome.run_id == row.id and outcome.resumed
    assert len(sim.stats.snapshot()["starts"]["docs.unknown.test"]) == 1


def test_not_a_domain_is_a_config_error_before_anything(
    sim: Simulator, http: httpx.Client, app: App
):
    with pytest.raises(ConfigError, match="not a documentation domain"):
        run_export(app, vendor(sim, http), "not a domain/x")
    assert runs(app) == [] and sim.stats.snapshot()["requests"] == 0


# --- issue 9: the claim re-checks, in its own transaction, that the domain is due -------------


def _due_check_of(app: App, domain: str) -> Any:
    from mirror.export.status import due_check

    return due_check(
        app.settings.export_for(domain), datetime.now(UTC) - timedelta(hours=2), jitter=0.0
    )


def test_claim_refuses_a_domain_exported_since_the_caller_looked(
    sim: Simulator, http: httpx.Client, make_app: Callable[..., App]
):
    """A replica with a stale view asks to export a domain another just stored: the claim's
    re-check finds the finished run and refuses (NotDue) without a run or a vendor job."""
    from mirror.export.lease import NotDue

    app = make_app(exports=[{"domain": "docs.due.test", "every": "1h"}])
    client = vendor(sim, http)
    run_export(app, client, "docs.due.test", due_check=_due_check_of(app, "docs.due.test"))
    with pytest.raises(NotDue) as caught:
        run_export(app, client, "docs.due.test", due_check=_due_check_of(app, "docs.due.test"))
    assert caught.value.retry_after is not None and 3500 < caught.value.retry_after <= 3600
    assert len(runs(app, "docs.due.test")) == 1
    assert len(sim.stats.snapshot()["starts"]["docs.due.test"]) == 1
    outcome = run_export(app, client, "docs.due.test")  # an operator's explicit run still runs
    assert outcome.state in ("stored", "unchanged")


@pytest.mark.parametrize(
    "backend", ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]
)
def test_stale_replicas_racing_for_one_domain_export_it_once(
    backend: str, sim: Simulator, store_dir: Path, request: pytest.FixtureRequest
):
    """Six processes' worth of claims at the same instant, each sure the domain is due:
    one vendor job, one version; the others are told it is held or no longer due."""
    from mirror.export.lease import HeldByOther, NotDue

    document: dict[str, Any] = {
        "store": {"path": str(store_dir)},
        "api": FAST_API,
        "exports": [{"domain": "docs.race.test", "every": "1h"}],
    }
    if backend == "postgresql":
        document["store"]["database"] = request.getfixturevalue("postgres_database")
    apps = [App(settings_from_dict(document)) for _ in range(6)]
    apps[0].binding  # noqa: B018 - bind first, so the race is about the claim alone
    barrier = threading.Barrier(len(apps))
    outcomes: list[str] = []

    def replica(app: App) -> None:
        with httpx.Client(timeout=30) as http:
            check = _due_check_of(app, "docs.race.test")
            barrier.wait(120)
            try:
                run_export(app, vendor(sim, http), "docs.race.test", due_check=check)
                outcomes.append("exported")
            except (HeldByOther, NotDue) as exc:
                outcomes.append(type(exc).__name__)

    threads = [threading.Thread(target=replica, args=(app,)) for app in apps]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    try:
        assert outcomes.count("exported") == 1, outcomes
        assert len(outcomes) == len(apps)
        assert len(sim.stats.snapshot()["starts"]["docs.race.test"]) == 1
        assert len(versions(apps[0], "docs.race.test")) == 1
    finally:
        for app in apps:
            app.close()


def test_claim_budgets_the_start_in_the_same_transaction(
    sim: Simulator, http: httpx.Client, make_app: Callable[..., App]
):
    """The new run carries its start stamp from the claim: no window where two claims both
    see budget left, and no 'ended without a job id' warning for a fresh run."""
    app = make_app(max_starts_per_hour=1)
    seen: list[RunEvent] = []
    run_export(app, vendor(sim, http), "docs.b.test", on_event=seen.append)
    (run,) = runs(app, "docs.b.test")
    assert run.vendor_started_at is not None and run.vendor_started_at <= run.created_at
    assert run.partial_name == app.binding.partial_name(run.id)
    with pytest.raises(TemporaryFailure, match="start budget"):
        run_export(app, vendor(sim, http), "docs.c.test")
    assert runs(app, "docs.c.test") == []
