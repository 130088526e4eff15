"""Deltas on the connected side, against real simulator archives in a real store and index
(SQLite, and PostgreSQL where the base choice queries the index): which base, what the
delta carries, that its tree and archive are the version's, when it is chosen, the dry run,
and that memory does not grow with the bundle."""

from __future__ import annotations

import hashlib
import io
import json
import os
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from sqlalchemy import select

from mirror.archive import extract_archive, inspect_archive, tree_hash
from mirror.cli.contract import DELTA
from mirror.config import settings_from_dict
from mirror.errors import IntegrityError, TemporaryFailure
from mirror.outbound.delta import (
    BASE_BLOB_MISSING,
    FULL_ASKED,
    NO_BASE,
    NOT_SMALLER,
    Base,
    choose_bases,
)
from mirror.outbound.pack import Selection, dry_run, pack
from mirror.sites import DEFAULT_SITE, held_bases
from mirror.store.app import App
from mirror.store.models import Transfer, TransferItem, Version
from mirror.store.sitestate import site_facts
from mirror.transferset.delta._compression import current
from mirror.transferset.delta._formats import (
    DeltaContent,
    parse_file_list,
    read_delta_blob,
)
from mirror.transferset.format import MANIFEST, parse_manifest
from mirror.transferset.reader import verify_set
from tests.fixtures.packing import build, offered
from tests.fixtures.s3 import transfer_config
from tests.fixtures.versions import add_sim_version, add_tree_version, deliver

DOCS = "docs.example.com"
SITE: dict[str, Any] = {"pages": 60, "page_size": 8192, "changes_per_export": 2}
MiB = 1024 * 1024


def make_app(
    store_dir: Path, key_pair: tuple[Path, Path], database: str = "", **transfer: Any
) -> App:
    document = transfer_config(store_dir, key_pair, **transfer)
    if database:
        document["store"]["database"] = database
    return App(settings_from_dict(document))


@pytest.fixture(params=["sqlite", "postgresql"])
def index_app(
    request: pytest.FixtureRequest, store_dir: Path, key_pair: tuple[Path, Path]
) -> Iterator[App]:
    """A store with its index in SQLite, then in PostgreSQL."""
    database = request.getfixturevalue("postgres_url") if request.param == "postgresql" else ""
    application = make_app(store_dir, key_pair, database)
    yield application
    application.close()


def bases_of(app: App, *labels: str) -> dict[str, str]:
    """{label: base label or reason} for the versions `labels` offered as one set."""
    items = offered(app, *labels)
    with app.db.session() as session:
        held = held_bases(site_facts(session, DEFAULT_SITE), "packed")
        chosen = choose_bases(session, app.store, items, held)
    return {
        item.ref.label: (found.label if isinstance(found, Base) else found)
        for item in items
        for found in [chosen[item.version_id]]
    }


def mark_packed(app: App, *version_ids: int) -> None:
    """Record an earlier set holding these versions, as `pack` does."""
    with app.db.session() as session:
        count = len(session.execute(select(Transfer)).all())
        transfer = Transfer(
            sequence=count + 1,
            manifest_sha256="0" * 64,
            path="/media/x",
            item_count=1,
            total_bytes=1,
        )
        session.add(transfer)
        session.flush()
        for version_id in version_ids:
            session.add(TransferItem(transfer_id=transfer.id, version_id=version_id))


# ---- the base ---------------------------------------------------------------------------


def test_base_is_the_newest_older_version_the_airgap_holds(index_app: App) -> None:
    app = index_app
    v1, _ = add_sim_version(app, DOCS, "2026-11-18", export_number=0, **SITE)
    v2, _ = add_sim_version(app, DOCS, "2026-11-19", export_number=1, **SITE)
    add_sim_version(app, DOCS, "2026-11-20", export_number=2, **SITE)
    v4, _ = add_sim_version(app, DOCS, "2026-11-21", export_number=3, **SITE)
    add_sim_version(app, "other.example.com", "2026-11-17", export_number=0, **SITE)
    assert bases_of(app, "2026-11-20") == {"2026-11-20": NO_BASE}
    deliver(app, v1)
    assert bases_of(app, "2026-11-20") == {"2026-11-20": "2026-11-18"}
    mark_packed(app, v2)
    assert bases_of(app, "2026-11-20") == {"2026-11-20": "2026-11-19"}
    deliver(app, v4)  # newer than the version packed: never its base
    assert bases_of(app, "2026-11-20") == {"2026-11-20": "2026-11-19"}
    assert bases_of(app, "2026-11-18") == {"2026-11-18": NO_BASE}


