"""The vendor API simulator, exercised over real HTTP on loopback."""

from __future__ import annotations

import gzip
import hashlib
import io
import itertools
import json
import logging
import os
import queue
import signal
import socket
import struct
import subprocess
import sys
import tarfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from mirror.sim import SimConfig, Simulator
from mirror.sim.diff import compare_bundles
from mirror.sim.site import SiteSpec, build_bundle
from mirror.sim.tree import site_plan
from tests.fixtures.cli import REPO

DOMAIN = "docs.example.com"
MiB = 1024 * 1024


@pytest.fixture
def sim_config() -> SimConfig:
    """Faster than the shared fixture's timings, to keep this module quick."""
    return SimConfig(queue_seconds=0.02, run_seconds=0.1)


@pytest.fixture
def api(sim: Simulator) -> Iterator[httpx.Client]:
    with httpx.Client(
        base_url=sim.url, headers={"Authorization": f"Bearer {sim.key}"}, timeout=10
    ) as client:
        yield client


def client_for(sim: Simulator) -> httpx.Client:
    return httpx.Client(
        base_url=sim.url, headers={"Authorization": f"Bearer {sim.key}"}, timeout=10
    )


def start(client: httpx.Client, domain: str = DOMAIN, **body: Any) -> str:
    response = client.post("/v1/static-export/jobs", json={"domain": domain, **body})
    assert response.status_code == 202, response.text
    job_id = response.json()["jobId"]
    assert isinstance(job_id, str)
    return job_id


def wait_done(client: httpx.Client, path: str, timeout: float = 60.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        body: dict[str, Any] = client.get(path).json()
        if body["status"] in ("completed", "failed"):
            return body
        time.sleep(0.02)
    raise AssertionError(f"{path} did not finish in {timeout}s")


def export(client: httpx.Client, domain: str = DOMAIN) -> tuple[str, dict[str, Any]]:
    """Start, wait, ask for the bundle; returns the job id and the bundle answer."""
    job_id = start(client, domain)
    assert wait_done(client, f"/v1/static-export/jobs/{job_id}")["status"] == "completed"
    response = client.post(f"/v1/static-export/jobs/{job_id}/bundle")
    assert response.status_code == 200, response.text
    return job_id, response.json()


def members(data: bytes) -> dict[str, bytes]:
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        out: dict[str, bytes] = {}
        for member in tar.getmembers():
            if member.isfile():
                extracted = tar.extractfile(member)
                assert extracted is not None
                out[member.name] = extracted.read()
        return out


# ---- auth ----------------------------------------------------------------------------------


def test_missing_or_wrong_key_is_401_and_counted(sim: Simulator) -> None:
    paths = [
        ("POST", "/v1/static-export/jobs"),
        ("GET", "/v1/static-export/jobs/se_0000000000000000"),
        ("GET", "/v2/agent/proj_sim/job/aj_pr"),
        ("GET", "/v1/static-export/proj_sim/jobs/x"),
    ]
    for headers in ({}, {"Authorization": "Bearer mint_wrong"}, {"Authorization": sim.key}):
        for method, path in paths:
            response = httpx.request(
                method, sim.url + path, headers=headers, json={"domain": "a.b"}
            )
            assert response.status_code == 401
            assert response.json() == {"error": "Invalid or missing admin API key"}
            assert sim.key not in response.text
    assert sim.stats.auth_failures == 12
    assert sim.stats.starts == {}


# ---- global flow ---------------------------------------------------------------------------


def poll_until(
    client: httpx.Client, path: str, statuses: set[str], seen: list[dict[str, Any]]
) -> None:
    """GET `path` until its status is one of `statuses` (generous deadline), keeping each."""
    deadline = time.monotonic() + 60
    while not seen or seen[-1]["status"] not in statuses:
        assert time.monotonic() < deadline, f"{path} never became {statuses}: {seen[-1:]}"
        seen.append(client.get(path).json())
        time.sleep(0.01)  # a poll's pace, not a wait for the job


def test_global_flow_goes_queued_running_completed(sim: Simulator, api: httpx.Client) -> None:
    sim.set_faults(hold_jobs=True)  # seen running however slowly this test polls
    response = api.post("/v1/static-export/jobs", json={"domain": DOMAIN, "version": "2026-11-21"})
    assert response.status_code == 202
    job = response.json()
    assert job["jobId"].startswith("se_") and len(job["jobId"]) == 19
    assert (job["status"], job["progress"], job["pageCount"]) == ("queued", 0, 0)
    assert job["createdAt"].endswith("Z") and job["updatedAt"]
    seen: list[dict[str, Any]] = []
    path = f"/v1/static-export/jobs/{job['jobId']}"
    poll_until(api, path, {"running"}, seen)
    sim.set_faults(hold_jobs=False)
    poll_until(api, path, {"completed", "failed"}, seen)
    states = [s["status"] for s in seen]
    phase = {"queued": 0, "running": 1, "completed": 2}
    assert [phase[s] for s in states] == sorted(phase[s] for s in states)
    assert "running" in states and states[-1] == "completed"
    running = [s for s in seen if s["status"] == "running"]
    assert all(isinstance(s["progress"], int) and 0 <= s["progress"] < 100 for s in running)
    counts = [s["pageCount"] for s in running]
    assert counts == sorted(counts)
    assert seen[-1]["progress"] == 100 and seen[-1]["pageCount"] == sim.config.pages
    assert "bundleUrl" not in seen[-1] and "error" not in seen[-1]
    assert sim.stats.status_calls[job["jobId"]] == len(seen)
    assert sim.stats.starts == {DOMAIN: [job["jobId"]]}


def test_bundle_is_409_until_completed_then_downloads_matching_bytes(
    sim: Simulator, api: httpx.Client
) -> None:
    sim.set_faults(hold_jobs=True)
    job_id = start(api)
    early = api.post(f"/v1/static-export/jobs/{job_id}/bundle")
    assert early.status_code == 409 and "error" in early.json()
    sim.set_faults(hold_jobs=False)
    wait_done(api, f"/v1/static-export/jobs/{job_id}")
    first = api.post(f"/v1/static-export/jobs/{job_id}/bundle").json()
    second = api.post(f"/v1/static-export/jobs/{job_id}/bundle").json()
    assert first["jobId"] == job_id and first["bundleUrl"] != second["bundleUrl"]
    assert first["expiresAt"].endswith("Z")
    url = httpx.URL(first["bundleUrl"])
    assert url.path.endswith(f"/docs-export-{time.strftime('%Y-%m-%d', time.gmtime())}.tar.gz")
    assert url.params["X-Amz-Algorithm"] == "AWS4-HMAC-SHA256"
    assert url.params["X-Amz-Expires"] == "300"
    download = httpx.get(first["bundleUrl"])
    assert download.status_code == 200
    assert len(download.content) == first["sizeBytes"] == int(download.headers["content-length"])
    assert hashlib.sha256(download.content).hexdigest() == sim.bundle_sha256(job_id)
    assert download.headers["accept-ranges"] == "bytes" and download.headers["etag"]
    files = members(download.content)
    assert f"<title>{DOMAIN} documentation".encode() in files["index.html"]
    assert "guides/page-001/index.html" in files and "assets/site.css" in files
    assert sum(name.endswith(".html") for name in files) == sim.config.pages
    assert sim.stats.bundle_calls[job_id] == 3
    assert sim.stats.bytes_served[job_id] == first["sizeBytes"]
    assert sim.stats.downloads[-1]["status"] == 200


def test_unknown_job_is_404(api: httpx.Client) -> None:
    assert api.get("/v1/static-export/jobs/se_ffffffffffffffff").status_code == 404
    response = api.post("/v1/static-export/jobs/se_ffffffffffffffff/bundle")
    assert response.status_code == 404 and response.json()["error"]


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"domain": ""},
        {"domain": "https://docs.example.com"},
        {"domain": "docs.example.com/docs"},
        {"domain": 7},
        {"domain": DOMAIN, "paths": "index"},
        {"domain": DOMAIN, "version": 3},
    ],
)
def test_bad_start_body_is_400(sim: Simulator, api: httpx.Client, body: dict[str, Any]) -> None:
    response = api.post("/v1/static-export/jobs", json=body)
    assert response.status_code == 400 and response.json()["error"]
    assert sim.stats.starts == {}


