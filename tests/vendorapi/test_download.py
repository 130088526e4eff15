"""download_bundle against the simulator's presigned links on loopback (real HTTP, real files)."""

from __future__ import annotations

import hashlib
import logging
import threading
import time
import tracemalloc
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from mirror.archive import ArchiveLimits, inspect_archive
from mirror.errors import AuthError, IntegrityError, Interrupted, NotFound, TemporaryFailure
from mirror.httpserver import QuietHTTPServer
from mirror.sim import Simulator
from mirror.vendorapi.client import BundleLink, VendorClient
from mirror.vendorapi.download import (
    CHECKPOINT_BYTES,
    DownloadResult,
    LinkFailed,
    Validator,
    download_bundle,
    is_expired_answer,
    parse_content_range,
    range_request,
    safe_url,
    save_validator,
    validator_path,
)
from mirror.vendorapi.socketbody import SocketBody
from mirror.vendorapi.transport import DNS_ATTEMPTS

MiB = 1024 * 1024


@pytest.fixture
def http() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=30) as client:
        yield client


def vendor(sim: Simulator, http: httpx.Client) -> VendorClient:
    return VendorClient(http, base_url=sim.url, key=sim.key, sleep=lambda _s: None)


def completed_job(sim: Simulator, http: httpx.Client, domain: str = "docs.dl.test") -> str:
    client = vendor(sim, http)
    job_id = client.start_export(domain).job_id
    deadline = time.monotonic() + 60
    while not client.export_status(job_id).completed:
        assert time.monotonic() < deadline, "the simulated job never completed"
        time.sleep(0.05)
    sim.bundle_sha256(job_id)  # wait for the build
    return job_id


def fresh(sim: Simulator, http: httpx.Client, job_id: str) -> Callable[[], BundleLink]:
    return lambda: vendor(sim, http).fresh_link(job_id)


def served(sim: Simulator, job_id: str) -> int:
    return sim.stats.snapshot()["bytes_served"].get(job_id, 0)


def no_wait(_seconds: float) -> None:
    pass


def record_validator(http: httpx.Client, link: BundleLink, dest: Path) -> None:
    """What a first download of `link` into `dest` would have recorded (from a HEAD)."""
    head = http.head(link.url)
    save_validator(dest, Validator.of(head, int(head.headers["Content-Length"])))


def test_plain_download_hashes_in_one_pass(sim: Simulator, http: httpx.Client, tmp_path: Path):
    job_id = completed_job(sim, http)
    link = vendor(sim, http).export_bundle(job_id)
    dest = tmp_path / "run-1.part"
    result = download_bundle(http, link, dest, refresh_link=fresh(sim, http, job_id))
    info = sim.bundle_info(job_id)
    assert result.sha256 == info["sha256"] == hashlib.sha256(dest.read_bytes()).hexdigest()
    assert result.size == info["size"] == dest.stat().st_size
    assert (result.restarts, result.resumes, result.refreshes) == (0, 0, 0)


def test_cut_connections_resume_with_range(
    sim_factory: Callable[..., Simulator], http: httpx.Client, tmp_path: Path
):
    sim = sim_factory(bundle_size=12 * MiB)
    job_id = completed_job(sim, http)
    size = sim.bundle_info(job_id)["size"]
    sim.set_faults(cut_after_bytes=3 * MiB, cuts_remaining=3)
    link = vendor(sim, http).export_bundle(job_id)
    sleeps: list[float] = []
    result = download_bundle(
        http, link, tmp_path / "p", refresh_link=fresh(sim, http, job_id), sleep=sleeps.append
    )
    assert result.sha256 == sim.bundle_sha256(job_id)
    assert result.resumes == 3 and result.restarts == 0
    assert len(sleeps) == 3
    ranges = [d["range"] for d in sim.stats.snapshot()["downloads"]]
    assert ranges[0] is None and all(r and r.startswith("bytes=") for r in ranges[1:])
    assert served(sim, job_id) == size  # nothing was fetched twice


def test_server_ignoring_range_restarts_from_zero(
    sim_factory: Callable[..., Simulator], http: httpx.Client, tmp_path: Path
):
    sim = sim_factory(bundle_size=6 * MiB)
    job_id = completed_job(sim, http)
    size = sim.bundle_info(job_id)["size"]
    sim.set_faults(cut_after_bytes=2 * MiB, cuts_remaining=1, ignore_range=True)
    link = vendor(sim, http).export_bundle(job_id)
    result = download_bundle(
        http, link, tmp_path / "p", refresh_link=fresh(sim, http, job_id), sleep=lambda _s: None
    )
    assert result.sha256 == sim.bundle_sha256(job_id)
    assert result.restarts == 1 and result.size == size
    assert served(sim, job_id) == 2 * MiB + size


