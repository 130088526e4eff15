"""The loopback S3 server of tests, demo and benchmarks (mirror/sim/seaweed.py): it starts
even when a port it picked is taken meanwhile, and leaves nothing behind when stopped; and
the one quirk of its version listing that the fixtures' walks must survive."""

from __future__ import annotations

import socket
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from mirror.sim import seaweed
from mirror.sim.seaweed import ADMIN, READ_ONLY, Identity, SeaweedServer
from tests.fixtures.s3 import empty_bucket, key_versions

# Versions of one key that sorts first: with the default page of 1,000 entries, the first
# page of a whole-bucket listing ends inside `b.example.com/2026-11-28/`
FILLER_VERSIONS = 999


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


@pytest.mark.s3
@pytest.mark.slow
def test_a_paged_version_walk_loses_keys_and_the_fixtures_count_and_empty_every_one(
    s3_admin_client: Any,
) -> None:
    """SeaweedFS 4.48 collects a ListObjectVersions page in its directories' order and sorts it
    after: a page ending inside `D/` loses `D.2/` and `D.3/`, which sort before `D/` ('.' <
    '/'). This is the layout the import's kill loop met (an index rewritten about 1,000 times
    beside versions `D`, `D.2`, `D.3`); counting each key by its own prefix and emptying by
    first pages are exact on it."""
    client, name = s3_admin_client, f"mirror-test-{uuid.uuid4().hex[:12]}"
    client.create_bucket(Bucket=name)
    try:
        client.put_bucket_versioning(Bucket=name, VersioningConfiguration={"Status": "Enabled"})
        filler = "static-export/a.example.com/index.json"
        with ThreadPoolExecutor(8) as pool:
            for _ in pool.map(
                lambda i: client.put_object(Bucket=name, Key=filler, Body=b"%d" % i),
                range(FILLER_VERSIONS),
            ):
                pass
        keys = [
            f"static-export/b.example.com/{label}/{file}"
            for label in ("2026-11-28", "2026-11-28.2", "2026-11-28.3")
            for file in ("bundle.tar.gz", "manifest.json")
        ]
        for key in keys:
            client.put_object(Bucket=name, Key=key, Body=b"x")
        client.delete_object(Bucket=name, Key=keys[-1])  # a delete marker over it

        paged: Counter[str] = Counter()
        for page in client.get_paginator("list_object_versions").paginate(Bucket=name):
            paged.update(item["Key"] for item in page.get("Versions", []))
        lost = [key for key in keys if key not in paged]
        assert lost, "the server no longer loses keys at a page boundary: this layout shows nothing"
        assert all("/2026-11-28." in key for key in lost), lost

        assert key_versions(client, name, filler) == (FILLER_VERSIONS, 0)
        assert [key_versions(client, name, key) for key in keys] == [(1, 0)] * 5 + [(1, 1)]
        empty_bucket(client, name)
        left = client.list_object_versions(Bucket=name)
        assert left.get("Versions", []) == [] and left.get("DeleteMarkers", []) == []
    finally:
        client.delete_bucket(Bucket=name)  # SeaweedFS removes a bucket that is not empty too
