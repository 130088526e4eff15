"""list_versions and verify_store on a real store filled by real exports from the simulator."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
from sqlalchemy import select

from mirror.errors import Interrupted
from mirror.export.outcome import RunEvent
from mirror.export.runner import run_export
from mirror.sim import Simulator
from mirror.store.app import App
from mirror.store.blobs import BlobStore
from mirror.store.inventory import list_versions, verify_store
from mirror.store.models import ExportRun, Version
from mirror.vendorapi.client import VendorClient
from mirror.vendorapi.download import Validator, save_validator
from tests.fixtures.versions import deliver


@pytest.fixture
def client(sim: Simulator) -> Iterator[VendorClient]:
    with httpx.Client(timeout=30) as http:
        yield VendorClient(http, base_url=sim.url, key=sim.key)


@pytest.fixture
def filled(app: App, client: VendorClient) -> App:
    for domain in ("docs.b.test", "docs.a.test", "docs.b.test"):
        run_export(app, client, domain, sleep=lambda _s: None)
    return app


def test_empty_store(app: App) -> None:
    assert list_versions(app) == []
    report = verify_store(app)
    assert report.ok and report.checked == 0 and report.stray_temp_files == []


def test_list_versions_by_domain_then_label(filled: App) -> None:
    listed = list_versions(filled)
    assert [(v.ref.domain, v.ref.label[10:]) for v in listed] == [
        ("docs.a.test", ""),
        ("docs.b.test", ""),
        ("docs.b.test", ".2"),
    ]
    for version in listed:
        assert version.path.is_file() and version.path.stat().st_size == version.ref.size
        assert version.path.name == version.ref.sha256 and version.ref.format == "tar.gz"
        assert version.delivered_at is None and version.created_at.tzinfo is not None
        assert version.file_count > 0 and len(version.tree_sha256) == 64
    assert [v.ref.domain for v in list_versions(filled, "Docs.B.test")] == ["docs.b.test"] * 2
    assert list_versions(filled, "docs.none.test") == []


def test_delivered_time_is_shown(filled: App) -> None:
    """The first site that acknowledged a version says when it was delivered."""
    when = datetime(2026, 11, 22, 8, 0, tzinfo=UTC)
    with filled.db.session() as session:
        (vid,) = session.scalars(select(Version.id).where(Version.domain == "docs.a.test"))
    deliver(filled, vid, site="prod", when=when.replace(hour=9))
    deliver(filled, vid, when=when)
    (version,) = list_versions(filled, "docs.a.test")
    assert version.delivered_at == when


def test_verify_finds_every_kind_of_problem_without_raising(filled: App, tmp_path: Path) -> None:
    a, b1, b2 = list_versions(filled)
    assert verify_store(filled).ok and verify_store(filled).checked == 3
    os.chmod(a.path, 0o644)
    data = bytearray(a.path.read_bytes())
    data[100] ^= 0x01
    a.path.write_bytes(bytes(data))
    b1.path.unlink()
    loose = tmp_path / "loose.bin"
    loose.write_bytes(b"not indexed")
    extra_sha, _ = filled.store.add_file(loose)
    report = verify_store(filled)
    assert not report.ok
    found = {(p.kind, p.sha256) for p in report.problems}
    assert found == {("corrupt", a.ref.sha256), ("missing", b1.ref.sha256), ("extra", extra_sha)}
    assert b2.ref.sha256 not in {p.sha256 for p in report.problems}


def test_stray_temp_files_are_listed_but_live_partials_are_not(
    app: App, client: VendorClient
) -> None:
    cancel = threading.Event()

    def stop(event: RunEvent) -> None:
        if event.state == "downloaded":
            cancel.set()

    with pytest.raises(Interrupted):
        run_export(app, client, "docs.live.test", cancel=cancel, on_event=stop)
    stray = app.store.temp_path("run-999.part")
    stray.write_bytes(b"left over")
    with app.db.session() as session:
        live = session.scalars(select(ExportRun.partial_name).where(ExportRun.active)).one()
    assert live is not None
    save_validator(app.store.temp_path(live), Validator('"e1"', None, 10))  # a resumable partial's
    report = verify_store(app)
    assert report.ok
    assert report.stray_temp_files == [stray]


@pytest.mark.parametrize("workers", [1, 2, 5])
def test_parallel_verify_finds_what_the_store_finds_in_the_same_order(
    tmp_path: Path, workers: int
) -> None:
    store = BlobStore(tmp_path / "store")
    expected: dict[str, int] = {}
    for n in range(12):
        source = tmp_path / f"blob-{n}"
        source.write_bytes(os.urandom(3 * 1024 * 1024 + n))
        sha256, size = store.add_file(source)
        expected[sha256] = size
    names = sorted(expected)
    for name in names[1:4]:  # corrupt in content, same size
        path = store.blob_path(name)
        os.chmod(path, 0o644)
        data = bytearray(path.read_bytes())
        data[-1] ^= 0x01
        path.write_bytes(bytes(data))
    expected[names[5]] += 1  # corrupt by size
    store.remove(names[7])  # missing
    expected.pop(names[9])  # extra
    expected["0" * 64] = 10  # missing, never stored

    found = store.verify(expected, workers=workers)

    assert found == store.verify(expected, workers=1)
    with store.hash_in_background(workers) as hashing:  # as `store verify` hashes
        assert store.verify(expected, hashing=hashing) == found
    assert [p.kind for p in found].count("corrupt") == 4
    assert {p.sha256 for p in found} == {*names[1:4], names[5], names[7], names[9], "0" * 64}


def test_blobs_hashed_in_background_before_the_index_is_read_give_the_same_report(
    filled: App, tmp_path: Path
) -> None:
    store = filled.store
    with store.hash_in_background() as hashing:
        source = tmp_path / "late"
        source.write_bytes(b"a blob stored after the hashing started")
        late, _ = store.add_file(source)  # not in the background's list: hashed when asked
        report = verify_store(filled, hashing)
    assert report == verify_store(filled)
    assert [(p.kind, p.sha256) for p in report.problems] == [("extra", late)]
    assert report.checked > 0