def test_not_enabled_and_bad_request_domains(sim: Simulator, api: httpx.Client) -> None:
    sim.faults.not_enabled_domains.add("locked.example.com")
    sim.faults.bad_request_domains.add("odd.example.com")
    refused = api.post("/v1/static-export/jobs", json={"domain": "locked.example.com"})
    assert refused.status_code == 403
    assert refused.json() == {"error": "Static export is not enabled for this organization"}
    assert api.post("/v1/static-export/jobs", json={"domain": "odd.example.com"}).status_code == 400
    assert sim.stats.start_attempts == {"locked.example.com": 1, "odd.example.com": 1}
    assert sim.stats.starts == {}


def test_second_concurrent_start_is_409_until_the_first_ends(
    sim: Simulator, api: httpx.Client
) -> None:
    sim.set_faults(hold_jobs=True)
    job_id = start(api)
    busy = api.post("/v1/static-export/jobs", json={"domain": DOMAIN})
    assert busy.status_code == 409
    assert busy.json() == {
        "error": "A static export job is already in progress for this deployment"
    }
    start(api, "other.example.com")
    assert api.post("/v1/static-export/jobs", json={"domain": DOMAIN}).status_code == 409
    sim.set_faults(hold_jobs=False)
    wait_done(api, f"/v1/static-export/jobs/{job_id}")
    start(api)


def test_parallel_starts_allowed_when_configured(sim_factory: Callable[..., Simulator]) -> None:
    sim = sim_factory(one_active_job=False)
    with client_for(sim) as client:
        start(client)
        start(client)
    assert len(sim.stats.starts[DOMAIN]) == 2


