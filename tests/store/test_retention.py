"""Retention: newest N per domain plus undelivered versions; rows first, then blobs."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import func, select

from mirror.sites import DEFAULT_SITE
from mirror.store.app import App
from mirror.store.models import (
    Bundle,
    Delivery,
    ExportRun,
    RunState,
    Transfer,
    TransferItem,
    Version,
)
from mirror.store.retention import gc

DELIVERED = datetime(2026, 1, 10, tzinfo=UTC)


def add_version(
    app: App, domain: str, label: str, content: bytes, *, delivered: bool = True
) -> tuple[int, str]:
    """A real blob in the store plus its Bundle and Version rows."""
    temp = app.store.tmp_dir / "fixture"
    temp.write_bytes(content)
    sha, size = app.store.add_file(temp)
    temp.unlink()
    with app.db.session() as session:
        if session.get(Bundle, sha) is None:
            session.add(
                Bundle(sha256=sha, size=size, format="tar.gz", tree_sha256=sha, file_count=1)
            )
        version = Version(
            domain=domain,
            label=label,
            bundle_sha256=sha,
            tree_sha256=sha,
        )
        session.add(version)
        session.flush()
        if delivered:
            session.add(Delivery(site=DEFAULT_SITE, version_id=version.id, delivered_at=DELIVERED))
        return version.id, sha


def labels(app: App, domain: str) -> list[str]:
    with app.db.session() as session:
        return sorted(session.scalars(select(Version.label).where(Version.domain == domain)).all())


def test_keeps_newest_n_by_label_order_and_frees_the_rest(app: App) -> None:
    shas = {}
    for label in ["2026-01-01", "2026-01-02", "2026-01-02.2", "2026-01-02.10", "2026-01-03"]:
        _id, shas[label] = add_version(app, "a.example.com", label, label.encode() * 100)
    add_version(app, "b.example.com", "2026-01-01", b"b-only" * 10)

    dry = gc(app, keep=2, dry_run=True)
    assert dry.dry_run
    assert [(v.domain, v.label) for v in dry.versions] == [
        ("a.example.com", "2026-01-01"),
        ("a.example.com", "2026-01-02"),
        ("a.example.com", "2026-01-02.2"),
    ]
    expected_bytes = sum(
        len(label.encode() * 100) for label in ["2026-01-01", "2026-01-02", "2026-01-02.2"]
    )
    assert dry.bytes_freed == expected_bytes
    assert len(labels(app, "a.example.com")) == 5
    assert all(app.store.has(sha) for sha in shas.values())

    real = gc(app, keep=2)
    assert real.bytes_freed == expected_bytes
    assert labels(app, "a.example.com") == ["2026-01-02.10", "2026-01-03"]
    assert labels(app, "b.example.com") == ["2026-01-01"]
    assert not app.store.has(shas["2026-01-01"])
    assert app.store.has(shas["2026-01-03"])
    with app.db.session() as session:
        assert session.scalar(select(func.count()).select_from(Bundle)) == 3
        indexed = {b.sha256: b.size for b in session.scalars(select(Bundle))}
    assert app.store.verify(indexed) == []
    assert gc(app, keep=2).bytes_freed == 0


def test_undelivered_versions_are_kept_however_old(app: App) -> None:
    add_version(app, "a.example.com", "2026-01-01", b"old undelivered", delivered=False)
    add_version(app, "a.example.com", "2026-01-02", b"old delivered")
    add_version(app, "a.example.com", "2026-01-03", b"newest")
    report = gc(app, keep=1)
    assert [v.label for v in report.versions] == ["2026-01-02"]
    assert report.kept_undelivered == 1
    assert labels(app, "a.example.com") == ["2026-01-01", "2026-01-03"]


def test_a_blob_shared_by_a_kept_version_stays(app: App) -> None:
    add_version(app, "a.example.com", "2026-01-01", b"same bytes")
    _id, sha = add_version(app, "b.example.com", "2026-01-05", b"same bytes")
    add_version(app, "a.example.com", "2026-01-02", b"newer")
    report = gc(app, keep=1)
    assert [v.label for v in report.versions] == ["2026-01-01"]
    assert report.blobs == []
    assert report.bytes_freed == 0
    assert app.store.has(sha)


def test_transfer_items_of_removed_versions_go_too(app: App) -> None:
    old_id, _sha = add_version(app, "a.example.com", "2026-01-01", b"shipped")
    add_version(app, "a.example.com", "2026-01-02", b"newer")
    with app.db.session() as session:
        transfer = Transfer(
            sequence=1, manifest_sha256="0" * 64, path="/t", item_count=1, total_bytes=7
        )
        session.add(transfer)
        session.flush()
        session.add(TransferItem(transfer_id=transfer.id, version_id=old_id))
    gc(app, keep=1)
    with app.db.session() as session:
        assert session.scalar(select(func.count()).select_from(TransferItem)) == 0
        assert session.scalar(select(func.count()).select_from(Transfer)) == 1


def test_a_bundle_an_unfinished_run_names_is_not_removed(app: App) -> None:
    temp = app.store.tmp_dir / "x"
    temp.write_bytes(b"downloaded, not versioned yet")
    sha, size = app.store.add_file(temp)
    with app.db.session() as session:
        session.add(Bundle(sha256=sha, size=size, format="tar", tree_sha256=sha, file_count=1))
        session.add(ExportRun(domain="a.example.com", state=RunState.DOWNLOADED, sha256=sha))
    report = gc(app, keep=1)
    assert report.blobs == []
    assert app.store.has(sha)
