"""Repairing damaged blobs from a good copy: a download of the same bytes, a blob of the same
site, or a finished download in tmp/ (the fault cases in tests/faults cover the command line)."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

from sqlalchemy import select

from mirror.archive import inspect_archive
from mirror.store.app import App
from mirror.store.bundles import add_bundle
from mirror.store.inventory import verify_store
from mirror.store.maintenance.repair import repair_from_download, repair_store
from mirror.store.models import Bundle, Version
from tests.fixtures.archives import make_tar_gz
from tests.fixtures.versions import add_version

SITE = {"index.html": b"<h1>same site</h1>", "a/b.html": b"b"}


def damage(app: App, sha256: str) -> None:
    path = app.store.blob_path(sha256)
    path.chmod(0o644)
    data = bytearray(path.read_bytes())
    data[-5] ^= 0x40
    path.write_bytes(bytes(data))


def same_site_bundle(tmp_path: Path, name: str, variant: int) -> Path:
    """A real archive of SITE; `variant` changes the timestamps and compression level only,
    so the bytes (sha256) differ while the site (tree hash) stays the same."""
    path = tmp_path / name
    with tarfile.open(path, "w:gz", compresslevel=variant % 9 + 1) as archive:
        for member, data in SITE.items():
            info = tarfile.TarInfo(member)
            info.size = len(data)
            info.mtime = 1_700_000_000 + variant
            archive.addfile(info, io.BytesIO(data))
    return path


def store_as_version(app: App, archive: Path, domain: str, label: str) -> str:
    report = inspect_archive(archive)
    sha256, size = app.store.add_file(archive)
    with app.db.session() as session:
        add_bundle(session, sha256, size, report)
        session.add(
            Version(
                domain=domain, label=label, bundle_sha256=sha256, tree_sha256=report.tree_sha256
            )
        )
    return sha256


def test_a_download_of_the_same_site_takes_over_the_damaged_blobs_versions(
    app: App, tmp_path: Path
) -> None:
    old = store_as_version(app, same_site_bundle(tmp_path, "a.tgz", 1), "d.test", "v1")
    damage(app, old)
    download = same_site_bundle(tmp_path, "b.tgz", 2)
    new_sha, size = app.store.add_file(download)  # only to learn its sha256
    app.store.remove(new_sha)
    repairs = repair_from_download(app, download, new_sha, size, inspect_archive(download))
    assert [r.sha256 for r in repairs] == [old] and all(r.repaired for r in repairs)
    assert download.exists()  # the caller's file is left alone
    with app.db.session() as session:
        assert list(session.scalars(select(Version.bundle_sha256))) == [new_sha]
        assert session.get(Bundle, old) is None
    assert verify_store(app).ok


def test_nothing_damaged_means_nothing_done(app: App, tmp_path: Path) -> None:
    archive = make_tar_gz(tmp_path / "x.tgz", SITE)
    sha = store_as_version(app, archive, "d.test", "v1")
    assert (
        repair_from_download(app, archive, sha, archive.stat().st_size, inspect_archive(archive))
        == []
    )


def test_verify_repair_re_points_to_an_intact_blob_of_the_same_site(
    app: App, tmp_path: Path
) -> None:
    old = store_as_version(app, same_site_bundle(tmp_path, "a.tgz", 1), "d.test", "v1")
    good = store_as_version(app, same_site_bundle(tmp_path, "b.tgz", 3), "d.test", "v2")
    _, unrelated = add_version(app, "other.test", "v1")
    damage(app, old)
    damage(app, unrelated)
    report = repair_store(app)
    by_sha = {r.sha256: r for r in report.repairs}
    assert by_sha[old].repaired and good in by_sha[old].detail
    assert not by_sha[unrelated].repaired and "other.test" in by_sha[unrelated].detail
    assert [p.sha256 for p in report.after.problems] == [unrelated]