def test_starts_over_the_hourly_budget_are_429_with_retry_after(
    sim_factory: Callable[..., Simulator],
) -> None:
    sim = sim_factory(max_starts_per_hour=2, one_active_job=False)
    with client_for(sim) as client:
        start(client, "a.example.com")
        start(client, "b.example.com")
        refused = client.post("/v1/static-export/jobs", json={"domain": "c.example.com"})
        project = client.post("/v1/static-export/proj_sim/jobs")
    for response in (refused, project):
        assert response.status_code == 429
        assert response.json()["error"].startswith("Rate limit exceeded")
        assert 3590 <= int(response.headers["retry-after"]) <= 3600
    assert sim.stats.start_attempts == {
        "a.example.com": 1,
        "b.example.com": 1,
        "c.example.com": 1,
        "docs.sim.test": 1,
    }
    assert sum(len(ids) for ids in sim.stats.starts.values()) == 2


# ---- project flow --------------------------------------------------------------------------


def test_project_flow_status_carries_a_fresh_bundle_url(sim: Simulator, api: httpx.Client) -> None:
    sim.set_faults(hold_jobs=True)
    response = api.post("/v1/static-export/proj_sim/jobs")
    assert response.status_code == 202
    job_id = response.json()["jobId"]
    assert api.post("/v1/static-export/proj_sim/jobs").status_code == 409
    sim.set_faults(hold_jobs=False)
    done = wait_done(api, f"/v1/static-export/proj_sim/jobs/{job_id}")
    again = api.get(f"/v1/static-export/proj_sim/jobs/{job_id}").json()
    assert done["status"] == "completed" and done["error"] is None
    assert "progress" not in done and "pageCount" not in done
    assert done["bundleUrl"] != again["bundleUrl"]
    download = httpx.get(done["bundleUrl"])
    assert len(download.content) == done["sizeBytes"]
    assert hashlib.sha256(download.content).hexdigest() == sim.bundle_sha256(job_id)
    assert b"docs.sim.test documentation" in members(download.content)["index.html"]
    assert sim.stats.starts == {"docs.sim.test": [job_id]}


def test_project_flow_base_path_domain_and_errors(api: httpx.Client) -> None:
    assert api.post("/v1/static-export/proj_other/jobs").status_code == 404
    assert api.get("/v1/static-export/proj_other/jobs/se_1").status_code == 404
    bad = api.post("/v1/static-export/proj_sim/jobs", json={"basePath": "/elsewhere"})
    assert bad.status_code == 400
    response = api.post(
        "/v1/static-export/proj_sim/jobs", json={"basePath": "/docs", "domain": "acme.example.org"}
    )
    assert response.status_code == 202
    done = wait_done(api, f"/v1/static-export/proj_sim/jobs/{response.json()['jobId']}")
    assert "/acme-export-" in done["bundleUrl"]
    index = members(httpx.get(done["bundleUrl"]).content)["index.html"]
    assert b'href="/docs/assets/site.css"' in index


def test_bundle_url_placement_and_tolerance_faults(sim: Simulator, api: httpx.Client) -> None:
    sim.set_faults(
        global_flow_bundle_in_status=True, project_flow_bundle_in_status=False, omit_size=True
    )
    job_id = start(api)
    done = wait_done(api, f"/v1/static-export/jobs/{job_id}")
    assert "bundleUrl" in done and "sizeBytes" not in done and "expiresAt" not in done
    assert "bundleUrl" not in api.get(f"/v1/static-export/proj_sim/jobs/{job_id}").json()
    sim.set_faults(progress_as_string=True, unknown_state="rendering", hold_jobs=True)
    job_id = start(api, "strings.example.com")
    seen: list[dict[str, Any]] = []
    poll_until(api, f"/v1/static-export/jobs/{job_id}", {"rendering"}, seen)
    running = seen[-1]
    assert running["progress"].endswith("%") and running["pageCount"].isdigit()
    sim.set_faults(hold_jobs=False)
    assert wait_done(api, f"/v1/static-export/jobs/{job_id}")["progress"] == "100%"


def test_hostile_vendor_switches(sim: Simulator, api: httpx.Client) -> None:
    sim.set_faults(newer_revision=True)
    job_id = start(api)
    done = wait_done(api, f"/v1/static-export/jobs/{job_id}")
    assert "bundleUrl" in done and "sizeBytes" in done
    assert api.post(f"/v1/static-export/jobs/{job_id}/bundle").status_code == 404
    sim.set_faults(never_settle=True, bundle_url_override="file:///etc/passwd")
    assert api.get(f"/v1/static-export/jobs/{job_id}").json()["status"] == "running"
    sim.set_faults(never_settle=False, job_id_override="..")
    assert (
        api.post("/v1/static-export/jobs", json={"domain": "b.example.com"}).json()["jobId"] == ".."
    )
    assert wait_done(api, f"/v1/static-export/jobs/{job_id}")["bundleUrl"] == "file:///etc/passwd"
    sim.set_faults(huge_body_bytes=3_000_000, huge_body_status=502)
    huge = api.get(f"/v1/static-export/jobs/{job_id}")
    assert huge.status_code == 502 and len(huge.content) == 3_000_000
    with pytest.raises(ValueError, match="huge_body_bytes"):
        sim.set_faults(huge_body_bytes=-1)


