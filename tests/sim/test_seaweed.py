"""The loopback S3 server of tests, demo and benchmarks (mirror/sim/seaweed.py): it starts
even when a port it picked is taken meanwhile, and leaves nothing behind when stopped."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from mirror.sim import seaweed
from mirror.sim.seaweed import ADMIN, READ_ONLY, Identity, SeaweedServer


def test_a_port_taken_meanwhile_is_started_again_elsewhere_and_stop_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_free_ports = seaweed.free_ports
    picked: list[list[int]] = []
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()

        def first_pick_collides(count: int) -> list[int]:
            ports = real_free_ports(count)
            if not picked:
                ports[seaweed.PORT_FLAGS.index("master.port")] = taken.getsockname()[1]
            picked.append(ports)
            return ports

        monkeypatch.setattr(seaweed, "free_ports", first_pick_collides)
        admin = Identity("admin", "test-admin", "test-admin-secret", ADMIN)
        reader = Identity("reader", "test-reader", "test-reader-secret", READ_ONLY)
        server = SeaweedServer(tmp_path / "s3", [admin, reader])
        with server:
            assert len(picked) == 2
            process = server.process
            assert process is not None
            server.client(admin).create_bucket(Bucket="made-by-admin")
            listed = server.client(reader).list_buckets()["Buckets"]
            assert [b["Name"] for b in listed] == ["made-by-admin"]
    assert process.poll() is not None
    leftovers = [
        path
        for path in Path("/tmp").glob("seaweedfs-*.sock")
        if any(path.name.endswith(f"-{port}.sock") for ports in picked for port in ports)
    ]
    assert leftovers == []
    assert "secret" not in (tmp_path / "s3" / "weed.log").read_text()