def test_a_version_in_the_same_set_is_never_a_base(index_app: App) -> None:
    app = index_app
    v1, _ = add_sim_version(app, DOCS, "2026-11-18", export_number=0, **SITE)
    add_sim_version(app, DOCS, "2026-11-19", export_number=1, **SITE)
    assert bases_of(app, "2026-11-18", "2026-11-19") == {
        "2026-11-18": NO_BASE,
        "2026-11-19": NO_BASE,
    }
    deliver(app, v1)  # delivered, but carried again in this set (--all)
    assert bases_of(app, "2026-11-18", "2026-11-19")["2026-11-19"] == NO_BASE
    assert bases_of(app, "2026-11-19") == {"2026-11-19": "2026-11-18"}


def test_a_base_whose_blob_is_gone_is_passed_over(index_app: App) -> None:
    app = index_app
    v1, sha1 = add_sim_version(app, DOCS, "2026-11-18", export_number=0, **SITE)
    v2, sha2 = add_sim_version(app, DOCS, "2026-11-19", export_number=1, **SITE)
    add_sim_version(app, DOCS, "2026-11-20", export_number=2, **SITE)
    deliver(app, v1)
    deliver(app, v2)
    app.store.remove(sha2)
    assert bases_of(app, "2026-11-20") == {"2026-11-20": "2026-11-18"}
    app.store.remove(sha1)
    assert bases_of(app, "2026-11-20") == {"2026-11-20": BASE_BLOB_MISSING}


def test_pack_goes_full_without_a_base_and_as_delta_against_a_packed_one(
    transfer_app: App, tmp_path: Path, trusted: dict[str, Any]
) -> None:
    add_sim_version(transfer_app, DOCS, "2026-11-18", export_number=0, **SITE)
    first = pack(transfer_app, tmp_path / "s1")
    assert [v.as_dict()["carried"] for v in first.versions] == ["full"]
    assert first.versions[0].reason == NO_BASE and first.items[0].delta is None
    _, sha2 = add_sim_version(transfer_app, DOCS, "2026-11-19", export_number=1, **SITE)
    second = pack(transfer_app, tmp_path / "s2")
    item = parse_manifest((tmp_path / "s2" / MANIFEST).read_bytes()).items[0]
    assert item.delta is not None and item.delta.base_version == "2026-11-18"
    assert item.delta.spliced  # the base's bundle is a tar.gz (the index says so)
    assert second.items[0].delta == item.delta and item.sha256 != sha2
    packed = second.items[0].as_dict()["delta"]  # `--json`: no archive digest, per the contract
    assert (packed["archive_sha256"], packed["archive_size"]) == (None, None)
    jsonschema.Draft202012Validator(DELTA).validate(packed)
    assert item.archive_format == "tar.gz" and item.size < first.total_bytes / 10
    assert second.total_bytes == item.size == os.path.getsize(tmp_path / "s2" / item.parts[0].name)
    verify_set(tmp_path / "s2", trusted)
    assert list(transfer_app.store.tmp_dir.iterdir()) == []


def _recipe_of(app: App, label: str, out: Path) -> dict[str, Any] | None:
    """Pack the waiting version `label` (a spliced delta) and read the recipe the pack made
    of it (kept beside its bundle; carried too when worth it), None when it made none."""
    pack(app, out)
    (item,) = parse_manifest((out / MANIFEST).read_bytes()).items
    assert item.delta is not None and item.delta.spliced and item.version == label
    kept = app.store.recipe_path(_bundle_of(app, label))
    if not kept.is_file():
        return None
    with kept.open("rb") as handle:
        header: dict[str, Any] = json.loads(handle.readline())
    if item.delta.recipe is not None:
        assert item.delta.recipe.model_dump().items() <= header.items()
    return header


def _bundle_of(app: App, label: str) -> str:
    with app.db.session() as session:
        return session.execute(
            select(Version.bundle_sha256).where(Version.label == label)
        ).scalar_one()