def test_object_change_and_if_range(sim: Simulator, api: httpx.Client) -> None:
    job_id = start(api)
    wait_done(api, f"/v1/static-export/jobs/{job_id}")
    url = api.post(f"/v1/static-export/jobs/{job_id}/bundle").json()["bundleUrl"]
    first = httpx.get(url)
    etag = first.headers["ETag"]
    assert httpx.get(url, headers={"Range": "bytes=10-", "If-Range": etag}).status_code == 206
    sim.set_faults(change_object_on_range=1)
    changed = httpx.get(url, headers={"Range": "bytes=10-", "If-Range": etag})
    assert changed.status_code == 200 and changed.headers["ETag"] != etag
    sim.set_faults(ignore_if_range=True)
    spliced = httpx.get(url, headers={"Range": "bytes=10-", "If-Range": etag})
    assert spliced.status_code == 206 and spliced.headers["ETag"] == changed.headers["ETag"]
    sim.set_faults(redirect_downloads_to="ftp://elsewhere/x")
    moved = httpx.get(url)
    assert moved.status_code == 302 and moved.headers["Location"] == "ftp://elsewhere/x"


def test_failing_domain_ends_failed_with_error(sim: Simulator, api: httpx.Client) -> None:
    sim.faults.fail_domains.add("broken.example.com")
    job_id = start(api, "broken.example.com")
    done = wait_done(api, f"/v1/static-export/jobs/{job_id}")
    assert done["status"] == "failed" and "broken.example.com" in done["error"]
    assert api.post(f"/v1/static-export/jobs/{job_id}/bundle").status_code == 409
    with pytest.raises(ValueError):
        sim.bundle_sha256(job_id)


# ---- downloads -----------------------------------------------------------------------------


def test_range_requests(sim: Simulator, api: httpx.Client) -> None:
    _, bundle = export(api)
    url, size = bundle["bundleUrl"], bundle["sizeBytes"]
    full = httpx.get(url).content
    etag = httpx.head(url).headers["etag"]
    for header, first, last in (
        ("bytes=100-199", 100, 199),
        ("bytes=1000-", 1000, size - 1),
        ("bytes=-50", size - 50, size - 1),
        (f"bytes={size - 10}-{size + 500}", size - 10, size - 1),
    ):
        response = httpx.get(url, headers={"Range": header})
        assert response.status_code == 206, header
        assert response.headers["content-range"] == f"bytes {first}-{last}/{size}"
        assert response.content == full[first : last + 1]
    unsatisfiable = httpx.get(url, headers={"Range": f"bytes={size}-"})
    assert unsatisfiable.status_code == 416
    assert unsatisfiable.headers["content-range"] == f"bytes */{size}"
    matching = httpx.get(url, headers={"Range": "bytes=10-", "If-Range": etag})
    assert matching.status_code == 206
    stale = httpx.get(url, headers={"Range": "bytes=10-", "If-Range": '"0000"'})
    assert stale.status_code == 200 and stale.content == full
    head = httpx.head(url, headers={"Range": "bytes=0-9"})
    assert head.status_code == 206 and head.headers["content-length"] == "10"
    assert [d["range"] for d in sim.stats.downloads[:3]] == [None, None, "bytes=100-199"]
    assert sim.stats.downloads[1]["method"] == "HEAD"


def test_ignore_range_answers_the_full_body(sim: Simulator, api: httpx.Client) -> None:
    _, bundle = export(api)
    sim.faults.ignore_range = True
    response = httpx.get(bundle["bundleUrl"], headers={"Range": "bytes=100-"})
    assert response.status_code == 200 and len(response.content) == bundle["sizeBytes"]


def test_expired_links_answer_s3_access_denied(
    sim_factory: Callable[..., Simulator],
) -> None:
    sim = sim_factory()
    with client_for(sim) as client:
        job_id, bundle = export(client)
        assert httpx.head(bundle["bundleUrl"]).status_code == 200
        sim.config.link_ttl = 1.0  # links issued from now on
        short = client.post(f"/v1/static-export/jobs/{job_id}/bundle").json()
        expires = datetime.fromisoformat(short["expiresAt"].replace("Z", "+00:00"))
        while datetime.now(UTC) <= expires:  # the link's own time, however long that takes
            time.sleep(0.05)
        expired = httpx.get(short["bundleUrl"])
        sim.config.link_ttl = 300.0
        fresh = client.post(f"/v1/static-export/jobs/{job_id}/bundle").json()["bundleUrl"]
        assert httpx.head(fresh).status_code == 200
        assert httpx.head(bundle["bundleUrl"]).status_code == 200  # the first is still good
        sim.expire_links()
        revoked = httpx.get(fresh)
        after = client.post(f"/v1/static-export/jobs/{job_id}/bundle").json()["bundleUrl"]
        assert httpx.get(after).status_code == 200
    for response in (expired, revoked):
        assert response.status_code == 403
        assert response.headers["content-type"] == "application/xml"
        assert response.text.startswith("<?xml")
        assert "<Code>AccessDenied</Code><Message>Request has expired</Message>" in response.text


