"""mirror serve over a real socket, on the in-memory bucket: what a pod, a hostile client and a
broken bucket meet. Requests are sent as raw bytes where the path itself is the test."""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import socket
import threading
from pathlib import Path

import httpx
import pytest

from mirror.airgap import chart, layout
from mirror.serve.routes import bundle_path
from tests.airgap.chart.seeding import DOMAIN, Seeded, seed_version
from tests.fixtures.memory import MemoryBucket
from tests.fixtures.serving import (
    V1,
    V2,
    Running,
    SwitchableBucket,
    get,
    raw,
    serving,
    until,
)

V3 = "2026-11-22"


def test_a_version_is_served_with_its_digests_and_label(
    memory_bucket: MemoryBucket, promoted_versions: dict[str, Seeded], tmp_path: Path
) -> None:
    with serving(memory_bucket, tmp_path / "cache") as running:
        pinned = httpx.get(running.url + bundle_path(DOMAIN, V1, "tar.gz"))
        moving = httpx.get(running.url + bundle_path(DOMAIN, None, "tar.gz"))
    data = promoted_versions[V1].archive.read_bytes()
    assert pinned.status_code == 200 and pinned.content == data
    digest = base64.b64encode(hashlib.sha256(data).digest()).decode()
    assert pinned.headers["repr-digest"] == f"sha-256=:{digest}:"
    assert pinned.headers["etag"] == f'"{promoted_versions[V1].sha256}"'
    assert pinned.headers["content-length"] == str(len(data))
    assert pinned.headers["mirror-version"] == V1
    assert pinned.headers["cache-control"] == "public, max-age=31536000, immutable"
    assert moving.content == promoted_versions[V2].archive.read_bytes()
    assert moving.headers["mirror-version"] == V2
    assert moving.headers["cache-control"] == "no-cache"
    assert moving.headers["content-location"] == bundle_path(DOMAIN, V2, "tar.gz")


def test_head_ranges_and_conditions(
    memory_bucket: MemoryBucket, promoted_versions: dict[str, Seeded], tmp_path: Path
) -> None:
    data = promoted_versions[V2].archive.read_bytes()
    tag = f'"{promoted_versions[V2].sha256}"'
    path = bundle_path(DOMAIN, V2, "tar.gz")
    with serving(memory_bucket, tmp_path / "cache") as running:
        head = raw(running.port, get(path, method="HEAD"))
        part = raw(running.port, get(path, "Range: bytes=100-199"))
        tail = raw(running.port, get(path, "Range: bytes=-7", f"If-Range: {tag}"))
        stale = raw(running.port, get(path, "Range: bytes=0-1", 'If-Range: "old"'))
        beyond = raw(running.port, get(path, f"Range: bytes={len(data)}-"))
        several = raw(running.port, get(path, "Range: bytes=0-1, 4-5"))
        cached = raw(running.port, get(path, f"If-None-Match: {tag}"))
    assert (head.status, head.body, head.header("content-length")) == (200, b"", str(len(data)))
    assert head.header("etag") == tag
    assert (part.status, part.body) == (206, data[100:200])
    assert part.header("content-range") == f"bytes 100-199/{len(data)}"
    assert part.header("repr-digest") == head.header("repr-digest")  # of the whole
    assert (tail.status, tail.body) == (206, data[-7:])
    assert (stale.status, stale.body) == (200, data)
    assert (beyond.status, beyond.header("content-range")) == (416, f"bytes */{len(data)}")
    assert data[:64] not in beyond.raw
    assert (several.status, several.body) == (200, data)
    assert (cached.status, cached.body, cached.header("etag")) == (304, b"", tag)


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE", "BREW"])
def test_every_other_method_is_405_with_allow(
    memory_bucket: MemoryBucket, promoted_versions: dict[str, Seeded], tmp_path: Path, method: str
) -> None:
    with serving(memory_bucket, tmp_path / "cache") as running:
        answer = raw(running.port, get(bundle_path(DOMAIN, V2, "tar.gz"), method=method))
    assert (answer.status, answer.header("allow")) == (405, "GET, HEAD")
    assert answer.body == f"method {method} is not allowed\n".encode()