def _three_versions(app: App, tmp_path: Path) -> tuple[int, str, dict[str, Any]]:
    """V1 packed whole, V2 packed as a spliced delta over it; V3 waiting. V2's id, bundle
    and the recipe V2's pack made (over V1's bundle)."""
    add_sim_version(app, DOCS, "2026-11-18", export_number=0, **SITE)
    pack(app, tmp_path / "s1")
    v2, sha2 = add_sim_version(app, DOCS, "2026-11-19", export_number=1, **SITE)
    made = _recipe_of(app, "2026-11-19", tmp_path / "s2")
    assert made is not None and made["base_sha256"] != sha2 and made["sha256"] != sha2
    add_sim_version(app, DOCS, "2026-11-20", export_number=2, **SITE)
    return v2, sha2, made


def test_the_recipe_goes_over_the_object_the_sites_receipt_named_not_the_kept_chain(
    transfer_app: App, tmp_path: Path
) -> None:
    """V2 went as a spliced delta, so its kept recipe's archive is what the older rule takes
    the site's V2 to be; the site's receipt said it published V2's bundle (it took V2 whole,
    as another site's set or a `--full` one carries it): V3's recipe is made over that
    bundle, the bytes the site's import replays it over (docs/delta.md, facts)."""
    v2, sha2, _ = _three_versions(transfer_app, tmp_path)
    deliver(transfer_app, v2, published=sha2)
    recipe = _recipe_of(transfer_app, "2026-11-20", tmp_path / "s3")
    assert recipe is not None and recipe["base_sha256"] == sha2
    assert recipe["base_size"] == transfer_app.store.open(sha2).stat().st_size


def test_a_site_that_published_bytes_this_store_lacks_gets_no_recipe(
    transfer_app: App, tmp_path: Path
) -> None:
    """A receipt naming an object neither V2's bundle nor its kept recipe's archive: no bytes
    here are the site's, so no recipe is made (the import splices, proving every file)."""
    v2, _, _ = _three_versions(transfer_app, tmp_path)
    deliver(transfer_app, v2, published="e" * 64)
    assert _recipe_of(transfer_app, "2026-11-20", tmp_path / "s3") is None


def test_a_receipt_naming_the_kept_recipes_archive_keeps_the_chain(
    transfer_app: App, tmp_path: Path
) -> None:
    v2, _, made = _three_versions(transfer_app, tmp_path)
    deliver(transfer_app, v2, published=made["sha256"])
    recipe = _recipe_of(transfer_app, "2026-11-20", tmp_path / "s3")
    assert recipe is not None
    assert (recipe["base_sha256"], recipe["base_size"]) == (made["sha256"], made["size"])


# ---- what a delta holds -----------------------------------------------------------------


def blob_members(delta: Any) -> tuple[dict[str, bytes], bytes]:
    """The carried contents {sha256: bytes} and the file list of a kept delta blob."""
    assert delta.file is not None
    delta.file.seek(0)
    data = delta.file.read()
    assert hashlib.sha256(data).hexdigest() == delta.sha256 and len(data) == delta.size
    contents: dict[str, bytes] = {}
    files = b""
    for member in read_delta_blob(io.BytesIO(data), label="test"):
        if isinstance(member, DeltaContent):
            contents[member.sha256] = member.stream.read()
        else:
            files = member.stream.read()
    return contents, files


def tree_of(app: App, sha256: str, dest: Path) -> dict[str, bytes]:
    extract_archive(app.store.open(sha256), dest)
    return {
        str(path.relative_to(dest)): path.read_bytes() for path in dest.rglob("*") if path.is_file()
    }


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_a_tar_gz_base_gets_a_spliced_delta_of_the_files_changed(app: App, tmp_path: Path) -> None:
    """The import splices a tar.gz base: the entry names no archive digest and the
    compression of the changed regions; the blob carries exactly the pages that changed,
    each content hashing to its name; the file list hashes to the new tree."""
    _, base_sha = add_sim_version(app, DOCS, "2026-11-18", export_number=0, **SITE)
    _, new_sha = add_sim_version(app, DOCS, "2026-11-19", export_number=1, **SITE)
    item, delta = build(app, "2026-11-19", "2026-11-18")
    with delta:
        old = tree_of(app, base_sha, tmp_path / "old")
        new = tree_of(app, new_sha, tmp_path / "new")
        changed = {path for path, data in new.items() if old.get(path) != data}
        contents, files = blob_members(delta)
        assert len(changed) == 2 and contents == {sha(new[path]): new[path] for path in changed}
        assert all(sha(data) == name for name, data in contents.items())
        assert (delta.changed, delta.added, delta.removed) == (2, 0, 0)
        listed = parse_file_list(files, label="test")
        assert {f.path: f.sha256 for f in listed} == {p: sha(d) for p, d in new.items()}
        assert all(f.size == len(new[f.path]) and f.mode == 0o644 for f in listed)
        assert tree_hash((f.path, f.sha256) for f in listed) == item.tree_sha256
        entry = delta.entry
        assert entry.spliced and (entry.archive_sha256, entry.archive_size) == (None, None)
        assert entry.compression == current()
        assert entry.file_count == len(new) and entry.carried_files == 2
        assert entry.base_version == "2026-11-18"
        assert entry.base_tree_sha256 == inspect_archive(app.store.open(base_sha)).tree_sha256