def test_tampered_link_answers_signature_does_not_match(api: httpx.Client) -> None:
    _, bundle = export(api)
    url = httpx.URL(bundle["bundleUrl"])
    longer = url.copy_set_param("X-Amz-Expires", "999999")
    forged = url.copy_set_param("X-Amz-Signature", "0" * 64)
    for candidate in (longer, forged):
        response = httpx.get(candidate)
        assert response.status_code == 403
        assert "<Code>SignatureDoesNotMatch</Code>" in response.text
    with_key = api.get(str(url))
    assert with_key.status_code == 400 and "<Code>InvalidArgument</Code>" in with_key.text
    unsigned = httpx.get(url.copy_remove_param("X-Amz-Signature"))
    assert unsigned.status_code == 403 and "<Code>AccessDenied</Code>" in unsigned.text


def test_cut_connection_gives_a_short_body_then_recovers(sim: Simulator, api: httpx.Client) -> None:
    job_id, bundle = export(api)
    sim.set_faults(cut_after_bytes=1000, cuts_remaining=1)
    with httpx.Client() as client:
        with pytest.raises(httpx.RemoteProtocolError):
            client.get(bundle["bundleUrl"])
        whole = client.get(bundle["bundleUrl"])
    assert len(whole.content) == bundle["sizeBytes"]
    assert sim.faults.cuts_remaining == 0
    cut, ok = sim.stats.downloads
    assert (cut["bytes_sent"], cut["complete"]) == (1000, False)
    assert (ok["bytes_sent"], ok["complete"]) == (bundle["sizeBytes"], True)
    assert sim.stats.bytes_served[job_id] == 1000 + bundle["sizeBytes"]


def test_bundle_size_pads_with_incompressible_bytes(
    sim_factory: Callable[..., Simulator],
) -> None:
    target = 3 * 1024 * 1024
    sim = sim_factory(bundle_size=target)
    with client_for(sim) as client:
        job_id, bundle = export(client)
    assert abs(bundle["sizeBytes"] - target) < 64 * 1024
    data = httpx.get(bundle["bundleUrl"]).content
    assert hashlib.sha256(data).hexdigest() == sim.bundle_sha256(job_id)
    files = members(data)
    assert len(files["assets/media/walkthrough.bin"]) > 2 * 1024 * 1024


# ---- archive content -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "check"),
    [
        ("traversal", lambda m: m.name == "../evil.html" and m.isfile()),
        ("absolute", lambda m: m.name == "/etc/evil" and m.isfile()),
        ("symlink", lambda m: m.issym() and m.linkname.startswith("../")),
        ("hardlink", lambda m: m.islnk() and m.linkname.startswith("../")),
        ("device", lambda m: m.ischr()),
        ("case_twins", lambda m: m.name == "INDEX.HTML" and m.isfile()),
        ("bomb", lambda m: m.isfile() and m.size >= 200 * 1024 * 1024),
    ],
)
def test_malicious_domains_get_archives_with_the_bad_member(
    sim: Simulator, api: httpx.Client, kind: str, check: Callable[[tarfile.TarInfo], bool]
) -> None:
    sim.faults.malicious_domains["evil.example.com"] = kind
    _, bundle = export(api, "evil.example.com")
    data = httpx.get(bundle["bundleUrl"]).content
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        found = [m for m in tar.getmembers() if check(m)]
        names = tar.getnames()
    assert found, f"no {kind} member"
    assert "index.html" in names
    if kind == "bomb":
        assert len(data) < 2 * 1024 * 1024


def test_each_export_changes_some_pages(sim: Simulator, api: httpx.Client) -> None:
    contents = [members(httpx.get(export(api)[1]["bundleUrl"]).content) for _ in range(2)]
    changed = [name for name in contents[0] if contents[0][name] != contents[1][name]]
    assert len(changed) == sim.config.changes_per_export
    sim.publish(DOMAIN)
    third = members(httpx.get(export(api)[1]["bundleUrl"]).content)
    html = [name for name in third if name.endswith(".html")]
    assert all(third[name] != contents[1][name] for name in html)


def test_unchanged_site_gives_same_files_in_different_bytes(
    sim_factory: Callable[..., Simulator],
) -> None:
    sim = sim_factory(changes_per_export=0)
    with client_for(sim) as client:
        first, second = (httpx.get(export(client)[1]["bundleUrl"]).content for _ in range(2))
    assert first != second
    assert members(first) == members(second)


def test_reuse_bundles_serves_an_unchanged_site_the_first_jobs_bytes(
    sim_factory: Callable[..., Simulator],
) -> None:
    """The benchmarks' switch: the vendor's packaging once, then the same bytes (a site
    that changes is packaged afresh)."""
    sim = sim_factory(changes_per_export=0, reuse_bundles=True)
    with client_for(sim) as client:
        first, second = (httpx.get(export(client)[1]["bundleUrl"]).content for _ in range(2))
        sim.config.changes_per_export = 1
        changed = httpx.get(export(client)[1]["bundleUrl"]).content
    assert first == second
    assert changed != first and members(changed) != members(first)