@pytest.mark.parametrize(
    ("path", "line"),
    [
        ("/domains/other.example.com/current/bundle.tar.gz", "no domain other.example.com"),
        (f"/domains/{DOMAIN}/2019-01-01/bundle.tar.gz", f"no version 2019-01-01 of {DOMAIN}"),
        (f"/domains/{DOMAIN}/{V1}/bundle.zip", f"version {V1} of {DOMAIN} is a tar.gz bundle"),
        ("/static-export/docs.example.com/index.json", "no such path"),
    ],
)
def test_unknown_things_are_404_in_one_line(
    memory_bucket: MemoryBucket,
    promoted_versions: dict[str, Seeded],
    tmp_path: Path,
    path: str,
    line: str,
) -> None:
    with serving(memory_bucket, tmp_path / "cache") as running:
        answer = raw(running.port, get(path))
    assert answer.status == 404
    assert answer.body.count(b"\n") == 1 and line in answer.body.decode()
    assert answer.header("x-content-type-options") == "nosniff"
    assert answer.raw.count(b"\r\nServer: mirror-serve\r\n") == 1


HOSTILE = [
    b"GET /domains/docs.example.com/../../../etc/passwd HTTP/1.1\r\n",
    b"GET /domains/docs.example.com/2026-11-20/../2026-11-21/bundle.tar.gz HTTP/1.1\r\n",
    b"GET /domains/%2e%2e/%2e%2e/etc/bundle.tar.gz HTTP/1.1\r\n",
    b"GET /domains/docs.example.com/..%2f..%2fcache.json HTTP/1.1\r\n",
    b"GET /domains/docs.example.com%2f2026-11-20/bundle.tar.gz HTTP/1.1\r\n",
    b"GET /domains/docs.example.com/2026-11-20%5cbundle.tar.gz HTTP/1.1\r\n",
    b"GET /domains/%252e%252e/%252e%252e/bundle.tar.gz HTTP/1.1\r\n",
    b"GET /domains/%c0%ae%c0%ae/2026-11-20/bundle.tar.gz HTTP/1.1\r\n",
    b"GET /domains/docs.example.com/2026-11-20/bundle.tar.gz%00 HTTP/1.1\r\n",
    b"GET /domains/docs.example.com/2026-11-20/bundle.tar.gz\x00.txt HTTP/1.1\r\n",
    b"GET /domains/docs.example.com\\..\\..\\bundle.tar.gz HTTP/1.1\r\n",
    b"GET /domains/\xc3\xa9/current/bundle.tar.gz HTTP/1.1\r\n",
    b"GET http://127.0.0.1/domains/docs.example.com/../../cache.json HTTP/1.1\r\n",
    b"GET ftp://127.0.0.1/domains/docs.example.com/current/bundle.tar.gz HTTP/1.1\r\n",
    b"GET /" + b"a" * 4000 + b" HTTP/1.1\r\n",
    b"GET /" + b"a" * 70000 + b" HTTP/1.1\r\n",
    b"GET / HTTP/1.1\r\nX-Long: " + b"a" * 70000 + b"\r\n",
    b"GET / HTTP/1.1\r\n" + b"".join(b"X-%d: y\r\n" % n for n in range(150)),
    b"GET / HTTP/1.1\r\n" + b"".join(b"X-%d: %s\r\n" % (n, b"y" * 4000) for n in range(8)),
    b"GET /\x00 HTTP/1.1\r\n",
    b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n",
    b"GET /domains/docs.example.com/current/bundle.tar.gz\r\n",  # HTTP/0.9: no headers at all
]


@pytest.mark.parametrize("request_head", HOSTILE, ids=range(len(HOSTILE)))
def test_no_request_reaches_anything_but_the_versions(
    memory_bucket: MemoryBucket,
    promoted_versions: dict[str, Seeded],
    tmp_path: Path,
    request_head: bytes,
) -> None:
    """Traversal in any encoding, encoded separators, NUL, overlong targets, request lines and
    headers: 400 or 404 in one line, never a byte of a file, and the server goes on."""
    (tmp_path / "secret.txt").write_text("SECRET-FILE\n")
    with serving(memory_bucket, tmp_path / "cache") as running:
        answer = raw(running.port, request_head + b"Host: x\r\nConnection: close\r\n\r\n")
        after = httpx.get(running.url + bundle_path(DOMAIN, V2, "tar.gz"))
    assert answer.status in (400, 404), answer.raw[:300]
    assert answer.body.count(b"\n") == 1 and len(answer.body) < 400
    assert (
        b"SECRET" not in answer.raw
        and promoted_versions[V1].archive.read_bytes()[:32] not in answer.raw
    )
    assert after.status_code == 200