PAGE, OTHER, KEPT = b"<h1>the page</h1>" * 50, b"<h1>other</h1>" * 50, b"<p>kept</p>" * 40
FRESH = b"<p>new content used twice</p>" * 40
BASE_TREE = {"a/index.html": PAGE, "b.html": OTHER, "kept.html": KEPT, "gone.html": b"old" * 99}
NEW_TREE = {
    "moved/a/index.html": PAGE,  # moved: the base holds it, at another path
    "b.html": b"<h1>other, changed</h1>" * 50,
    "copy-of-b.html": OTHER,  # the base's old b.html, copied to a new path
    "kept.html": KEPT,
    "c.html": FRESH,
    "d/c.html": FRESH,  # the same new content twice
}


def test_a_spliced_delta_carries_by_path(app: App) -> None:
    """A spliced delta carries every file the base does not hold at the same path with the
    same content, moved and copied pages too (the import keeps a base member only where it
    is); each content goes once, and a removed page is only absent from the list."""
    carried_paths = ["moved/a/index.html", "b.html", "copy-of-b.html", "c.html", "d/c.html"]
    add_tree_version(app, DOCS, "2026-11-18", BASE_TREE)
    add_tree_version(app, DOCS, "2026-11-19", NEW_TREE)
    _, delta = build(app, "2026-11-19", "2026-11-18")
    with delta:
        contents, files = blob_members(delta)
    assert contents == {sha(NEW_TREE[path]): NEW_TREE[path] for path in carried_paths}
    assert all(sha(data) == name for name, data in contents.items())
    assert (delta.changed, delta.added, delta.removed) == (1, 4, 2)
    assert delta.entry.file_count == 6 and delta.entry.spliced
    assert delta.entry.carried_files == len(carried_paths)
    assert delta.entry.archive_sha256 is None
    listed = [f.path for f in parse_file_list(files, label="t")]
    assert listed == sorted(NEW_TREE, key=str.encode)  # from the kept digests: the tree's order


def test_a_zip_version_or_base_is_no_base_the_version_goes_whole(index_app: App) -> None:
    """Only a tar.gz is spliced: a zip version has no base, and a zip the site holds is
    passed over for an older tar.gz (the tree-archive delta a zip got is gone: docs/delta.md)."""
    app = index_app
    v1, _ = add_tree_version(app, DOCS, "2026-11-18", BASE_TREE, archive_format="zip")
    v2, _ = add_tree_version(app, DOCS, "2026-11-19", NEW_TREE)
    v3, _ = add_tree_version(app, DOCS, "2026-11-20", BASE_TREE, archive_format="zip")
    add_tree_version(app, DOCS, "2026-11-21", BASE_TREE)
    deliver(app, v1)
    assert bases_of(app, "2026-11-19") == {"2026-11-19": NO_BASE}
    deliver(app, v2, v3)
    assert bases_of(app, "2026-11-20") == {"2026-11-20": NO_BASE}
    assert bases_of(app, "2026-11-21") == {"2026-11-21": "2026-11-19"}


