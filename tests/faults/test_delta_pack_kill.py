"""SIGKILL of `mirror transfer pack` while it builds a delta: nothing is left under the
store's tmp dir (the delta's temp files never have a name), no set carries the name OUT,
no set is recorded, and the next pack carries the version as a delta."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from mirror.config import settings_from_dict
from mirror.outbound.pack import pack
from mirror.outbound.recipe import base_object
from mirror.store.app import App
from mirror.store.maintenance.recovery import sweep_temp_files
from mirror.store.models import Transfer
from tests.fixtures.campaign import ONLY_IN_MAKE_FAULTS
from tests.fixtures.cli import write_config
from tests.fixtures.kills import killed_when
from tests.fixtures.s3 import transfer_config
from tests.fixtures.versions import add_sim_version

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]
DOCS = "docs.example.com"
SITE: dict[str, Any] = {"pages": 40, "page_size": 4096, "bundle_size": 160 << 20}


def open_temp_files(pid: int, tmp_dir: Path) -> list[str]:
    """What process `pid` has open under `tmp_dir` (nameless files show as `... (deleted)`)."""
    found = []
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith(str(tmp_dir)):
                found.append(target)
    except OSError:
        return []
    return found


def _first_set_packed(
    tmp_path: Path, key_pair: tuple[Path, Path], site: dict[str, Any]
) -> tuple[Path, dict[str, Any], Path]:
    """A store with a first version of `site`, packed whole as set 1: (store, config
    document, config file)."""
    store_dir = tmp_path / "store"
    store_dir.mkdir()
    document = transfer_config(store_dir, key_pair)
    config = write_config(tmp_path / "connected.toml", document)
    app = App(settings_from_dict(document))
    try:
        add_sim_version(app, DOCS, "2026-11-20", export_number=0, **site)
        assert pack(app, tmp_path / "set-1").sequence == 1
    finally:
        app.close()
    return store_dir, document, config


@pytest.mark.fault(
    "13.1 pack killed while building a delta",
    "no temp file left, no set, nothing recorded; the next pack carries the delta",
)
def test_kill_during_delta_build_leaves_nothing(
    tmp_path: Path, key_pair: tuple[Path, Path], fault_got: list[str]
) -> None:
    if not Path("/proc/self/fd").is_dir():
        pytest.skip("needs /proc to see the packer's open files")
    store_dir, document, config = _first_set_packed(tmp_path, key_pair, SITE)
    app = App(settings_from_dict(document))
    try:
        add_sim_version(app, DOCS, "2026-11-21", export_number=1, **SITE)
    finally:
        app.close()
    tmp_dir = store_dir / "tmp"
    out = tmp_path / "set-2"
    seen: list[str] = []

    def temp_files_open(pid: int) -> str | None:
        seen[:] = open_temp_files(pid, tmp_dir)
        return "temp files open" if seen else None

    where = killed_when(temp_files_open, "--config", str(config), "transfer", "pack", str(out))
    assert where is not None, "the pack finished before a temp file was seen"
    assert seen, "the pack finished before a temp file was seen"
    assert all(target.endswith("(deleted)") or "/#" in target for target in seen), seen
    left = sorted(path.name for path in tmp_dir.iterdir())
    assert left == []
    assert not out.exists()
    fault_got.append(f"killed with {len(seen)} temp file(s) open, none named; tmp left: {left}")
    app = App(settings_from_dict(document))
    try:
        with app.db.session() as session:
            assert [t.sequence for t in session.query(Transfer)] == [1]
        again = pack(app, out)
        assert again.sequence == 2 and again.items[0].delta is not None
        assert again.items[0].delta.base_version == "2026-11-20"
        fault_got.append(f"next pack: set 2, delta against {again.items[0].delta.base_version}")
    finally:
        app.close()


# a third of the pages change: the delta goes, and its recipe, kept, takes a while to write
CHANGING: dict[str, Any] = {"pages": 800, "page_size": 65536, "change_share": 0.3}


@ONLY_IN_MAKE_FAULTS  # 20 CPU s of versions to catch the window; the delta-build kill runs
@pytest.mark.fault(
    "13.1 pack killed while it keeps a splice recipe",
    "tmp holds only what the start-up sweep removes; no partial recipe; the next pack keeps one",
)
def test_kill_while_keeping_a_recipe_leaves_nothing_the_sweep_does_not_remove(
    tmp_path: Path, key_pair: tuple[Path, Path], fault_got: list[str]
) -> None:
    """The carried contents the recipe's splice inserts are spooled under tmp/, and the
    kept recipe is written there before its rename into recipes/: a killed pack leaves no
    directory there (the sweep and `store verify` see files only) and nothing named where
    the next pack would trust it."""
    store_dir, document, config = _first_set_packed(tmp_path, key_pair, CHANGING)
    tmp_dir = store_dir / "tmp"

    def keeping(_pid: int) -> str | None:
        return "keeping" if any(p.name.startswith("recipe-") for p in tmp_dir.iterdir()) else None

    where = None
    for number in range(1, 4):  # a new version each time, until the kill lands
        app = App(settings_from_dict(document))
        try:
            add_sim_version(app, DOCS, f"2026-11-2{number}", export_number=number, **CHANGING)
        finally:
            app.close()
        out = tmp_path / f"set-{number + 1}"
        args = ("--config", str(config), "transfer", "pack", str(out))
        where = killed_when(keeping, *args, poll=0.001)
        if where is not None:
            break
    assert where is not None, "every pack finished before its recipe was kept"
    left = sorted(tmp_dir.iterdir())
    assert not [path for path in left if not path.is_file()], left
    app = App(settings_from_dict(document))
    try:
        swept = sweep_temp_files(app)
        assert sorted(tmp_dir.iterdir()) == [], swept
        fault_got.append(f"killed while keeping; tmp left: {[p.name[:7] for p in left]}, swept")
        assert [p for p in (store_dir / "recipes").rglob("*") if p.is_file()] == kept_whole(app)
        again = pack(app, out)
        assert again.items[0].delta is not None and again.items[0].delta.spliced
        assert kept_whole(app), "the next pack keeps its recipe"
    finally:
        app.close()


def kept_whole(app: App) -> list[Path]:
    """The kept recipes the next pack can use (`base_object` replays them)."""
    found = []
    for path in sorted(app.store.recipes_dir.rglob("*")):
        if path.is_file() and base_object(app.store, path.name).kept:
            found.append(path)
    return found