def test_concurrent_requests_wait_for_the_one_fill(
    memory_bucket: MemoryBucket, promoted_versions: dict[str, Seeded], tmp_path: Path
) -> None:
    gated = SwitchableBucket(memory_bucket)
    with serving(gated, tmp_path / "cache", refresh=False) as running:
        gated.gate = threading.Event()
        results: list[bytes] = []

        def fetch() -> None:
            got = httpx.get(running.url + bundle_path(DOMAIN, V1, "tar.gz"), timeout=60)
            results.append(got.content)

        running.service.poll()
        clients = [threading.Thread(target=fetch) for _ in range(20)]
        for client in clients:
            client.start()
        assert gated.waiting.acquire(timeout=60)  # the one fill has reached the bucket
        assert _settled(running, 19)
        gated.gate.set()
        for client in clients:
            client.join(60)
        assert results == [promoted_versions[V1].archive.read_bytes()] * 20
        assert len(gated.streams) == 1
        assert running.counter("cache_fills_total") == 1


def test_a_fill_the_bucket_stops_sending_is_given_up_for_every_waiting_client(
    memory_bucket: MemoryBucket, promoted_versions: dict[str, Seeded], tmp_path: Path
) -> None:
    """A store that holds a bundle's bytes (a trickle under every read timeout looks the
    same) answers the fill's leader and its followers 503 after `stall` seconds: no pod
    waits for ever. Nothing is cached from it; the next request fills it again."""
    gated = SwitchableBucket(memory_bucket)
    with serving(gated, tmp_path / "cache", refresh=False) as running:
        gated.gate = threading.Event()  # held until the end: the store sends nothing
        running.service.supply.stall = 1.0
        running.service.poll()
        answers: list[httpx.Response] = []

        def fetch() -> None:
            answers.append(httpx.get(running.url + bundle_path(DOMAIN, V1, "tar.gz"), timeout=120))

        clients = [threading.Thread(target=fetch) for _ in range(2)]
        for client in clients:
            client.start()
        for client in clients:
            client.join(120)
        gated.gate.set()
        again = httpx.get(running.url + bundle_path(DOMAIN, V1, "tar.gz"), timeout=120)
    assert [a.status_code for a in answers] == [503, 503], [a.text[:200] for a in answers]
    assert all("sent no more of" in a.text and "for 1s" in a.text for a in answers)
    assert again.content == promoted_versions[V1].archive.read_bytes()


def _settled(running: Running, waiting: int) -> bool:
    """Wait (to a generous deadline) until `waiting` requests wait for the fill."""
    done = threading.Event()
    for _ in range(600):
        if running.service.supply.waiting() >= waiting:
            return True
        done.wait(0.1)
    return False


def test_an_object_replaced_in_the_bucket_is_never_served(
    memory_bucket: MemoryBucket, promoted_versions: dict[str, Seeded], tmp_path: Path
) -> None:
    stored = memory_bucket.objects[promoted_versions[V1].key]
    forged = bytes([stored.data[0] ^ 0xFF]) + stored.data[1:]
    memory_bucket.objects[promoted_versions[V1].key] = type(stored)(
        forged, stored.metadata, "", stored.etag
    )
    cache = tmp_path / "cache"
    with serving(memory_bucket, cache) as running:
        answer = raw(running.port, get(bundle_path(DOMAIN, V1, "tar.gz")))
        assert running.counter("refused_total", domain=DOMAIN, version=V1) == 1
        again = raw(running.port, get(bundle_path(DOMAIN, V1, "tar.gz")))
    assert answer.status == 502 and again.status == 502
    assert answer.body.count(b"\n") == 1 and f"version {V1} of {DOMAIN}".encode() in answer.body
    assert forged[:16] not in answer.raw and stored.data[1:17] not in answer.raw
    assert not (cache / "bundles" / promoted_versions[V1].sha256).exists()
    assert list((cache / "tmp").iterdir()) == []
    assert (
        promoted_versions[V1].sha256
        not in json.loads((cache / "cache.json").read_text())["entries"]
    )