def test_a_store_that_disagrees_with_its_index_is_refused_and_leaves_nothing(app: App) -> None:
    add_sim_version(app, DOCS, "2026-11-18", export_number=0, **SITE)
    add_sim_version(app, DOCS, "2026-11-19", export_number=1, **SITE)
    with app.db.session() as session:
        version = session.execute(select(Version).where(Version.label == "2026-11-19")).scalar_one()
        version.tree_sha256 = "e" * 64
    with pytest.raises(IntegrityError, match="2026-11-19: the tree of its stored bundle hashes to"):
        build(app, "2026-11-19", "2026-11-18")
    assert list(app.store.tmp_dir.iterdir()) == []


def test_the_delta_blob_has_no_name_while_it_is_built(app: App) -> None:
    """A killed pack cannot leave a delta behind: its temp files never have a name."""
    add_sim_version(app, DOCS, "2026-11-18", export_number=0, **SITE)
    add_sim_version(app, DOCS, "2026-11-19", export_number=1, **SITE, bundle_size=12 * MiB)
    _, delta = build(app, "2026-11-19", "2026-11-18")
    with delta:
        assert delta.file is not None and delta.size > 10 * MiB
        assert list(app.store.tmp_dir.iterdir()) == []


def _damage(app: App, sha256: str) -> None:
    """Overwrite a stored blob with other bytes (the store's files are read-only)."""
    path = app.store.open(sha256)
    path.chmod(0o644)
    path.write_bytes(b"\x1f\x8b" + b"not the bundle" * 100)


def test_the_base_side_comes_from_its_kept_digests_not_its_bundle(
    app: App, caplog: pytest.LogCaptureFixture
) -> None:
    """With the base's digests kept (at export), the pack reads the base's bundle only to
    make its splice recipe: the same delta comes out when that bundle is damaged, with no
    recipe (the bundle of this small site makes none worth carrying anyway), and the log
    names the remedy."""
    _, base_sha = add_sim_version(app, DOCS, "2026-11-18", export_number=0, **SITE)
    add_sim_version(app, DOCS, "2026-11-19", export_number=1, **SITE)
    assert app.store.digests_path(base_sha).is_file()
    _, whole = build(app, "2026-11-19", "2026-11-18")
    with whole:
        expected = blob_members(whole)
    _damage(app, base_sha)
    with caplog.at_level("WARNING", logger="mirror.outbound.recipe"):
        _, delta = build(app, "2026-11-19", "2026-11-18")
    with delta:
        assert blob_members(delta) == expected
        assert (delta.entry, delta.changed, delta.removed) == (whole.entry, 2, 0)
    assert f"no splice recipe: the base's stored bundle {base_sha[:12]}" in caplog.text
    assert "mirror store verify" in caplog.text


def test_a_base_stored_before_digests_were_kept_is_read_once_and_then_kept(
    app: App, caplog: pytest.LogCaptureFixture
) -> None:
    _, base_sha = add_sim_version(app, DOCS, "2026-11-18", export_number=0, **SITE)
    _, new_sha = add_sim_version(app, DOCS, "2026-11-19", export_number=1, **SITE)
    _, kept = build(app, "2026-11-19", "2026-11-18")
    kept.close()
    for sha256 in (base_sha, new_sha):
        app.store.digests_path(sha256).unlink()
    with caplog.at_level("INFO", logger="mirror.store.digests"):
        _, delta = build(app, "2026-11-19", "2026-11-18")
    delta.close()
    assert delta.entry == kept.entry
    assert "2026-11-18: no file digests kept beside its bundle; reading the bundle" in caplog.text
    assert app.store.digests_path(base_sha).is_file()  # kept now, for the next pack
    assert app.store.digests_path(new_sha).is_file()  # and the new version's, as its base
    _damage(app, base_sha)  # a base without digests whose bundle is damaged: refused
    app.store.digests_path(base_sha).unlink()
    with pytest.raises(IntegrityError, match="corrupt archive"):
        build(app, "2026-11-19", "2026-11-18")
    assert list(app.store.tmp_dir.iterdir()) == []


# ---- choosing, --full, the dry run ------------------------------------------------------


