"""One store, one index: the store id file, its record in the index, and the refusal."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from mirror.config import settings_from_dict
from mirror.errors import ConfigError
from mirror.store.app import App
from mirror.store.binding import STORE_ID_FILE, bind_store
from mirror.store.db import Database
from mirror.store.models import IndexInfo
from tests.fixtures.cli import mirror_cli, write_config


def database(path: Path) -> Database:
    db = Database(f"sqlite:///{path}")
    db.upgrade()
    return db


def test_first_use_binds_the_store_and_the_index(tmp_path: Path) -> None:
    store = tmp_path / "store"
    store.mkdir()
    db = database(tmp_path / "a.db")
    binding = bind_store(store, db)
    document = json.loads((store / STORE_ID_FILE).read_text())
    assert document == {"store_id": binding.store_id, "index_id": binding.index_id}
    with db.session() as session:
        assert session.get(IndexInfo, "store_id").value == binding.store_id  # type: ignore[union-attr]
        assert session.get(IndexInfo, "index_id").value == binding.index_id  # type: ignore[union-attr]
    assert bind_store(store, db) == binding  # the same answer every time
    name = binding.partial_name(7)
    assert binding.index_id[:12] in name and name.endswith("-7.part")
    db.dispose()


def test_a_second_index_on_the_same_store_is_refused(tmp_path: Path) -> None:
    store = tmp_path / "store"
    store.mkdir()
    first, second = database(tmp_path / "a.db"), database(tmp_path / "b.db")
    bind_store(store, first)
    with pytest.raises(ConfigError, match="belongs to another index") as caught:
        bind_store(store, second)
    assert caught.value.exit_code == 2
    first.dispose()
    second.dispose()


def test_replicas_binding_at_once_agree_on_one_store_id(tmp_path: Path) -> None:
    store = tmp_path / "store"
    store.mkdir()
    db = database(tmp_path / "a.db")
    results: list[object] = []

    def bind() -> None:
        try:
            results.append(bind_store(store, db))
        except Exception as exc:  # collected and asserted below
            results.append(exc)

    threads = [threading.Thread(target=bind) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert len(set(map(repr, results))) == 1, results
    assert not isinstance(results[0], Exception)
    assert sorted(p.name for p in store.iterdir()) == [STORE_ID_FILE]
    db.dispose()


def test_cli_refuses_a_second_index_with_one_line_and_exit_2(tmp_path: Path) -> None:
    store = tmp_path / "store"
    first = write_config(tmp_path / "a.toml", {"store": {"path": str(store)}})
    other_db = f"sqlite:///{tmp_path / 'other.db'}"
    second = write_config(
        tmp_path / "b.toml", {"store": {"path": str(store), "database": other_db}}
    )
    assert mirror_cli("--config", str(first), "store", "verify", "--repair").returncode == 0
    refused = mirror_cli("--config", str(second), "store", "verify")
    assert refused.returncode == 2, refused.stderr
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mirror: error: the store at ")
    assert "belongs to another index" in lines[0] and "Traceback" not in refused.stderr
    assert mirror_cli("--config", str(first), "store", "verify").returncode == 0


def test_exports_name_partials_after_the_index(tmp_path: Path) -> None:
    app = App(settings_from_dict({"store": {"path": str(tmp_path / "store")}}))
    try:
        assert app.binding.partial_name(3).startswith(f"run-i{app.binding.index_id[:12]}")
    finally:
        app.close()