# ---- agent jobs ----------------------------------------------------------------------------


def test_agent_job_lifecycles(sim: Simulator, api: httpx.Client) -> None:
    sim.set_faults(hold_jobs=True)
    ids = {
        outcome: sim.add_agent_job(outcome, seconds=0.15)
        for outcome in ("pr", "no_changes", "failed", "archived")
    }
    for job_id in ids.values():
        active = api.get(f"/v2/agent/proj_sim/job/{job_id}").json()
        assert active["status"] == "active" and active["prLink"] is None
        assert active["archivedAt"] is None
    assert set(active) == {"id", "status", "source", "model", "prLink", "createdAt", "archivedAt"}
    assert active["source"]["repository"].startswith("https://")
    assert sim.stats.agent_calls == {job_id: 1 for job_id in ids.values()}
    sim.set_faults(hold_jobs=False)
    ended = datetime.now(UTC) + timedelta(seconds=0.15)
    while datetime.now(UTC) <= ended:  # the jobs' own 0.15 s, however long that takes
        time.sleep(0.02)
    final = {k: api.get(f"/v2/agent/proj_sim/job/{v}").json() for k, v in ids.items()}
    assert final["pr"]["status"] == "completed"
    assert final["pr"]["prLink"].startswith("https://github.com/")
    assert (final["no_changes"]["status"], final["no_changes"]["prLink"]) == ("completed", None)
    assert final["failed"]["status"] == "failed"
    assert final["archived"]["status"] == "archived" and final["archived"]["archivedAt"]
    for path in ("/v2/agent/proj_sim/job/aj_missing", f"/v2/agent/proj_other/job/{ids['pr']}"):
        missing = api.get(path)
        assert missing.status_code == 404 and missing.json() == {"error": "Agent job not found"}
    for seeded in ("aj_pr", "aj_nochange", "aj_failed"):
        assert api.get(f"/v2/agent/proj_sim/job/{seeded}").status_code == 200
    with pytest.raises(ValueError):
        sim.add_agent_job("exploded")


# ---- faults and control endpoints ----------------------------------------------------------


def test_injected_api_errors_and_rate_limits(sim: Simulator, api: httpx.Client) -> None:
    sim.set_faults(rate_limit_next=2, retry_after="3")
    answers = [api.get("/v2/agent/proj_sim/job/aj_pr") for _ in range(3)]
    assert [a.status_code for a in answers] == [429, 429, 200]
    assert answers[0].headers["retry-after"] == "3"
    sim.set_faults(error_rate=1.0)
    failed = api.post("/v1/static-export/jobs", json={"domain": DOMAIN})
    assert failed.status_code == 503 and failed.headers["retry-after"] == "3"
    assert sim.stats.start_attempts == {DOMAIN: 1} and sim.stats.starts == {}
    sim.set_faults(error_rate=0.5)
    codes = {api.get("/v2/agent/proj_sim/job/aj_pr").status_code for _ in range(40)}
    assert codes == {200, 503}
    with pytest.raises(ValueError):
        sim.set_faults(no_such_fault=1)


def test_control_endpoints(sim: Simulator, api: httpx.Client) -> None:
    control = httpx.Client(base_url=sim.url + "/_sim")
    answer = control.post(
        "/faults",
        json={
            "fail_domains": ["x.example.com"],
            "malicious_domains": {"y.example.com": "device"},
            "cut_after_bytes": 10,
            "cuts_remaining": 1,
        },
    )
    assert answer.status_code == 200
    assert sim.faults.fail_domains == {"x.example.com"}
    assert control.get("/faults").json()["malicious_domains"] == {"y.example.com": "device"}
    assert control.post("/faults", json={"error_rate": 7}).status_code == 400
    assert control.post("/faults", json={"bogus": True}).status_code == 400
    assert sim.faults.error_rate == 0.0
    control.post("/faults", json={"cut_after_bytes": None, "cuts_remaining": 0})

    assert control.post("/faults", json={"hold_jobs": True}).json()["hold_jobs"] is True
    created = control.post("/agent-jobs", json={"outcome": "no_changes", "seconds": 0})
    assert created.status_code == 201
    agent_path = f"/v2/agent/proj_sim/job/{created.json()['id']}"
    assert api.get(agent_path).json()["status"] == "active"
    assert control.post("/faults", json={"hold_jobs": 1}).status_code == 400
    control.post("/faults", json={"hold_jobs": False})
    agent = api.get(agent_path).json()
    assert agent["status"] == "completed"
    assert control.get("/stats").json()["agent_calls"] == {created.json()["id"]: 2}
    assert control.post("/agent-jobs", json={"outcome": "bogus"}).status_code == 400

    job_id, bundle = export(api)
    info = control.get(f"/bundles/{job_id}").json()
    assert info["sha256"] == sim.bundle_sha256(job_id) and info["sizeBytes"] == bundle["sizeBytes"]
    assert control.post("/expire-links").status_code == 200
    assert httpx.get(bundle["bundleUrl"]).status_code == 403

    before = members(httpx.get(export(api)[1]["bundleUrl"]).content)
    assert control.post(f"/publish/{DOMAIN}").status_code == 200
    after = members(httpx.get(export(api)[1]["bundleUrl"]).content)
    assert before["index.html"] != after["index.html"]

    stats = control.get("/stats").json()
    assert stats["starts"][DOMAIN] == sim.stats.starts[DOMAIN]
    assert stats["requests"] >= 10 and stats["auth_failures"] == 0
    assert stats["bundle_calls"][job_id] == 1
    control.close()