def test_the_delta_goes_only_when_small_enough_and_never_with_full(
    store_dir: Path, key_pair: tuple[Path, Path], tmp_path: Path
) -> None:
    app = make_app(store_dir, key_pair, delta_max_ratio=0.01)
    try:
        v1, _ = add_sim_version(app, DOCS, "2026-11-18", export_number=0, **SITE)
        _, sha2 = add_sim_version(app, DOCS, "2026-11-19", export_number=1, **SITE)
        deliver(app, v1)
        whole = dry_run(app)
        (choice,) = whole.versions
        assert choice.reason == NOT_SMALLER and choice.delta is not None
        assert not choice.as_delta and choice.saving == 0
        assert whole.items[0].ref.sha256 == sha2 and whole.items[0].delta is None
        forced = pack(app, tmp_path / "full", Selection(full=True))
        assert forced.versions[0].reason == FULL_ASKED and forced.versions[0].delta is None
        item = parse_manifest((tmp_path / "full" / MANIFEST).read_bytes()).items[0]
        assert item.delta is None and item.sha256 == sha2
    finally:
        app.close()


def test_dry_run_reports_each_version_and_writes_nothing(transfer_app: App, tmp_path: Path) -> None:
    app = transfer_app
    v1, _ = add_sim_version(app, DOCS, "2026-11-18", export_number=0, **SITE)
    add_sim_version(app, DOCS, "2026-11-19", export_number=1, **SITE)
    add_sim_version(app, "api.example.com", "2026-11-19", export_number=0, **SITE)
    deliver(app, v1)
    files_before = sorted(
        p for p in store_dir_of(app).rglob("*") if p.is_file() and p.suffix != ".db"
    )
    db_before = (store_dir_of(app) / "mirror.db").read_bytes()
    out = tmp_path / "usb" / "set"
    out.parent.mkdir()
    planned = dry_run(app, out)
    assert planned.dry_run and planned.path is None and planned.sequence == 1
    by_label = {
        (c.offered.ref.domain, str(c.offered.ref.label)): c.as_dict() for c in planned.versions
    }
    assert by_label[("api.example.com", "2026-11-19")]["reason"] == NO_BASE
    docs = by_label[(DOCS, "2026-11-19")]
    assert docs["carried"] == "delta" and docs["base_version"] == "2026-11-18"
    assert (docs["files_changed"], docs["files_added"], docs["files_removed"]) == (2, 0, 0)
    assert docs["saving"] == docs["full_size"] - docs["delta_size"] > docs["full_size"] * 0.8
    files_after = sorted(
        p for p in store_dir_of(app).rglob("*") if p.is_file() and p.suffix != ".db"
    )
    assert files_after == files_before and db_before != b""
    assert not out.exists() and os.listdir(out.parent) == []
    real = pack(app, tmp_path / "real")
    assert [c.as_dict() for c in real.versions] == [c.as_dict() for c in planned.versions]
    assert real.total_bytes == planned.total_bytes
    assert [i.as_dict() for i in real.items] == [i.as_dict() for i in planned.items]
    kept = {p for p in store_dir_of(app).rglob("*") if p.is_file() and p.suffix != ".db"}
    recipes = kept - set(files_before)
    assert [p.relative_to(store_dir_of(app)).parts[0] for p in recipes] == ["recipes"]


def store_dir_of(app: App) -> Path:
    return app.settings.store.path


def test_dry_run_checks_out_like_pack(transfer_app: App, tmp_path: Path) -> None:
    add_sim_version(transfer_app, DOCS, "2026-11-18", export_number=0, **SITE)
    with pytest.raises(TemporaryFailure, match="not enough free space"):
        dry_run(transfer_app, tmp_path / "set", free_space=lambda _path: 1)
    assert not (tmp_path / "set").exists()
    with transfer_app.db.session() as session:
        assert session.execute(select(Transfer)).first() is None


# ---- memory -----------------------------------------------------------------------------


def test_memory_does_not_grow_with_the_bundle(app: App) -> None:
    small, large = 8 * MiB, 96 * MiB
    for domain, size in (("small.example.com", small), ("large.example.com", large)):
        for number, label in enumerate(("2026-11-18", "2026-11-19")):
            add_sim_version(app, domain, label, export_number=number, bundle_size=size, **SITE)
    peaks = {}
    for domain in ("small.example.com", "large.example.com"):
        tracemalloc.start()
        try:
            _, delta = build(app, "2026-11-19", "2026-11-18", domain=domain)
            delta.close()
            peaks[domain] = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert delta.entry.carried_files == 2  # the big asset is the same in both exports
    print(f"tracemalloc peaks: {peaks}")
    assert peaks["large.example.com"] < peaks["small.example.com"] + 2 * MiB
    assert peaks["large.example.com"] < 16 * MiB
