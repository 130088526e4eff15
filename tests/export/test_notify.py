"""sd_notify over a real AF_UNIX datagram socket (filesystem path and abstract namespace)."""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from mirror.export.notify import Notifier, notify_address, watchdog_interval


@pytest.fixture
def receiver(tmp_path: Path) -> Iterator[tuple[socket.socket, str]]:
    path = tmp_path / "notify.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(path))
    sock.settimeout(2)
    yield sock, str(path)
    sock.close()


def test_sends_ready_status_watchdog_and_stopping(receiver: tuple[socket.socket, str]) -> None:
    sock, path = receiver
    notifier = Notifier({"NOTIFY_SOCKET": path})
    assert notifier.enabled
    assert notifier.ready("recovered")
    assert sock.recv(4096).decode().split("\n") == [
        "READY=1",
        f"MAINPID={os.getpid()}",
        "STATUS=recovered",
    ]
    assert notifier.status("3 running, 12 idle\nsecond line")
    assert sock.recv(4096) == b"STATUS=3 running, 12 idle second line"
    assert notifier.watchdog()
    assert sock.recv(4096) == b"WATCHDOG=1"
    assert notifier.stopping()
    assert sock.recv(4096) == b"STOPPING=1"
    notifier.close()


def test_abstract_namespace_socket() -> None:
    name = f"mirror-test-{uuid.uuid4().hex}"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind("\0" + name)
    sock.settimeout(2)
    try:
        notifier = Notifier({"NOTIFY_SOCKET": "@" + name})
        assert notifier.watchdog()
        assert sock.recv(4096) == b"WATCHDOG=1"
    finally:
        sock.close()


def test_without_systemd_every_call_is_a_no_op() -> None:
    notifier = Notifier({})
    assert not notifier.enabled
    assert not notifier.ready()
    assert not notifier.watchdog()
    assert notifier.watchdog_seconds is None


def test_unreachable_socket_is_logged_not_raised(tmp_path: Path) -> None:
    notifier = Notifier({"NOTIFY_SOCKET": str(tmp_path / "absent.sock")})
    assert notifier.enabled
    assert not notifier.ready()
    assert not notifier.status("still fine")


def test_addresses() -> None:
    assert notify_address({"NOTIFY_SOCKET": "@abc"}) == "\0abc"
    assert notify_address({"NOTIFY_SOCKET": "/run/systemd/notify"}) == "/run/systemd/notify"
    assert notify_address({"NOTIFY_SOCKET": "relative"}) is None
    assert notify_address({}) is None


def test_watchdog_interval() -> None:
    assert watchdog_interval({"WATCHDOG_USEC": "120000000"}, pid=10) == 120.0
    assert watchdog_interval({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "10"}, pid=10) == 30.0
    assert watchdog_interval({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "11"}, pid=10) is None
    assert watchdog_interval({"WATCHDOG_USEC": "0"}, pid=10) is None
    assert watchdog_interval({"WATCHDOG_USEC": "junk"}, pid=10) is None
    assert watchdog_interval({}, pid=10) is None


def test_a_full_receiver_never_blocks_the_sender() -> None:
    name = f"mirror-test-{uuid.uuid4().hex}"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind("\0" + name)
    try:
        notifier = Notifier({"NOTIFY_SOCKET": "@" + name})
        delivered = [notifier.status("x" * 1000) for _ in range(5000)]
        assert delivered[0] is True
        assert delivered[-1] is False  # nobody reads: the queue filled up and sends were dropped
    finally:
        sock.close()