def test_connections_are_kept_alive(sim: Simulator, api: httpx.Client) -> None:
    responses = [api.get("/v2/agent/proj_sim/job/aj_pr") for _ in range(3)]
    assert all(r.http_version == "HTTP/1.1" for r in responses)
    assert all("close" not in r.headers.get("connection", "") for r in responses)
    assert all(r.headers["content-length"] for r in responses)


# ---- command line --------------------------------------------------------------------------


def test_sim_serve_prints_url_and_key_and_stops_on_sigterm() -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    process = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from mirror.cli.sim import sim; sim()",
            "serve",
            "--port",
            "0",
            "--key",
            "mint_sim_cli_test",
            "--queue-seconds",
            "0",
            "--run-seconds",
            "50ms",
            "--newer-revision",
            "--site-size",
            "2MiB",
            "--change-share",
            "0.1",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env=env,
    )
    lines: queue.Queue[str] = queue.Queue()
    assert process.stdout is not None
    stdout = process.stdout

    def pump() -> None:
        for line in stdout:
            lines.put(line)

    threading.Thread(target=pump, daemon=True).start()
    try:
        url_line = lines.get(timeout=120)  # a fresh interpreter's start on a busy machine
        lines.get(timeout=60)
        key_line = lines.get(timeout=60)
        assert url_line.startswith("simulator listening on http://127.0.0.1:")
        assert key_line.strip() == "accepted key: mint_sim_cli_test"
        url = url_line.split()[-1]
        headers = {"Authorization": "Bearer mint_sim_cli_test"}
        started = httpx.post(
            f"{url}/v1/static-export/jobs", json={"domain": DOMAIN}, headers=headers
        )
        assert started.status_code == 202
        assert httpx.get(f"{url}/_sim/stats").json()["starts"][DOMAIN] == [started.json()["jobId"]]
        assert httpx.get(f"{url}/_sim/faults").json()["newer_revision"] is True
        with httpx.Client(base_url=url, headers=headers) as client:
            status = wait_done(client, f"/v1/static-export/jobs/{started.json()['jobId']}")
        assert status["pageCount"] == len(site_plan(0, DOMAIN, 2 * MiB).pages)
    finally:
        process.send_signal(signal.SIGTERM)
        code = process.wait(timeout=60)
    assert code == 0
    assert process.stderr is not None and "mint_sim_cli_test" not in process.stderr.read()


# ---- realistic sites: size, share of changes, compression -------------------------------------


def download(url: str, path: Path) -> Path:
    with httpx.stream("GET", url) as response, path.open("wb") as out:
        for chunk in response.iter_bytes():
            out.write(chunk)
    return path


def file_contents(path: Path) -> dict[str, bytes]:
    return members(path.read_bytes())


def test_change_share_changes_that_share_of_pages_between_two_exports(
    sim_factory: Callable[..., Simulator], tmp_path: Path
) -> None:
    share = 0.03
    sim = sim_factory(site_size=12 * MiB, change_share=share)
    with client_for(sim) as client:
        bundles = [
            download(export(client)[1]["bundleUrl"], tmp_path / f"export-{n}.tar.gz")
            for n in range(3)
        ]
    plan = site_plan(0, DOMAIN, 12 * MiB)
    pages = {page.name for page in plan.pages}
    steps = [compare_bundles(old, new) for old, new in itertools.pairwise(bundles)]
    for diff in steps:
        assert diff.added == diff.removed == ()
        assert set(diff.changed) <= pages  # only pages change; CSS, JS and images stay
        assert abs(len(diff.changed) - share * len(plan.pages)) <= 1
        assert diff.files == len(plan.pages) + len(plan.assets)
        assert diff.delta_bytes < 0.1 * diff.new_bytes
    assert set(steps[0].changed).isdisjoint(steps[1].changed)  # round-robin over the pages
    both = compare_bundles(bundles[0], bundles[2])
    assert set(both.changed) == set(steps[0].changed) | set(steps[1].changed)