def test_a_refused_object_is_fetched_again_only_once_it_changed(
    memory_bucket: MemoryBucket, promoted_versions: dict[str, Seeded], tmp_path: Path
) -> None:
    stored = memory_bucket.objects[promoted_versions[V1].key]
    forged = bytes([stored.data[0] ^ 0xFF]) + stored.data[1:]
    memory_bucket.objects[promoted_versions[V1].key] = type(stored)(
        forged, stored.metadata, "", '"forged"'
    )
    counted = SwitchableBucket(memory_bucket)
    with serving(counted, tmp_path / "cache", refresh=False) as running:
        running.service.supply.hold = 0.0  # the poll interval, gone at once
        for _ in range(3):
            running.refresh()
            assert raw(running.port, get(bundle_path(DOMAIN, V1, "tar.gz"))).status == 502
        # V1 is the rollback target: fetched at the first turn, and never again
        assert counted.streams.count(promoted_versions[V1].key) == 1
        assert running.counter("refused_total", domain=DOMAIN, version=V1) == 1
        assert running.counter("refused_versions", domain=DOMAIN) == 1  # what alerts watch
        memory_bucket.objects[promoted_versions[V1].key] = stored  # put right (a new ETag)
        healed = httpx.get(running.url + bundle_path(DOMAIN, V1, "tar.gz"))
        after = running.counter("refused_versions", domain=DOMAIN)
    assert healed.content == promoted_versions[V1].archive.read_bytes()
    assert after == 0
    assert counted.streams.count(promoted_versions[V1].key) == 2


def test_a_manifest_that_names_another_bundle_is_refused(
    memory_bucket: MemoryBucket, promoted_versions: dict[str, Seeded], tmp_path: Path
) -> None:
    key = layout.version_manifest_key(memory_bucket, DOMAIN, V1)
    document, _ = memory_bucket.read_json(key)
    assert document is not None
    memory_bucket.objects[key] = type(memory_bucket.objects[key])(
        json.dumps({**document, "sha256": "0" * 64}).encode(), {}, "", '"x"'
    )
    with serving(memory_bucket, tmp_path / "cache") as running:
        answer = raw(running.port, get(bundle_path(DOMAIN, V1, "tar.gz")))
    assert answer.status == 502 and b"manifest names another bundle" in answer.body


