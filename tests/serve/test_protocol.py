"""mirror serve's request heads against RFC 9112, where http.server is lenient: absolute-form
targets accepted (3.2.2), HTTP/0.9 answered at once, malformed header sections refused (400)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.airgap.chart.seeding import DOMAIN, Seeded
from tests.fixtures.memory import MemoryBucket
from tests.fixtures.serving import raw, serving

BUNDLE = f"/domains/{DOMAIN}/current/bundle.tar.gz"


def test_an_absolute_form_target_is_served_by_its_path(
    memory_bucket: MemoryBucket, promoted_version: Seeded, tmp_path: Path
) -> None:
    """RFC 9112 3.2.2: a server MUST accept absolute-form; the authority is ignored (an
    origin server), and the path meets the same checks as origin-form."""
    with serving(memory_bucket, tmp_path / "cache") as running:
        bundle = raw(running.port, _head(f"http://elsewhere:1{BUNDLE}", "Host: x"))
        probe = raw(running.port, _head("HTTP://127.0.0.1:8080/healthz", "Host: x"))
        dotted = raw(running.port, _head(f"http://x/domains/{DOMAIN}/../x", "Host: x"))
    assert (bundle.status, bundle.body) == (200, promoted_version.archive.read_bytes())
    assert (probe.status, probe.body) == (200, b"ok\n")
    assert dotted.status == 400


def test_an_http09_request_line_is_answered_at_once(
    memory_bucket: MemoryBucket, promoted_version: Seeded, tmp_path: Path
) -> None:
    """No version, so no headers will follow: 400 now, not after the header or idle timeout
    (both far beyond the wait here)."""
    with serving(
        memory_bucket, tmp_path / "cache", header_timeout=600, idle_timeout=600
    ) as running:
        answer = raw(running.port, b"GET /healthz\r\n", timeout=60)
    assert (answer.status, answer.body) == (400, b"HTTP/0.9 requests are not served\n")


MALFORMED = {
    "no Host on HTTP/1.1": (
        b"GET /healthz HTTP/1.1\r\nConnection: close\r\n\r\n",
        "no Host header in an HTTP/1.1 request",
    ),
    "two Host": (
        b"GET /healthz HTTP/1.1\r\nHost: a\r\nHost: b\r\nConnection: close\r\n\r\n",
        "more than one Host header",
    ),
    "space in a name": (
        b"GET /healthz HTTP/1.1\r\nHost: a\r\nX A: a\r\nConnection: close\r\n\r\n",
        "a header line is not NAME: VALUE",
    ),
    "space before the colon": (
        b"GET /healthz HTTP/1.1\r\nHost : a\r\nConnection: close\r\n\r\n",
        "a header line is not NAME: VALUE",
    ),
    "obs-fold": (
        b"GET /healthz HTTP/1.1\r\nHost: a\r\nX-A: a\r\n b\r\nConnection: close\r\n\r\n",
        "a header line starts with white space (obs-fold",
    ),
}


@pytest.mark.parametrize("name", list(MALFORMED))
def test_a_malformed_header_section_is_a_bad_request(
    memory_bucket: MemoryBucket, promoted_version: Seeded, tmp_path: Path, name: str
) -> None:
    """RFC 9112 3.2 and 5: 400, one line naming what is wrong, and the connection closed
    (with a line the parser stopped at, whatever followed, Connection: close too, was never
    read as a header)."""
    request, says = MALFORMED[name]
    with serving(memory_bucket, tmp_path / "cache", idle_timeout=600) as running:
        answer = raw(running.port, request, timeout=60)
    assert answer.status == 400 and answer.body.decode().startswith(says), answer.raw[:300]
    assert answer.header("connection") == "close"


def test_what_rfc_9112_allows_is_still_served(
    memory_bucket: MemoryBucket, promoted_version: Seeded, tmp_path: Path
) -> None:
    """HTTP/1.0 needs no Host; a bare LF ends a line (RFC 9112 2.2 lets a server take it)."""
    with serving(memory_bucket, tmp_path / "cache") as running:
        old = raw(running.port, b"GET /healthz HTTP/1.0\r\n\r\n")
        bare = raw(running.port, b"GET /healthz HTTP/1.1\nHost: a\nConnection: close\n\n")
    assert (old.status, old.body) == (200, b"ok\n")
    assert (bare.status, bare.body) == (200, b"ok\n")


def _head(target: str, *headers: str) -> bytes:
    lines = [f"GET {target} HTTP/1.1", *headers, "Connection: close"]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()