def test_default_is_still_changes_per_export(tmp_path: Path) -> None:
    specs = [SiteSpec(domain=DOMAIN, export_number=n) for n in range(2)]
    old, new = (build_bundle(spec, tmp_path / f"{n}.tar.gz").path for n, spec in enumerate(specs))
    assert len(compare_bundles(old, new).changed) == SiteSpec(domain=DOMAIN).changes_per_export
    shared = [
        SiteSpec(domain=DOMAIN, export_number=n, pages=200, change_share=0.1) for n in range(2)
    ]
    old, new = (build_bundle(s, tmp_path / f"share-{n}.tar.gz").path for n, s in enumerate(shared))
    assert len(compare_bundles(old, new).changed) == 20


def test_realistic_site_size_mix_and_compression(tmp_path: Path) -> None:
    size = 24 * MiB
    info = build_bundle(SiteSpec(domain=DOMAIN, site_size=size), tmp_path / "site.tar.gz")
    files = file_contents(info.path)
    total = sum(len(data) for data in files.values())
    assert abs(total - size) <= 0.1 * size
    html = {name: data for name, data in files.items() if name.endswith(".html")}
    images = {name: data for name, data in files.items() if name.endswith((".png", ".jpg"))}
    code = [name for name in files if name.endswith((".css", ".js"))]
    assert code and len(images) > 10 and len(html) > 300
    assert 0.2 <= sum(map(len, images.values())) / total <= 0.4
    sizes = [len(data) for name, data in html.items() if name != "index.html"]
    assert min(sizes) >= 5 * 1024 and max(sizes) <= 60 * 1024
    assert len({len(data) // 4096 for data in html.values()}) > 8  # varied sizes
    sample = b"".join(list(html.values())[:200])
    assert 4.0 <= len(sample) / len(gzip.compress(sample, 6)) <= 6.5
    for name, data in list(html.items())[:50]:
        assert 3.0 <= len(data) / len(gzip.compress(data, 6)) <= 7.0, name
        assert data.startswith(b"<!doctype html>") and data.endswith(b"</html>\n")
    image = next(iter(images.values()))
    assert len(gzip.compress(image, 6)) > 0.99 * len(image)
    depths = {name.count("/") for name in html}
    assert depths >= {0, 3}  # index.html and section/topic/page/index.html


def test_realistic_site_is_deterministic_per_revision_page_and_generation(
    tmp_path: Path,
) -> None:
    spec = SiteSpec(domain=DOMAIN, site_size=4 * MiB, change_share=0.05, mtime=1_700_000_000)
    first = build_bundle(spec, tmp_path / "a.tar.gz")
    again = build_bundle(spec, tmp_path / "b.tar.gz")
    assert first.sha256 == again.sha256
    other = build_bundle(replace(spec, domain="other.example.com"), tmp_path / "c.tar.gz")
    assert other.sha256 != first.sha256
    republished = compare_bundles(
        first.path, build_bundle(replace(spec, revision=1), tmp_path / "d.tar.gz").path
    )
    assert {name for name in republished.changed} == {
        name for name in file_contents(first.path) if name.endswith(".html")
    }


def build_and_measure(size: int, path: Path) -> dict[str, float]:
    """Build a realistic site in a fresh interpreter: CPU seconds (a busy machine's other work
    does not count) and peak RSS (MiB)."""
    script = (
        "import json, resource, sys, time\n"
        "from pathlib import Path\n"
        "from mirror.sim.site import SiteSpec, build_bundle\n"
        "from mirror.sim.diff import compare_bundles\n"
        "started = time.process_time()\n"
        f"spec = SiteSpec(domain='x.example', site_size={size})\n"
        f"info = build_bundle(spec, Path({str(path)!r}))\n"
        "seconds = time.process_time() - started\n"
        "compare_bundles(info.path, info.path)\n"
        "rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024\n"
        "print(json.dumps({'seconds': seconds, 'rss': rss}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO, check=True
    )
    result: dict[str, float] = json.loads(done.stdout)
    return result


@pytest.mark.slow
def test_building_is_fast_and_memory_stays_flat(tmp_path: Path) -> None:
    """Memory: a site 24 MiB larger costs under 12 MiB more (pages are streamed into the
    archive, never held); speed in CPU seconds, which a busy machine does not bend."""
    small = build_and_measure(4 * MiB, tmp_path / "small.tar.gz")
    large = build_and_measure(28 * MiB, tmp_path / "large.tar.gz")
    assert large["rss"] - small["rss"] < 12, (small, large)
    assert 28 / large["seconds"] > 3.0, large  # MiB per CPU second, gzip -6 included


def test_a_client_that_resets_mid_request_is_a_debug_line_not_a_traceback(
    sim: Simulator, capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="mirror.sim")
    host, port = httpx.URL(sim.url).host, httpx.URL(sim.url).port
    for _ in range(3):
        client = socket.create_connection((host, port or 80))
        client.sendall(b"GET /v1/static-export/jobs HTTP/1.1\r\nHost: x\r\n")
        client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        client.close()  # an RST, not a FIN: the server's next read fails with a reset
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and "went away" not in caplog.text:
        time.sleep(0.05)
    assert "went away" in caplog.text
    assert httpx.get(f"{sim.url}/v1/static-export/jobs/none").status_code in (401, 404)
    assert "Traceback" not in capfd.readouterr().err