def test_a_cache_file_changed_after_verification_is_never_served(
    memory_bucket: MemoryBucket, promoted_versions: dict[str, Seeded], tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    away = SwitchableBucket(memory_bucket)
    with serving(away, cache) as running:
        path = cache / "bundles" / promoted_versions[V2].sha256
        assert path.exists()  # the current version was filled by the first turn
        _damage(path)
        healed = httpx.get(running.url + bundle_path(DOMAIN, V2, "tar.gz"))
        assert healed.content == promoted_versions[V2].archive.read_bytes()
        assert running.counter("cache_dropped_total") == 1
        _damage(path)
        away.away = True
        answer = raw(running.port, get(bundle_path(DOMAIN, V2, "tar.gz")))
    assert answer.status == 503 and answer.body.count(b"\n") == 1
    assert b"not cached" in answer.body and not path.exists()


def _damage(path: Path) -> None:
    path.chmod(0o644)
    with open(path, "r+b") as handle:
        first = handle.read(1)
        handle.seek(0)
        handle.write(bytes([first[0] ^ 1]))


def test_restarted_it_verifies_the_cache_and_serves_with_the_saved_pointers(
    memory_bucket: MemoryBucket, promoted_versions: dict[str, Seeded], tmp_path: Path
) -> None:
    """The bucket away and a restart: the saved pointers say what is current, the cache is
    hashed again (a damaged file dropped, never served), the rest is served."""
    cache = tmp_path / "cache"
    away = SwitchableBucket(memory_bucket)
    with serving(away, cache) as running:
        assert httpx.get(running.url + bundle_path(DOMAIN, V1, "tar.gz")).status_code == 200
    away.away = True
    with serving(away, cache) as running:
        assert running.service.pointers_from_disk
        current = httpx.get(running.url + bundle_path(DOMAIN, None, "tar.gz"))
        ready = httpx.get(running.url + "/readyz")
        assert running.counter("bucket_up") == 0 and running.counter("pointers_from_disk") == 1
        status = httpx.get(running.url + "/").text
    assert current.content == promoted_versions[V2].archive.read_bytes()
    assert ready.status_code == 200
    assert "pointers an earlier run saved" in status
    _damage(cache / "bundles" / promoted_versions[V2].sha256)
    with serving(away, cache) as running:
        answer = raw(running.port, get(bundle_path(DOMAIN, None, "tar.gz")))
        older = httpx.get(running.url + bundle_path(DOMAIN, V1, "tar.gz"))
        ready = httpx.get(running.url + "/readyz")
    assert (
        answer.status == 503 and promoted_versions[V2].archive.read_bytes()[:32] not in answer.raw
    )
    assert older.content == promoted_versions[V1].archive.read_bytes()
    assert ready.status_code == 503 and "not cached and verified" in ready.text


def test_an_unreadable_cache_record_costs_no_download_of_the_bundles_under_it(
    memory_bucket: MemoryBucket, promoted_versions: dict[str, Seeded], tmp_path: Path
) -> None:
    """cache.json damaged: each bundle under it is hashed again and kept once its version's
    manifest vouches for it; one whose bytes changed is dropped and filled from the bucket."""
    cache = tmp_path / "cache"
    counted = SwitchableBucket(memory_bucket)
    with serving(counted, cache):
        pass  # V2 (current) and V1 (its rollback target) filled
    assert len(counted.streams) == 2
    (cache / "cache.json").write_text('{"format": 1, "entries": ')
    _damage(cache / "bundles" / promoted_versions[V1].sha256)
    counted.streams.clear()
    with serving(counted, cache) as running:
        current = httpx.get(running.url + bundle_path(DOMAIN, None, "tar.gz"))
        older = httpx.get(running.url + bundle_path(DOMAIN, V1, "tar.gz"))
    assert current.content == promoted_versions[V2].archive.read_bytes()
    assert older.content == promoted_versions[V1].archive.read_bytes()
    assert counted.streams == [promoted_versions[V1].key]  # the damaged one, only
    entries = json.loads((cache / "cache.json").read_text())["entries"]
    assert entries[promoted_versions[V2].sha256]["versions"] == [[DOMAIN, V2]]
    assert "recovered" not in entries[promoted_versions[V2].sha256]


def test_a_bundle_kept_from_a_lost_record_waits_for_its_verdict(
    memory_bucket: MemoryBucket, promoted_versions: dict[str, Seeded], tmp_path: Path
) -> None:
    """cache.json gone and the bucket away: the kept file is not served on its hash alone
    (nothing vouches for it), and it is not thrown away either: with the bucket back, it
    is checked and served without a download."""
    cache = tmp_path / "cache"
    away = SwitchableBucket(memory_bucket)
    with serving(away, cache):
        pass
    (cache / "cache.json").unlink()
    away.away, away.streams = True, []
    with serving(away, cache) as running:
        answer = raw(running.port, get(bundle_path(DOMAIN, V2, "tar.gz")))
        ready = httpx.get(running.url + "/readyz")
        away.away = False
        running.refresh()
        served = httpx.get(running.url + bundle_path(DOMAIN, V2, "tar.gz"))
    data = promoted_versions[V2].archive.read_bytes()
    assert answer.status == 503 and data[:32] not in answer.raw
    assert ready.status_code == 503
    assert served.content == data and away.streams == []


def test_the_bucket_away_while_running_changes_nothing_served(
    memory_bucket: MemoryBucket, promoted_versions: dict[str, Seeded], tmp_path: Path
) -> None:
    away = SwitchableBucket(memory_bucket)
    with serving(away, tmp_path / "cache") as running:
        away.away = True
        running.refresh()
        served = httpx.get(running.url + bundle_path(DOMAIN, None, "tar.gz"))
        ready = httpx.get(running.url + "/readyz")
        status = httpx.get(running.url + "/").text
        gauge = running.counter("bucket_up")
    assert served.content == promoted_versions[V2].archive.read_bytes()
    assert ready.status_code == 200 and gauge == 0
    assert "Object store unreachable since" in status


def test_promote_and_rollback_move_the_current_link(
    memory_bucket: MemoryBucket, promoted_versions: dict[str, Seeded], tmp_path: Path
) -> None:
    with serving(memory_bucket, tmp_path / "cache") as running:
        chart.rollback(memory_bucket, DOMAIN)
        running.refresh()
        after = httpx.get(running.url + bundle_path(DOMAIN, None, "tar.gz"))
        assert after.headers["mirror-version"] == V1
        seed_version(memory_bucket, tmp_path, V3)
        chart.promote(memory_bucket, DOMAIN, V3)
        running.refresh()
        newest = httpx.get(running.url + bundle_path(DOMAIN, None, "tar.gz"))
    assert after.content == promoted_versions[V1].archive.read_bytes()
    assert newest.headers["mirror-version"] == V3


def test_least_recently_served_go_first_never_current_or_rollback_target(
    memory_bucket: MemoryBucket, promoted_versions: dict[str, Seeded], tmp_path: Path
) -> None:
    seed_version(memory_bucket, tmp_path, V3)
    chart.promote(memory_bucket, DOMAIN, V3)  # current V3, rollback target V2; V1 is neither
    size = promoted_versions[V1].size
    with serving(memory_bucket, tmp_path / "cache", cache_max=size) as running:
        assert httpx.get(running.url + bundle_path(DOMAIN, V1, "tar.gz")).status_code == 200
        running.refresh()
        cached = set(running.service.cache.entries)
        assert running.counter("cache_evictions_total") == 1
    assert promoted_versions[V1].sha256 not in cached
    assert {promoted_versions[V2].sha256} < cached  # the rollback target, and the current one


def test_a_stalled_client_is_cut_and_never_holds_up_another(
    memory_bucket: MemoryBucket, tmp_path: Path
) -> None:
    big = tmp_path / "big.tar.gz"
    big.write_bytes(bytes(range(256)) * (32 * 1024 * 1024 // 256))
    seeded = seed_version(memory_bucket, tmp_path, V1, archive=big)
    with serving(memory_bucket, tmp_path / "cache", idle_timeout="2s") as running:
        stalled = socket.create_connection(("127.0.0.1", running.port))
        stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        stalled.sendall(get(bundle_path(DOMAIN, V1, "tar.gz")))
        other = httpx.get(running.url + bundle_path(DOMAIN, V1, "tar.gz"), timeout=60)
        assert other.content == big.read_bytes() and seeded.size == len(other.content)
        cut = threading.Event()
        for _ in range(600):  # the cut comes after 2 s of nothing taken; wait up to 60 s
            if running.counter("clients_cut_total") == 1:
                cut.set()
                break
            cut.wait(0.1)
        stalled.close()
    assert cut.is_set()


def test_one_log_line_per_response(
    memory_bucket: MemoryBucket,
    promoted_versions: dict[str, Seeded],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    with (
        caplog.at_level(logging.INFO, logger="mirror.serve.access"),
        serving(memory_bucket, tmp_path / "cache") as running,
    ):
        httpx.get(running.url + bundle_path(DOMAIN, V2, "tar.gz"))
        raw(running.port, get("/nope"))
    lines = [r for r in caplog.records if r.name == "mirror.serve.access"]
    assert len(lines) == 2  # logged by two threads: in either order
    served, missing = sorted(lines, key=lambda r: int(r.__dict__["status"]))
    assert served.__dict__["client"] == "127.0.0.1" and served.__dict__["status"] == 200
    assert (served.__dict__["domain"], served.__dict__["version"]) == (DOMAIN, V2)
    assert served.__dict__["sha256"] == promoted_versions[V2].sha256
    assert served.__dict__["bytes"] == promoted_versions[V2].size
    assert served.__dict__["duration_ms"] >= 0
    assert missing.__dict__["status"] == 404 and missing.__dict__["domain"] is None


def test_metrics_name_what_was_served(
    memory_bucket: MemoryBucket, promoted_versions: dict[str, Seeded], tmp_path: Path
) -> None:
    with serving(memory_bucket, tmp_path / "cache") as running:
        httpx.get(running.url + bundle_path(DOMAIN, V1, "tar.gz"))
        httpx.get(running.url + bundle_path(DOMAIN, None, "tar.gz"))
        # a response is counted once its last byte is sent, after the client may have it
        assert until(lambda: running.counter("responses_total", code="200") == 2)
        text = httpx.get(running.url + "/metrics").text
    assert 'mirror_serve_responses_total{code="200"} 2.0' in text
    assert f'mirror_serve_served_total{{current="false",domain="{DOMAIN}",version="{V1}"}}' in text
    assert f'mirror_serve_current_info{{domain="{DOMAIN}",version="{V2}"}} 1.0' in text
    assert (
        f'mirror_serve_last_served_info{{current="true",domain="{DOMAIN}",version="{V2}"}} 1.0'
        in text
    )
    assert f'mirror_serve_served_version_age_seconds{{domain="{DOMAIN}"}}' in text
    assert "mirror_serve_cache_hits_total 2.0" in text  # both filled at start: current, rollback
    assert "mirror_serve_cache_fills_total 2.0" in text
    assert "mirror_serve_ready 1.0" in text and "mirror_serve_bucket_up 1.0" in text
    assert f'mirror_serve_refused_versions{{domain="{DOMAIN}"}} 0.0' in text


def test_a_request_body_is_never_read_as_the_next_request(
    memory_bucket: MemoryBucket, promoted_versions: dict[str, Seeded], tmp_path: Path
) -> None:
    """A body the service does not read (no method of it takes one) ends the connection, so
    it can never be taken for a request of its own (smuggling)."""
    inner = get(bundle_path(DOMAIN, V1, "tar.gz"))
    head = f"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: {len(inner)}\r\n\r\n".encode()
    with serving(memory_bucket, tmp_path / "cache") as running:
        posted = raw(running.port, head + inner)
        with_body = b"GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello"
        fetched = raw(running.port, with_body + inner)  # no Connection: close of its own
    assert posted.status == 405 and posted.raw.count(b"HTTP/1.1 ") == 1
    assert fetched.status == 200 and fetched.raw.count(b"HTTP/1.1 ") == 1


def test_a_promote_keeps_it_ready_while_the_new_current_version_fills(
    memory_bucket: MemoryBucket, promoted_versions: dict[str, Seeded], tmp_path: Path
) -> None:
    """Once ready, a moved pointer does not take it out of rotation (both replicas would
    leave the Service at once): the new current version is served after its one fill."""
    with serving(memory_bucket, tmp_path / "cache") as running:
        assert httpx.get(running.url + "/readyz").status_code == 200
        newest = seed_version(memory_bucket, tmp_path, V3)
        chart.promote(memory_bucket, DOMAIN, V3)
        running.service.poll()  # the pointers moved; nothing was filled
        assert running.service.cache.get(newest.sha256) is None
        ready = httpx.get(running.url + "/readyz")
        served = httpx.get(running.url + bundle_path(DOMAIN, None, "tar.gz"))
    assert ready.status_code == 200
    assert served.headers["mirror-version"] == V3
    assert served.content == newest.archive.read_bytes()


def test_before_the_first_read_of_the_bucket_it_answers_503_never_404(
    memory_bucket: MemoryBucket, promoted_version: Seeded, tmp_path: Path
) -> None:
    """A fresh replica has read nothing yet (or the store is away at its start, with no saved
    pointers): "no such domain" would be a final answer to a pod's fetch-at-start; it is 503
    with Retry-After until the pointers are read, then the bundle (trial3637 W6, S25)."""
    away = SwitchableBucket(memory_bucket)
    away.away = True
    path = bundle_path(DOMAIN, None, "tar.gz")
    with serving(away, tmp_path / "cache", refresh=False) as running:
        before = raw(running.port, get(path))
        running.refresh()  # the store is away: still nothing read
        during = raw(running.port, get(path))
        ready = httpx.get(running.url + "/readyz")
        away.away = False
        running.refresh()
        after = httpx.get(running.url + path)
    for answer in (before, during):
        assert answer.status == 503, answer.raw[:300]
        assert answer.header("retry-after") == "10"
        assert answer.body == b"not ready: the bucket has not been read yet\n"
    assert ready.status_code == 503 and "has not been read yet" in ready.text
    assert after.content == promoted_version.archive.read_bytes()
