"""mirror serve's connections under a hostile or crowded network, over real sockets: numbers
of any length in a header, heads trickled byte by byte, every slot taken. Every answer is a
response of its own: logged once and counted (mirror.serve.access)."""

from __future__ import annotations

import contextlib
import logging
import socket
import struct
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from mirror.serve import ranges
from mirror.serve.connections import PROBE_SLOTS, Slot
from mirror.serve.routes import bundle_path
from tests.airgap.chart.seeding import DOMAIN, Seeded
from tests.fixtures.memory import MemoryBucket
from tests.fixtures.serving import V1, Answer, Running, get, parse_answer, raw, serving, until

HUGE = "9" * 5000  # beyond Python's 4 300-digit limit for int()
PATIENT = "120s"  # idle and head timeouts that no step of a test comes near


def access_lines(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "mirror.serve.access"]


def test_a_range_number_of_any_length_is_answered_logged_and_counted(
    memory_bucket: MemoryBucket,
    promoted_version: Seeded,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    path = bundle_path(DOMAIN, V1, "tar.gz")
    data = promoted_version.archive.read_bytes()
    with (
        caplog.at_level(logging.INFO, logger="mirror.serve.access"),
        serving(memory_bucket, tmp_path / "cache") as running,
    ):
        to_the_end = raw(running.port, get(path, f"Range: bytes=0-{HUGE}"))
        past_it = raw(running.port, get(path, f"Range: bytes={HUGE}-"))
        suffix = raw(running.port, get(path, f"Range: bytes=-{HUGE}"))
        assert running.counter("responses_total", code="206") == 2
        assert running.counter("responses_total", code="416") == 1
    assert (to_the_end.status, to_the_end.body) == (206, data)
    assert to_the_end.header("content-range") == f"bytes 0-{len(data) - 1}/{len(data)}"
    assert (past_it.status, past_it.header("content-range")) == (416, f"bytes */{len(data)}")
    assert (suffix.status, suffix.body) == (206, data)
    assert [r.__dict__["status"] for r in access_lines(caplog)] == [206, 416, 206]


def test_an_error_of_ours_is_a_500_line_logged_and_counted(
    memory_bucket: MemoryBucket,
    promoted_version: Seeded,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Whatever a request trips over, the client gets an answer and the log one line."""

    def broken(*args: object) -> ranges.Plan:
        raise ValueError("a fault injected into the range plan")

    with (
        caplog.at_level(logging.INFO, logger="mirror.serve"),
        serving(memory_bucket, tmp_path / "cache") as running,
    ):
        monkeypatch.setattr(ranges, "plan", broken)
        answer = raw(running.port, get(bundle_path(DOMAIN, V1, "tar.gz")))
        assert running.counter("responses_total", code="500") == 1
    assert answer.status == 500 and answer.body.count(b"\n") == 1
    assert b"injected" not in answer.raw  # the detail goes to the log, not the client
    failed = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(failed) == 1 and failed[0].exc_info is not None
    assert [r.__dict__["status"] for r in access_lines(caplog)] == [500]


@contextlib.contextmanager
def partial_heads(running: Running, count: int) -> Iterator[list[socket.socket]]:
    """`count` connections that sent a request line and never finish their head; reset at
    the end (a plain close would end their heads, which the server may answer and log)."""
    held = [socket.create_connection(("127.0.0.1", running.port)) for _ in range(count)]
    try:
        for conn in held:
            conn.sendall(b"GET /healthz HTTP/1.1\r\n")
        yield held
    finally:
        for conn in held:
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            conn.close()


def test_with_every_client_slot_taken_probes_are_answered_and_refusals_logged(
    memory_bucket: MemoryBucket,
    promoted_version: Seeded,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A busy pod stays alive and ready for its probes; what it refuses, it logs and counts."""
    limits = {"max_clients": 2, "idle_timeout": PATIENT, "header_timeout": PATIENT}
    with (
        caplog.at_level(logging.INFO, logger="mirror.serve.access"),
        serving(memory_bucket, tmp_path / "cache", **limits) as running,
        partial_heads(running, 2),
    ):
        connections = running.server.connections
        assert until(lambda: connections.count(Slot.CLIENT) == 2)
        alive = raw(running.port, get("/healthz"))
        ready = raw(running.port, get("/readyz"))
        assert connections.count(Slot.PROBE) == 0  # an answer read to its end: slot free
        crowded = raw(running.port, get(bundle_path(DOMAIN, V1, "tar.gz")))
        with partial_heads(running, PROBE_SLOTS):
            assert until(lambda: connections.count(Slot.PROBE) == PROBE_SLOTS)
            refused = raw(running.port, get("/healthz"))
            assert until(lambda: running.counter("responses_total", code="503") == 2)
    assert (alive.status, alive.body, ready.status) == (200, b"ok\n", 200)
    for busy in (crowded, refused):
        assert busy.status == 503 and busy.body == b"too many clients; try again soon\n"
        assert busy.header("retry-after") == "5"
    lines = [(r.__dict__["status"], r.__dict__["path"]) for r in access_lines(caplog)]
    crowded_path = bundle_path(DOMAIN, V1, "tar.gz")
    assert lines == [(200, "/healthz"), (200, "/readyz"), (503, crowded_path), (503, "-")]


def read_all(conn: socket.socket) -> Answer:
    data = bytearray()
    while chunk := conn.recv(65536):
        data.extend(chunk)
    return parse_answer(bytes(data))


def test_a_head_trickled_under_the_idle_timeout_is_cut_at_the_head_deadline(
    memory_bucket: MemoryBucket,
    promoted_version: Seeded,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Slowloris: a byte now and then, each well within idle_timeout, never a whole head."""
    stop = threading.Event()
    with (
        caplog.at_level(logging.INFO, logger="mirror.serve.access"),
        serving(
            memory_bucket, tmp_path / "cache", idle_timeout=PATIENT, header_timeout="1s"
        ) as running,
        socket.create_connection(("127.0.0.1", running.port), timeout=90) as trickler,
    ):
        trickler.sendall(b"GET /healthz HTTP/1.1\r\n")

        def trickle() -> None:
            while not stop.wait(0.2):
                with contextlib.suppress(OSError):
                    trickler.sendall(b"X")

        thread = threading.Thread(target=trickle, daemon=True)
        thread.start()
        try:
            answer = read_all(trickler)  # the server answers and closes; never a timeout here
        finally:
            stop.set()
            thread.join(30)
        assert running.counter("responses_total", code="408") == 1
    assert answer.status == 408 and answer.header("connection") == "close"
    assert answer.body == b"request line and headers not received within 1s\n"
    assert [r.__dict__["status"] for r in access_lines(caplog)] == [408]


def test_draining_it_is_not_ready_and_closes_every_connection_after_its_answer(
    memory_bucket: MemoryBucket, promoted_version: Seeded, tmp_path: Path
) -> None:
    with (
        serving(memory_bucket, tmp_path / "cache") as running,
        socket.create_connection(("127.0.0.1", running.port), timeout=60) as kept,
    ):
        kept.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")  # keep-alive
        first = b""
        while not first.endswith(b"\r\n\r\nok\n"):  # the whole first answer, head and body
            first += kept.recv(1024)
        assert first.startswith(b"HTTP/1.1 200")
        running.service.draining.set()  # as SIGTERM does (mirror.serve.run)
        kept.sendall(b"GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n")
        answer = read_all(kept)  # closed after this answer: no keep-alive while draining
    assert answer.status == 503 and answer.header("connection") == "close"
    assert answer.body == b"draining: stopping once the responses under way are sent\n"
