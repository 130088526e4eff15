"""The one insertion of a bundle row (mirror.store.bundles), used by the run, adoption, repair."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import select

from mirror.archive import inspect_archive
from mirror.store.app import App
from mirror.store.bundles import add_bundle, newest_version
from mirror.store.models import Bundle, Version
from tests.fixtures.archives import make_tar_gz

MOMENT = datetime(2026, 11, 20, 8, 0, tzinfo=UTC)


def test_a_bundle_is_indexed_once_and_the_first_row_stays(app: App, tmp_path: Path) -> None:
    archive = make_tar_gz(tmp_path / "site.tar.gz", {"index.html": b"<h1>hi</h1>"})
    report = inspect_archive(archive)
    sha256, size = app.store.add_file(archive)
    with app.db.session() as session:
        assert add_bundle(session, sha256, size, report, created_at=MOMENT) is True
    with app.db.session() as session:
        assert add_bundle(session, sha256, size + 1, report) is False
    with app.db.session() as session:
        rows = list(session.scalars(select(Bundle)))
    assert [(r.sha256, r.size, r.format, r.tree_sha256, r.file_count) for r in rows] == [
        (sha256, size, report.format, report.tree_sha256, report.file_count)
    ]
    assert rows[0].created_at == MOMENT


def test_newest_version_is_chosen_by_label_order_not_as_text() -> None:
    rows = [
        Version(domain="d.test", label=label, bundle_sha256="0" * 64, tree_sha256="1" * 64)
        for label in ("2026-11-21.9", "2026-11-21.10", "2026-11-20.12", "2026-11-21")
    ]
    newest = newest_version(rows)
    assert newest is not None and newest.label == "2026-11-21.10"
    assert newest_version([]) is None
