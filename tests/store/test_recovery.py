"""Start-up recovery steps on a real store and index: temp sweep and orphan blobs."""

from __future__ import annotations

import hashlib
import io
import logging
import os
import subprocess
import sys
import tarfile
from subprocess import PIPE

import pytest
from sqlalchemy import select

from mirror.fsutil import pid_alive
from mirror.store.app import App
from mirror.store.maintenance.recovery import reconcile_orphan_blobs, sweep_temp_files
from mirror.store.models import Bundle, ExportRun, RunState


def test_an_orphan_that_is_a_directory_with_files_in_it_is_left_not_a_failed_start(
    app: App, caplog: pytest.LogCaptureFixture
) -> None:
    """The step runs when an export or the daemon starts: a directory under a blob's name
    was an `unexpected IsADirectoryError` there. An empty one is removed; one with files in
    it is left, named in a warning (removing what someone put there is theirs to decide)."""
    empty, full = "ab" + "1" * 62, "ab" + "2" * 62
    app.store.blob_path(empty).mkdir(parents=True)
    app.store.blob_path(full).mkdir()
    (app.store.blob_path(full) / "kept").write_bytes(b"someone's")
    with caplog.at_level(logging.WARNING):
        assert reconcile_orphan_blobs(app) == ([], [empty])
    assert list(app.store.iter_blobs()) == [full]
    assert (app.store.blob_path(full) / "kept").read_bytes() == b"someone's"
    [left] = [r for r in caplog.records if r.getMessage() == "orphan blob not removed"]
    assert str(app.store.blob_path(full)) in left.reason  # type: ignore[attr-defined]


def tar_gz(files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def place_blob(app: App, data: bytes, name: str | None = None) -> str:
    """Write bytes straight into the blob tree, the way a crash can leave them."""
    sha = name or hashlib.sha256(data).hexdigest()
    path = app.store.blob_path(sha)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    os.chmod(path, 0o444)
    return sha


def dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_sweep_keeps_referenced_and_live_files_and_removes_the_rest(app: App) -> None:
    tmp = app.store.tmp_dir
    (tmp / "run-7.part").write_bytes(b"partial of an unfinished run")
    (tmp / "run-7.part.validator").write_bytes(b'{"etag": "\\"abc\\""}')
    (tmp / "run-3.part").write_bytes(b"partial of a failed run")
    (tmp / "run-3.part.validator").write_bytes(b"{}")
    (tmp / f"add-{os.getpid()}-mine").write_bytes(b"ours, from a crash")
    # alive until the test ends it (a timed sleep could end first on a busy machine)
    live = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=PIPE)
    (tmp / f"add-{live.pid}-theirs").write_bytes(b"another live process")
    (tmp / f"add-{dead_pid()}-gone").write_bytes(b"its writer is dead")
    with app.db.session() as session:
        session.add(
            ExportRun(domain="a.example.com", state=RunState.DOWNLOADING, partial_name="run-7.part")
        )
        session.add(
            ExportRun(
                domain="a.example.com",
                state=RunState.FAILED,
                active=False,
                partial_name="run-3.part",
            )
        )
    try:
        removed = sweep_temp_files(app)
    finally:
        live.kill()
        live.wait()
    left = sorted(p.name for p in app.store.temp_files())
    assert left == sorted(["run-7.part", "run-7.part.validator", f"add-{live.pid}-theirs"])
    assert len(removed) == 4
    assert "run-3.part" in removed and "run-3.part.validator" in removed


def test_sweep_honours_min_age(app: App) -> None:
    (app.store.tmp_dir / "fresh").write_bytes(b"x")
    assert sweep_temp_files(app, min_age=3600) == []
    assert sweep_temp_files(app) == ["fresh"]


def test_pid_alive() -> None:
    assert pid_alive(os.getpid())
    assert not pid_alive(dead_pid())
    assert not pid_alive(0)


def test_orphan_blobs_are_adopted_when_whole_and_safe_else_removed(app: App) -> None:
    good = place_blob(app, tar_gz({"index.html": b"<html>ok</html>", "a/b.css": b"body{}"}))
    misnamed = place_blob(app, tar_gz({"index.html": b"x"}), name="ab" + "0" * 62)
    evil = place_blob(app, tar_gz({"../../etc/passwd": b"root"}))
    garbage = place_blob(app, b"not an archive at all")
    claimed = place_blob(app, tar_gz({"index.html": b"claimed by a run"}))
    indexed = place_blob(app, tar_gz({"index.html": b"already indexed"}))
    with app.db.session() as session:
        session.add(ExportRun(domain="c.example.com", state=RunState.DOWNLOADED, sha256=claimed))
        session.add(
            Bundle(sha256=indexed, size=1, format="tar.gz", tree_sha256="1" * 64, file_count=1)
        )

    adopted, removed = reconcile_orphan_blobs(app)

    assert adopted == [good]
    assert sorted(removed) == sorted([misnamed, evil, garbage])
    assert sorted(app.store.iter_blobs()) == sorted([good, claimed, indexed])
    with app.db.session() as session:
        bundle = session.get(Bundle, good)
        assert bundle is not None
        assert bundle.format == "tar.gz"
        assert bundle.file_count == 2
        assert bundle.size == app.store.blob_path(good).stat().st_size
        assert session.get(Bundle, claimed) is None
        assert len(session.scalars(select(Bundle)).all()) == 2
    assert reconcile_orphan_blobs(app) == ([], [])