def test_existing_partial_is_continued_and_its_prefix_hashed(
    sim: Simulator, http: httpx.Client, tmp_path: Path
):
    job_id = completed_job(sim, http)
    info = sim.bundle_info(job_id)
    whole = Path(info["path"]).read_bytes()
    dest = tmp_path / "p"
    dest.write_bytes(whole[: len(whole) // 3])
    link = vendor(sim, http).export_bundle(job_id)
    record_validator(http, link, dest)
    result = download_bundle(http, link, dest, refresh_link=fresh(sim, http, job_id))
    assert result.sha256 == info["sha256"] and result.resumes == 1
    assert served(sim, job_id) == len(whole) - len(whole) // 3
    assert not validator_path(dest).exists()


def test_partial_without_a_validator_starts_over(
    sim: Simulator, http: httpx.Client, tmp_path: Path
):
    job_id = completed_job(sim, http)
    info = sim.bundle_info(job_id)
    dest = tmp_path / "p"
    dest.write_bytes(b"bytes of some other object")
    link = vendor(sim, http).export_bundle(job_id)
    result = download_bundle(http, link, dest, refresh_link=fresh(sim, http, job_id))
    assert result.sha256 == info["sha256"] and result.resumes == 0
    assert served(sim, job_id) == info["size"]


def test_complete_partial_needs_no_body(sim: Simulator, http: httpx.Client, tmp_path: Path):
    job_id = completed_job(sim, http)
    info = sim.bundle_info(job_id)
    dest = tmp_path / "p"
    dest.write_bytes(Path(info["path"]).read_bytes())
    link = vendor(sim, http).export_bundle(job_id)
    record_validator(http, link, dest)
    unknown_size = replace(link, size_bytes=None)  # forces a request: 416 with */size = done
    result = download_bundle(http, unknown_size, dest, refresh_link=fresh(sim, http, job_id))
    assert result.sha256 == info["sha256"]
    assert served(sim, job_id) == 0
    downloads = sim.stats.snapshot()["downloads"]
    assert [d["status"] for d in downloads if d["method"] == "GET"] == [416]


def test_expired_link_answer_gets_a_fresh_link(sim: Simulator, http: httpx.Client, tmp_path: Path):
    job_id = completed_job(sim, http)
    link = vendor(sim, http).export_bundle(job_id)
    sim.expire_links()
    links: list[BundleLink] = []

    def refresh() -> BundleLink:
        links.append(vendor(sim, http).fresh_link(job_id))
        return links[-1]

    checkpoints: list[tuple[int, str]] = []
    result = download_bundle(
        http,
        link,
        tmp_path / "p",
        refresh_link=refresh,
        checkpoint=lambda n, lk: checkpoints.append((n, lk.url)),
    )
    assert result.refreshes == 1 and len(links) == 1
    assert result.sha256 == sim.bundle_sha256(job_id)
    assert [d["status"] for d in sim.stats.snapshot()["downloads"]] == [200]  # 403s not counted
    assert checkpoints[-1][1] == links[0].url  # the caller learns the new link


def test_link_past_its_expiry_is_replaced_before_any_request(
    sim: Simulator, http: httpx.Client, tmp_path: Path
):
    job_id = completed_job(sim, http)
    link = vendor(sim, http).export_bundle(job_id)
    stale = replace(link, expires_at=datetime.now(UTC) - timedelta(minutes=1))
    result = download_bundle(http, stale, tmp_path / "p", refresh_link=fresh(sim, http, job_id))
    assert result.refreshes == 1
    assert [d["status"] for d in sim.stats.snapshot()["downloads"]] == [200]


def test_link_that_never_stops_expiring_gives_up(
    sim: Simulator, http: httpx.Client, tmp_path: Path
):
    job_id = completed_job(sim, http)
    link = vendor(sim, http).export_bundle(job_id)

    def refresh() -> BundleLink:
        sim.expire_links()
        return link

    sim.expire_links()
    with pytest.raises(TemporaryFailure, match="keeps expiring"):
        download_bundle(http, link, tmp_path / "p", refresh_link=refresh, max_attempts=3)


@pytest.mark.parametrize("where", ["link", "caller"])
def test_more_bytes_than_announced_is_refused_before_writing(
    sim_factory: Callable[..., Simulator], http: httpx.Client, tmp_path: Path, where: str
):
    sim = sim_factory(bundle_size=8 * MiB)
    job_id = completed_job(sim, http)
    if where == "link":
        link = replace(vendor(sim, http).export_bundle(job_id), size_bytes=MiB)
        expected = None
    else:
        sim.set_faults(omit_size=True)
        link = vendor(sim, http).fresh_link(job_id)
        assert link.size_bytes is None
        expected = MiB
    with pytest.raises(IntegrityError, match=f"announces .* bytes, expected {MiB}"):
        download_bundle(
            http, link, tmp_path / "p", refresh_link=lambda: link, expected_size=expected
        )
    assert (tmp_path / "p").stat().st_size == 0


def test_checkpoints_follow_fsynced_progress(
    sim_factory: Callable[..., Simulator], http: httpx.Client, tmp_path: Path
):
    sim = sim_factory(bundle_size=40 * MiB)
    job_id = completed_job(sim, http)
    link = vendor(sim, http).export_bundle(job_id)
    dest = tmp_path / "p"
    seen: list[tuple[int, int]] = []
    download_bundle(
        http,
        link,
        dest,
        refresh_link=lambda: link,
        checkpoint=lambda n, _lk: seen.append((n, dest.stat().st_size)),
    )
    sizes = [n for n, _ in seen]
    assert sizes == sorted(sizes) and sizes[-1] == dest.stat().st_size
    assert all(n <= on_disk for n, on_disk in seen)
    gaps = [b - a for a, b in zip([0, *sizes], sizes, strict=False)]
    assert max(gaps) <= CHECKPOINT_BYTES + MiB
    assert len(sizes) >= 5


def test_cancel_stops_checkpoints_and_a_later_call_resumes(
    sim_factory: Callable[..., Simulator], http: httpx.Client, tmp_path: Path
):
    sim = sim_factory(bundle_size=24 * MiB)
    job_id = completed_job(sim, http)
    link = vendor(sim, http).export_bundle(job_id)
    dest = tmp_path / "p"
    cancel = threading.Event()
    durable: list[int] = []

    def on_progress(done: int, _total: int | None) -> None:
        if done >= 10 * MiB:
            cancel.set()

    with pytest.raises(Interrupted, match="run the export again"):
        download_bundle(
            http,
            link,
            dest,
            refresh_link=lambda: link,
            checkpoint=lambda n, _lk: durable.append(n),
            on_progress=on_progress,
            cancel=cancel,
        )
    assert durable[-1] == dest.stat().st_size >= 10 * MiB
    first_pass = served(sim, job_id)
    result = download_bundle(http, link, dest, refresh_link=lambda: link)
    assert result.sha256 == sim.bundle_sha256(job_id) and result.resumes == 1
    assert served(sim, job_id) - first_pass == result.size - durable[-1]


# --- inspecting the archive as it arrives ---------------------------------------------------


def feed_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "mirror-archive-feed"]


def test_inspected_download_reports_what_inspect_archive_reports(
    sim: Simulator, http: httpx.Client, tmp_path: Path
):
    job_id = completed_job(sim, http)
    link = vendor(sim, http).export_bundle(job_id)
    dest = tmp_path / "run-1.part"
    result = download_bundle(http, link, dest, refresh_link=lambda: link, inspect=ArchiveLimits())
    assert result.archive is not None and result.archive == inspect_archive(dest)
    assert result.sha256 == sim.bundle_sha256(job_id)
    assert feed_threads() == []


def test_resumed_inspected_download_refeeds_the_prefix(
    sim_factory: Callable[..., Simulator], http: httpx.Client, tmp_path: Path
):
    """Cut twice by the host, then stopped and resumed by a second call: the tree hash is
    still the whole archive's, so the inspection saw every byte once, in order."""
    sim = sim_factory(bundle_size=24 * MiB)
    job_id = completed_job(sim, http)
    sim.set_faults(cut_after_bytes=3 * MiB, cuts_remaining=2)
    link = vendor(sim, http).export_bundle(job_id)
    dest = tmp_path / "p"
    stop_inspected_download(http, link, dest, after=10 * MiB)
    assert feed_threads() == []
    result = download_bundle(
        http, link, dest, refresh_link=lambda: link, sleep=no_wait, inspect=ArchiveLimits()
    )
    assert result.resumes >= 1 and result.sha256 == sim.bundle_sha256(job_id)
    assert result.archive == inspect_archive(dest)


def test_restart_from_zero_starts_a_new_inspection(
    sim_factory: Callable[..., Simulator], http: httpx.Client, tmp_path: Path
):
    sim = sim_factory(bundle_size=6 * MiB)
    job_id = completed_job(sim, http)
    sim.set_faults(cut_after_bytes=2 * MiB, cuts_remaining=1, ignore_range=True)
    link = vendor(sim, http).export_bundle(job_id)
    dest = tmp_path / "p"
    result = download_bundle(
        http, link, dest, refresh_link=lambda: link, sleep=no_wait, inspect=ArchiveLimits()
    )
    assert result.restarts == 1
    assert result.archive == inspect_archive(dest)


def test_inspected_download_memory_does_not_grow_with_the_bundle(
    sim_factory: Callable[..., Simulator], http: httpx.Client, tmp_path: Path
):
    """Blocks wait for the inspection in a bounded queue (archive.FEED_DEPTH blocks)."""
    sim = sim_factory(bundle_size=96 * MiB)
    job_id = completed_job(sim, http)
    link = vendor(sim, http).export_bundle(job_id)
    tracemalloc.start()
    try:
        result = download_bundle(
            http, link, tmp_path / "p", refresh_link=lambda: link, inspect=ArchiveLimits()
        )
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert result.archive is not None and result.archive.total_bytes > 90 * MiB
    assert peak < 24 * MiB, peak  # about 12 MiB: 4 queued blocks, buffers, the sim


@pytest.mark.parametrize("kind", ["traversal", "symlink", "bomb", "case_twins"])
def test_unsafe_archive_is_refused_as_inspect_archive_refuses_it(
    sim: Simulator, http: httpx.Client, tmp_path: Path, kind: str
):
    sim.set_faults(malicious_domains={"docs.evil.test": kind})
    job_id = completed_job(sim, http, "docs.evil.test")
    link = vendor(sim, http).export_bundle(job_id)
    dest = tmp_path / "run-1.part"
    with pytest.raises(IntegrityError) as caught:
        download_bundle(http, link, dest, refresh_link=lambda: link, inspect=ArchiveLimits())
    with pytest.raises(IntegrityError) as from_the_file:
        inspect_archive(dest)
    assert str(caught.value) == str(from_the_file.value)
    assert caught.value.exit_code == 5 and feed_threads() == []


def test_gone_bundle_is_not_found(sim: Simulator, http: httpx.Client, tmp_path: Path):
    job_id = completed_job(sim, http)
    link = vendor(sim, http).export_bundle(job_id)
    parts = urlsplit(link.url)
    missing = replace(link, url=link.url.replace(parts.path, parts.path + "x"))
    with pytest.raises((NotFound, Exception)) as caught:
        download_bundle(http, missing, tmp_path / "p", refresh_link=lambda: missing)
    assert "X-Amz-Signature" not in str(caught.value)


def test_presigned_query_never_logged(
    sim_factory: Callable[..., Simulator],
    http: httpx.Client,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
):
    sim = sim_factory(bundle_size=4 * MiB)
    job_id = completed_job(sim, http)
    sim.set_faults(cut_after_bytes=MiB, cuts_remaining=2)
    link = vendor(sim, http).export_bundle(job_id)
    sim.expire_links()
    caplog.set_level(logging.DEBUG)
    download_bundle(
        http, link, tmp_path / "p", refresh_link=fresh(sim, http, job_id), sleep=lambda _s: None
    )
    signature = dict(p.split("=", 1) for p in urlsplit(link.url).query.split("&"))[
        "X-Amz-Signature"
    ]
    ours = [r for r in caplog.records if r.name.startswith("mirror.vendorapi.download")]
    assert ours, "expected log lines about the cuts"
    for record in ours:
        assert signature not in record.getMessage() and "X-Amz-" not in record.getMessage()


def test_admin_key_on_the_shared_client_never_reaches_the_storage_host(
    sim: Simulator, tmp_path: Path
):
    job_id = completed_job(sim, httpx.Client(timeout=30))
    with httpx.Client(timeout=30, headers={"Authorization": f"Bearer {sim.key}"}) as keyed:
        link = vendor(sim, keyed).export_bundle(job_id)
        seen: list[httpx.Request] = []
        keyed.event_hooks["request"] = [seen.append]
        download_bundle(keyed, link, tmp_path / "p", refresh_link=lambda: link)
    assert seen and all("authorization" not in r.headers for r in seen)


def test_parsers() -> None:
    assert parse_content_range("bytes 5-9/10") == (5, 10)
    assert parse_content_range("bytes */10") == (None, 10)
    assert parse_content_range("bytes 0-1/*") == (0, None)
    assert parse_content_range(None) == (None, None)
    assert is_expired_answer(403, "<Code>AccessDenied</Code><Message>Request has expired")
    assert not is_expired_answer(403, "<Code>SignatureDoesNotMatch</Code>")
    assert not is_expired_answer(404, "Request has expired")
    assert safe_url("https://h.example/a/b.tar.gz?X-Amz-Signature=s") == (
        "https://h.example/a/b.tar.gz"
    )


# --- answers the simulator does not give: a scripted HTTP server on loopback -------------------


class Scripted:
    """A real HTTP server on loopback that answers each GET with the next scripted reply."""

    def __init__(self, body: bytes) -> None:
        self.body = body
        self.replies: list[Callable[[BaseHTTPRequestHandler], None]] = []
        self.ranges: list[str | None] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                outer.ranges.append(self.headers.get("Range"))
                reply = outer.replies.pop(0) if outer.replies else outer.whole
                reply(self)

            def log_message(self, *args: object) -> None:
                pass

        self.server = QuietHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = (
            f"http://127.0.0.1:{self.server.server_address[1]}/b.tar.gz?X-Amz-Signature=s3cr3t"
        )

    def link(self, size: int | None = None) -> BundleLink:
        return BundleLink(job_id="job", url=self.url, size_bytes=size, expires_at=None)

    def whole(self, handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(200)
        handler.send_header("Content-Length", str(len(self.body)))
        handler.end_headers()
        handler.wfile.write(self.body)

    def cut(self, at: int) -> Callable[[BaseHTTPRequestHandler], None]:
        def reply(handler: BaseHTTPRequestHandler) -> None:
            handler.send_response(200)
            handler.send_header("Content-Length", str(len(self.body)))
            handler.end_headers()
            handler.wfile.write(self.body[:at])
            handler.close_connection = True

        return reply

    def status(
        self, code: int, body: bytes = b"", headers: dict[str, str] | None = None
    ) -> Callable[[BaseHTTPRequestHandler], None]:
        def reply(handler: BaseHTTPRequestHandler) -> None:
            handler.send_response(code)
            for name, value in (headers or {}).items():
                handler.send_header(name, value)
            handler.send_header("Content-Length", str(len(body)))
            handler.end_headers()
            handler.wfile.write(body)

        return reply

    def chunked(self, data: bytes) -> Callable[[BaseHTTPRequestHandler], None]:
        def reply(handler: BaseHTTPRequestHandler) -> None:
            handler.send_response(200)
            handler.send_header("Transfer-Encoding", "chunked")
            handler.end_headers()
            for start in range(0, len(data), 256 * 1024):
                piece = data[start : start + 256 * 1024]
                handler.wfile.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
            handler.wfile.write(b"0\r\n\r\n")

        return reply

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def scripted() -> Iterator[Scripted]:
    server = Scripted(bytes(range(256)) * 12_000)  # ~3 MiB
    yield server
    server.close()


def test_wrong_range_in_a_206_restarts_from_zero(
    scripted: Scripted, http: httpx.Client, tmp_path: Path
):
    body = scripted.body
    wrong = scripted.status(206, body[:1000], {"Content-Range": f"bytes 0-999/{len(body)}"})
    scripted.replies = [scripted.cut(MiB), wrong]
    result = download_bundle(
        http, scripted.link(), tmp_path / "p", refresh_link=scripted.link, sleep=lambda _s: None
    )
    assert result.sha256 == hashlib.sha256(body).hexdigest() and result.restarts == 1
    assert scripted.ranges == [None, f"bytes={MiB}-", None]


def test_server_errors_are_retried_with_retry_after(
    scripted: Scripted, http: httpx.Client, tmp_path: Path
):
    scripted.replies = [
        scripted.status(503, b"busy", {"Retry-After": "7"}),
        scripted.status(500),
    ]
    sleeps: list[float] = []
    result = download_bundle(
        http, scripted.link(), tmp_path / "p", refresh_link=scripted.link, sleep=sleeps.append
    )
    assert result.size == len(scripted.body)
    assert sleeps[0] == 7.0 and len(sleeps) == 2


def test_persistent_errors_give_up_after_max_attempts(
    scripted: Scripted, http: httpx.Client, tmp_path: Path
):
    scripted.replies = [scripted.status(502)] * 10
    sleeps: list[float] = []
    with pytest.raises(TemporaryFailure, match="failed 4 times in a row") as caught:
        download_bundle(
            http,
            scripted.link(),
            tmp_path / "p",
            refresh_link=scripted.link,
            sleep=sleeps.append,
            max_attempts=4,
        )
    assert len(sleeps) == 3 and "s3cr3t" not in str(caught.value)


def test_refused_link_is_an_auth_error_without_the_signature(
    scripted: Scripted, http: httpx.Client, tmp_path: Path
):
    denied = b"<Error><Code>SignatureDoesNotMatch</Code><Message>nope</Message></Error>"
    scripted.replies = [scripted.status(403, denied)]
    with pytest.raises(AuthError, match="SignatureDoesNotMatch: nope") as caught:
        download_bundle(http, scripted.link(), tmp_path / "p", refresh_link=scripted.link)
    assert "s3cr3t" not in str(caught.value)


def test_chunked_body_longer_than_expected_stops_reading(
    scripted: Scripted, http: httpx.Client, tmp_path: Path
):
    scripted.replies = [scripted.chunked(scripted.body)]
    with pytest.raises(IntegrityError, match="bigger than the 1000000 bytes"):
        download_bundle(
            http,
            scripted.link(),
            tmp_path / "p",
            refresh_link=scripted.link,
            expected_size=1_000_000,
        )
    assert (tmp_path / "p").stat().st_size <= 1_000_000


def test_chunked_body_of_unknown_size_is_taken_whole(
    scripted: Scripted, http: httpx.Client, tmp_path: Path
):
    scripted.replies = [scripted.chunked(scripted.body)]
    result = download_bundle(http, scripted.link(), tmp_path / "p", refresh_link=scripted.link)
    assert result.size == len(scripted.body)
    assert result.sha256 == hashlib.sha256(scripted.body).hexdigest()


def test_unsatisfiable_range_with_another_size_restarts(
    scripted: Scripted, http: httpx.Client, tmp_path: Path
):
    dest = tmp_path / "p"
    dest.write_bytes(b"x" * 10)
    scripted.replies = [scripted.status(416, b"", {"Content-Range": "bytes */5"})]
    result = download_bundle(
        http, scripted.link(), dest, refresh_link=scripted.link, sleep=lambda _s: None
    )
    assert result.restarts == 1 and result.sha256 == hashlib.sha256(scripted.body).hexdigest()


def test_a_link_host_that_does_not_resolve_is_given_up_soon_and_named(
    http: httpx.Client, tmp_path: Path
) -> None:
    link = BundleLink(
        job_id="se_dns",
        url="http://bundles.invalid/se_dns.tar.gz?X-Amz-Signature=mint_sig_abcdef",
        size_bytes=10,
        expires_at=None,
    )
    sleeps: list[float] = []
    with pytest.raises(TemporaryFailure) as caught:
        download_bundle(
            http,
            link,
            tmp_path / "p",
            refresh_link=lambda: link,
            max_attempts=8,
            sleep=sleeps.append,
        )
    message = str(caught.value)
    assert message.startswith("cannot resolve the bundle host 'bundles.invalid' (job se_dns)")
    assert "mint_sig_abcdef" not in message and "\n" not in message
    assert len(sleeps) == DNS_ATTEMPTS - 1


def test_a_later_process_compares_the_recorded_validator(
    sim_factory: Callable[..., Simulator], http: httpx.Client, tmp_path: Path
):
    """The first process ran out of tries mid-way; the object changed before the next one
    resumed: the next one sends If-Range, gets the whole new object and keeps only it."""
    sim = sim_factory(bundle_size=3 * MiB)
    job_id = completed_job(sim, http)
    link = vendor(sim, http).export_bundle(job_id)
    dest = tmp_path / "run-1.part"
    sim.set_faults(cut_after_bytes=MiB, cuts_remaining=1)
    with pytest.raises(LinkFailed, match="failed 1 times"):
        download_bundle(http, link, dest, refresh_link=lambda: link, max_attempts=1)
    assert dest.stat().st_size == MiB and validator_path(dest).exists()
    sim.set_faults(change_object_on_range=1)
    result = download_bundle(http, link, dest, refresh_link=lambda: link)
    assert result.sha256 == sim.bundle_sha256(job_id) != hashlib.sha256(b"").hexdigest()
    assert result.restarts == 1 and result.resumes == 0
    assert [d["status"] for d in sim.stats.snapshot()["downloads"]] == [200, 200]
    assert not validator_path(dest).exists()


def test_a_206_from_another_object_is_never_appended(
    sim_factory: Callable[..., Simulator], http: httpx.Client, tmp_path: Path
):
    """A host that ignores If-Range sends a range of the new object: the ETag tells."""
    sim = sim_factory(bundle_size=3 * MiB)
    job_id = completed_job(sim, http)
    link = vendor(sim, http).export_bundle(job_id)
    sim.set_faults(
        cut_after_bytes=MiB, cuts_remaining=1, change_object_on_range=1, ignore_if_range=True
    )
    result = download_bundle(http, link, tmp_path / "p", refresh_link=lambda: link, sleep=no_wait)
    assert result.sha256 == sim.bundle_sha256(job_id) and result.restarts == 1
    assert [d["status"] for d in sim.stats.snapshot()["downloads"]] == [200, 206, 200]


@pytest.mark.parametrize(
    "url", ["file:///etc/passwd", "ftp://host/b.tar.gz", "javascript:alert(1)", "data:,x"]
)
def test_links_other_than_http_are_refused_without_a_request(
    sim: Simulator, http: httpx.Client, tmp_path: Path, url: str
):
    link = BundleLink(job_id="se_1", url=url, size_bytes=None, expires_at=None)
    with pytest.raises(LinkFailed, match="only http and https"):
        download_bundle(http, link, tmp_path / "p", refresh_link=lambda: link, sleep=no_wait)
    assert sim.stats.snapshot()["downloads"] == []


def test_redirect_to_another_scheme_is_refused_at_once(
    sim: Simulator, http: httpx.Client, tmp_path: Path
):
    job_id = completed_job(sim, http)
    link = vendor(sim, http).export_bundle(job_id)
    sim.set_faults(redirect_downloads_to="file:///etc/shadow")
    with pytest.raises(LinkFailed, match=r"redirect of the bundle link .* 'file'"):
        download_bundle(http, link, tmp_path / "p", refresh_link=lambda: link, sleep=no_wait)
    assert not (tmp_path / "p").read_bytes()


def trickled(
    sim_factory: Callable[..., Simulator], http: httpx.Client, dest: Path, **faults: int
) -> tuple[Simulator, str, Callable[..., DownloadResult]]:
    """A completed 1 MiB job whose downloads trickle as `faults` say, and its download."""
    sim = sim_factory(bundle_size=MiB)
    job_id = completed_job(sim, http)
    link = vendor(sim, http).export_bundle(job_id)
    sim.set_faults(**faults)

    def download(**kwargs: Any) -> DownloadResult:
        return download_bundle(http, link, dest, refresh_link=lambda: link, sleep=no_wait, **kwargs)

    return sim, job_id, download


def test_trickle_below_the_speed_limit_is_cut_and_resumed(
    sim_factory: Callable[..., Simulator], http: httpx.Client, tmp_path: Path
):
    sim, job_id, download = trickled(
        sim_factory, http, tmp_path / "p", trickle_bytes_per_second=4000, trickles_remaining=1
    )
    started = time.monotonic()
    result = download(min_speed=100 * 1024, stall_time=0.4)
    assert time.monotonic() - started < 60  # not cut, the trickle would take 260 s
    assert result.sha256 == sim.bundle_sha256(job_id) and result.resumes == 1


def test_a_host_that_always_trickles_ends_as_a_spent_link(
    sim_factory: Callable[..., Simulator], http: httpx.Client, tmp_path: Path
):
    """Slow cuts make progress but still count as failed tries: the link is given up."""
    _, _, download = trickled(
        sim_factory, http, tmp_path / "p", trickle_bytes_per_second=20_000, trickles_remaining=100
    )
    with pytest.raises(LinkFailed, match="below 102400 bytes/s"):
        download(max_attempts=3, min_speed=100 * 1024, stall_time=0.2)
    assert 0 < (tmp_path / "p").stat().st_size < MiB


def test_a_partial_damaged_on_disk_is_downloaded_again_from_zero_in_the_same_call(
    sim_factory: Callable[..., Simulator], http: httpx.Client, tmp_path: Path
):
    """The bytes before a resume are not re-sent by the host: when the finished archive
    fails its check, those bytes may be what is wrong, so one download from zero decides."""
    sim = sim_factory(bundle_size=8 * MiB)
    job_id = completed_job(sim, http)
    link = vendor(sim, http).export_bundle(job_id)
    dest = tmp_path / "p"
    stop_inspected_download(http, link, dest, after=4 * MiB)
    with open(dest, "r+b") as partial:
        partial.seek(1 * MiB)
        partial.write(b"\0" * 4096)  # damage the prefix a resume would keep
    result = download_bundle(
        http, link, dest, refresh_link=lambda: link, sleep=no_wait, inspect=ArchiveLimits()
    )
    assert result.sha256 == sim.bundle_sha256(job_id)
    assert result.archive == inspect_archive(dest)
    assert feed_threads() == []


def test_a_validator_write_cut_by_a_kill_leaves_nothing_once_the_partial_is_opened_again(
    sim: Simulator, http: httpx.Client, tmp_path: Path
):
    """A kill between the validator's temporary file and its rename leaves
    `.NAME.validator.XXXX.tmp`; the next download of that partial removes it."""
    job_id = completed_job(sim, http)
    link = vendor(sim, http).export_bundle(job_id)
    dest = tmp_path / "run-1.part"
    stray = tmp_path / f".{validator_path(dest).name}.k1ll3d.tmp"
    stray.write_text('{"etag": "half')
    other = tmp_path / ".run-2.part.validator.x.tmp"
    other.write_text("another partial's")
    download_bundle(http, link, dest, refresh_link=lambda: link, sleep=no_wait)
    assert not stray.exists() and other.exists()


def stop_inspected_download(
    http: httpx.Client, link: BundleLink, dest: Path, *, after: int
) -> None:
    """Run an inspected download into `dest` and stop it (Interrupted) once `after` bytes
    are in: the partial file and its validator stay for a later call to resume."""
    cancel = threading.Event()

    def on_progress(done: int, _total: int | None) -> None:
        if done >= after:
            cancel.set()

    with pytest.raises(Interrupted):
        download_bundle(
            http,
            link,
            dest,
            refresh_link=lambda: link,
            checkpoint=lambda _n, _lk: None,
            on_progress=on_progress,
            cancel=cancel,
            sleep=no_wait,
            inspect=ArchiveLimits(),
        )


def test_a_range_request_carries_no_admin_key_and_asks_for_the_rest() -> None:
    headers = {"Authorization": "Bearer secret", "Cookie": "a=b", "User-Agent": "mirror/x"}
    with httpx.Client(headers=headers) as http:
        resumed = range_request(http, "https://s3.test/b?X-Amz=1", 100, '"etag"', httpx.Timeout(5))
        fresh = range_request(http, "https://s3.test/b", 0, '"etag"', httpx.Timeout(5))
    assert "authorization" not in resumed.headers and "cookie" not in resumed.headers
    assert resumed.headers["Range"] == "bytes=100-" and resumed.headers["If-Range"] == '"etag"'
    assert resumed.headers["Accept-Encoding"] == "identity"
    assert "range" not in fresh.headers and "if-range" not in fresh.headers


# --- the body read from the socket (socketbody.SocketBody) -------------------------------------


def test_a_body_of_known_length_is_read_from_the_socket_whole(
    scripted: Scripted, http: httpx.Client
):
    with http.stream("GET", scripted.url) as response:
        body = SocketBody.of(response)
        assert body is not None
        pieces = [body.first]
        block = bytearray(64 * 1024)
        while got := body.readinto(memoryview(block)):
            pieces.append(bytes(block[:got]))
    assert b"".join(pieces) == scripted.body


def test_a_body_held_whole_by_h11_is_all_in_first(scripted: Scripted, http: httpx.Client):
    scripted.body = b"a small bundle"  # arrives with the head: nothing is left on the socket
    with http.stream("GET", scripted.url) as response:
        body = SocketBody.of(response)
        assert body is not None
        assert (body.first, body.readinto(memoryview(bytearray(10)))) == (scripted.body, 0)


def test_a_chunked_body_is_left_to_httpx(scripted: Scripted, http: httpx.Client):
    scripted.replies = [scripted.chunked(scripted.body)]
    with http.stream("GET", scripted.url) as response:
        assert SocketBody.of(response) is None
        assert response.read() == scripted.body


def test_a_response_without_a_socket_is_left_to_httpx() -> None:
    """A transport with no network stream (here httpx's MockTransport: the case itself, not a
    stand-in for a server) is one socketbody promises to leave to `iter_raw`. Nothing real
    can stand in: every real server answers through a socket, which is the other case."""
    transport = httpx.MockTransport(lambda request: httpx.Response(200, content=b"x" * 10))
    with httpx.Client(transport=transport) as http, http.stream("GET", "http://h.test/") as answer:
        assert SocketBody.of(answer) is None


def test_a_body_cut_on_the_socket_is_a_protocol_error_and_the_download_resumes(
    scripted: Scripted, http: httpx.Client, tmp_path: Path
):
    scripted.replies = [scripted.cut(1_500_000)]
    with http.stream("GET", scripted.url) as response:
        body = SocketBody.of(response)
        assert body is not None
        block = memoryview(bytearray(MiB))
        with pytest.raises(httpx.RemoteProtocolError, match="without sending complete"):
            while body.readinto(block):
                pass
    scripted.replies = [scripted.cut(1_500_000)]
    result = download_bundle(http, scripted.link(), tmp_path / "p", refresh_link=scripted.link)
    assert result.sha256 == hashlib.sha256(scripted.body).hexdigest()
    assert scripted.ranges[-1] == "bytes=1500000-"


def test_a_silent_socket_is_a_read_timeout(scripted: Scripted) -> None:
    silent = threading.Event()  # the server says nothing more until the test is done

    def stall(handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(200)
        handler.send_header("Content-Length", str(len(scripted.body)))
        handler.end_headers()
        handler.wfile.write(scripted.body[:1000])
        handler.wfile.flush()
        silent.wait(120)

    scripted.replies = [stall]
    try:
        with httpx.Client(timeout=0.3) as http, http.stream("GET", scripted.url) as response:
            body = SocketBody.of(response)
            assert body is not None
            with pytest.raises(httpx.ReadTimeout):
                while body.readinto(memoryview(bytearray(MiB))):
                    pass
    finally:
        silent.set()


def test_a_range_answer_longer_than_announced_is_refused_past_the_last_byte(
    scripted: Scripted, http: httpx.Client, tmp_path: Path
):
    announced = 1_000_000

    def lying(handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(206)
        handler.send_header("Content-Range", f"bytes 0-{announced - 1}/{announced}")
        handler.send_header("Content-Length", str(len(scripted.body)))
        handler.end_headers()
        handler.wfile.write(scripted.body)

    scripted.replies = [lying]
    with pytest.raises(IntegrityError, match=f"bigger than the {announced} bytes"):
        download_bundle(
            http,
            scripted.link(),
            tmp_path / "p",
            refresh_link=scripted.link,
            expected_size=announced,
        )
    assert (tmp_path / "p").stat().st_size <= announced
