"""The pack's splice recipes (mirror/outbound/recipe.py): made over the base object's bytes,
kept beside the new bundle, replayed for the next delta; a damaged one removed. Real
simulator exports in a real store; every replayed object is read back as a tar.gz."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pytest

from mirror.archive import inspect_archive
from mirror.outbound.delta import Base, decide
from mirror.outbound.recipe import base_object
from mirror.store.app import App
from mirror.versions import VersionLabel
from tests.fixtures.archives import Entry, write_tar
from tests.fixtures.packing import DOCS, build, offered
from tests.fixtures.versions import add_sim_version, store_archive

V1, V2, V3 = "2026-11-18", "2026-11-19", "2026-11-20"
SITE: dict[str, Any] = {"pages": 60, "page_size": 8192, "changes_per_export": 2}


def _versions(app: App, count: int) -> list[str]:
    """The bundles' sha256 of `count` successive exports of the site."""
    return [
        add_sim_version(app, DOCS, label, export_number=n, **SITE)[1]
        for n, label in enumerate((V1, V2, V3)[:count])
    ]


def _header(app: App, bundle_sha256: str) -> dict[str, object]:
    with app.store.recipe_path(bundle_sha256).open("rb") as kept:
        document: dict[str, object] = json.loads(kept.readline())
    return document


def _object(app: App, bundle_sha256: str, tmp_path: Path) -> tuple[str, str]:
    """The sha256 and tree of the version's object as the pack takes it to be."""
    base = base_object(app.store, bundle_sha256)
    data = b"".join(base.chunks())
    path = tmp_path / f"{bundle_sha256[:12]}.tar.gz"
    path.write_bytes(data)
    return hashlib.sha256(data).hexdigest(), inspect_archive(path).tree_sha256


def test_a_pack_keeps_the_recipe_it_made_and_it_replays_to_the_new_tree(
    app: App, tmp_path: Path
) -> None:
    v1, v2 = _versions(app, 2)
    _, delta = build(app, V2, V1)
    delta.close()
    header = _header(app, v2)
    assert (header["base_bundle"], header["base_sha256"]) == (v1, v1)
    sha256, tree = _object(app, v2, tmp_path)
    assert sha256 == header["sha256"] != v2
    assert tree == inspect_archive(app.store.open(v2)).tree_sha256
    assert base_object(app.store, v2).kept and not base_object(app.store, v1).kept


def test_a_dry_run_keeps_no_recipe(app: App) -> None:
    _, v2 = _versions(app, 2)
    _, delta = build(app, V2, V1, keep=False)
    delta.close()
    assert not app.store.recipe_path(v2).exists()


def test_the_next_delta_is_made_over_the_object_the_kept_recipe_makes(
    app: App, tmp_path: Path
) -> None:
    _, v2, v3 = _versions(app, 3)
    build(app, V2, V1)[1].close()
    build(app, V3, V2)[1].close()
    header = _header(app, v3)
    assert header["base_bundle"] == v2 and header["base_sha256"] == _header(app, v2)["sha256"]
    _, tree = _object(app, v3, tmp_path)  # two recipes replayed, down to V1's bundle
    assert tree == inspect_archive(app.store.open(v3)).tree_sha256


def test_a_damaged_kept_recipe_is_removed_and_the_bundle_taken(
    app: App, caplog: pytest.LogCaptureFixture
) -> None:
    _, v2, v3 = _versions(app, 3)
    build(app, V2, V1)[1].close()
    kept = app.store.recipe_path(v2)
    data = bytearray(kept.read_bytes())
    data[-20] ^= 1  # a literal byte: the header and the segments still read well
    kept.write_bytes(bytes(data))
    with caplog.at_level("WARNING", logger="mirror.outbound.recipe"):
        build(app, V3, V2)[1].close()
    assert "the kept recipe of its base is damaged; removed" in caplog.text
    assert not kept.exists()
    assert _header(app, v3)["base_sha256"] == v2  # made over V2's bundle instead


def _base_bundle_flipped(data: bytes) -> bytes:
    """One bit of the header's base bundle flipped: a digit becomes a letter past 'f', a
    letter its capital (the hex is lower case); the line still reads as JSON."""
    at = data.index(b'"base_bundle":"') + len(b'"base_bundle":"')
    return data[:at] + bytes([data[at] ^ (0x40 if data[at] < 0x40 else 0x20)]) + data[at + 1 :]


def _header_with(data: bytes, **fields: object) -> bytes:
    header, _, rest = data.partition(b"\n")
    document = {**json.loads(header), **fields}
    return json.dumps(document, separators=(",", ":"), sort_keys=True).encode() + b"\n" + rest


@pytest.mark.parametrize(
    "damage",
    [
        lambda data: data[:-1],
        lambda data: b"{not json\n" + data,
        lambda data: b"",
        _base_bundle_flipped,
        lambda data: _header_with(data, base_bundle=5),
        lambda data: _header_with(data, segments=10**30),
        lambda data: b"[" * 70_000 + b"\n" + data,
    ],
    ids=[
        "truncated",
        "no header",
        "empty",
        "base bundle not hex",
        "base bundle a number",
        "a length past any file",
        "nested too deep",
    ],
)
def test_an_unreadable_kept_recipe_is_removed_and_the_bundle_is_the_object(
    app: App, caplog: pytest.LogCaptureFixture, damage: object
) -> None:
    """Whatever a broken disk leaves in a kept recipe, the pack goes on without it: a pack
    that failed on it would fail the same way every time after."""
    _, v2 = _versions(app, 2)
    build(app, V2, V1)[1].close()
    kept = app.store.recipe_path(v2)
    kept.write_bytes(damage(kept.read_bytes()))  # type: ignore[operator]
    with caplog.at_level("WARNING", logger="mirror.outbound.recipe"):
        base = base_object(app.store, v2)
    assert (base.sha256, base.kept) == (v2, False)
    assert "is unusable" in caplog.text and not kept.exists()


def test_a_kept_recipe_goes_with_its_bundle(app: App) -> None:
    _, v2 = _versions(app, 2)
    build(app, V2, V1)[1].close()
    assert app.store.recipe_path(v2).exists()
    app.store.remove(v2)
    assert not app.store.recipe_path(v2).exists()


def test_a_recipe_over_a_base_bundle_that_is_gone_is_no_object(app: App) -> None:
    """The chain ends at a bundle removed from the store: the version's own bundle is all
    the pack can take."""
    v1, v2 = _versions(app, 2)
    build(app, V2, V1)[1].close()
    app.store.remove(v1)
    base = base_object(app.store, v2)
    assert (base.sha256, base.kept) == (v2, False)


BIG = os.urandom(2 * 1024 * 1024)  # kept by the splice: the recipe is worth carrying


def _tree_version(app: App, label: str, entries: list[Entry]) -> str:
    app.store.ensure()
    path = write_tar(app.store.tmp_dir / f"{label}.tar.gz", entries, compresslevel=1)
    return store_archive(app, DOCS, label, path)[1]


@pytest.mark.parametrize(
    ("base", "new"),
    [
        (
            [Entry("Guides", kind="dir"), Entry("Guides/a.html", b"<p>a</p>\n")],
            [Entry("guides", kind="dir"), Entry("guides/a.html", b"<p>a</p>\n")],
        ),
        (
            [Entry("docs", kind="dir"), Entry("docs/a.html", b"<p>a</p>\n")],
            [Entry("docs", b"<p>docs is a page now</p>\n")],
        ),
    ],
    ids=["a directory renamed to its case twin", "a directory become a file"],
)
def test_a_splice_the_import_would_refuse_makes_no_recipe(
    app: App, tmp_path: Path, base: list[Entry], new: list[Entry]
) -> None:
    """A splice keeps the base's directories; one beside a file of the new tree, or a case
    twin of one, makes an archive `mirror.archive` refuses, so the import's splice refuses
    it (its paths checked beside the list's). A recipe of it would be replayed and that
    archive published, unchecked: the pack makes none, and the import splices and refuses
    with its remedy, as without recipes."""
    big = Entry("assets/big.bin", BIG)
    _tree_version(app, V1, [*base, Entry("assets", kind="dir"), big])
    v2 = _tree_version(app, V2, [*new, Entry("assets", kind="dir"), big])
    _, delta = build(app, V2, V1)
    delta.close()
    assert delta.entry.spliced and delta.entry.recipe is None
    assert not app.store.recipe_path(v2).exists()


@pytest.mark.parametrize(
    ("full", "ratio", "keep"),
    [(False, 0.0, True), (True, 0.5, True), (False, 0.0, False)],
    ids=["not smaller", "full asked", "a dry run changes nothing"],
)
def test_a_version_a_pack_sends_whole_keeps_no_recipe(
    app: App, full: bool, ratio: float, keep: bool
) -> None:
    """Its object on the air-gapped side is its bundle: a recipe kept for it (made by this
    very decision, or by an earlier pack that sent it as a delta) would have the next
    delta's recipe made over other bytes, and every one after it: never replayed, their
    literals carried for nothing."""
    v1, v2 = _versions(app, 2)
    build(app, V2, V1)[1].close()  # an earlier pack sent V2 as a delta
    before = app.store.recipe_path(v2).read_bytes()
    (item,) = offered(app, V2)
    base = Base(VersionLabel(V1), offered(app, V1)[0].tree_sha256, v1, "tar.gz")
    choice = decide(app.store, item, base, ratio=ratio, full=full, keep=keep)
    if choice.delta is not None:
        choice.delta.close()
    assert not choice.as_delta
    if keep:
        assert not app.store.recipe_path(v2).exists()
        assert base_object(app.store, v2).sha256 == v2
    else:
        assert app.store.recipe_path(v2).read_bytes() == before


@pytest.mark.timeout(300)  # a FIFO waited on would hang for ever
def test_a_kept_recipe_that_is_no_regular_file_is_not_waited_on(
    app: App, caplog: pytest.LogCaptureFixture
) -> None:
    """A FIFO where a kept recipe belongs would hold every pack at its open, forever (no
    writer comes): it is no recipe, removed, and the bundle taken."""
    _, v2 = _versions(app, 2)
    build(app, V2, V1)[1].close()
    kept = app.store.recipe_path(v2)
    kept.unlink()
    os.mkfifo(kept)
    with caplog.at_level("WARNING", logger="mirror.outbound.recipe"):
        base = base_object(app.store, v2)
    assert (base.sha256, base.kept) == (v2, False)
    assert "is unusable" in caplog.text and not kept.exists()


def test_a_long_chain_keeps_its_object_whole_and_later_chains_start_there(
    app: App, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With objects kept whole every second recipe: the third version's object is a file,
    read (not replayed), and the fourth version's recipe is made over it even once the
    bundles below it are gone, as retention removes them."""
    monkeypatch.setattr("mirror.outbound.recipe.KEEP_WHOLE_AT", 2)
    labels = (V1, V2, V3, "2026-11-21")
    shas = [
        add_sim_version(app, DOCS, label, export_number=n, **SITE)[1]
        for n, label in enumerate(labels)
    ]
    build(app, V2, V1)[1].close()
    assert not app.store.object_path(shas[1]).exists()
    build(app, V3, V2)[1].close()
    whole = app.store.object_path(shas[2])
    assert (
        whole.is_file()
        and hashlib.sha256(whole.read_bytes()).hexdigest() == _header(app, shas[2])["sha256"]
    )
    app.store.remove(shas[0])
    app.store.remove(shas[1])
    base = base_object(app.store, shas[2])
    assert (base.kept, base.depth, base.sha256) == (True, 0, _header(app, shas[2])["sha256"])
    build(app, labels[3], V3)[1].close()
    assert _header(app, shas[3])["base_sha256"] == _header(app, shas[2])["sha256"]
    _, tree = _object(app, shas[3], tmp_path)
    assert tree == inspect_archive(app.store.open(shas[3])).tree_sha256


def test_a_damaged_whole_object_is_removed_with_its_recipe_and_the_bundle_taken(
    app: App, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr("mirror.outbound.recipe.KEEP_WHOLE_AT", 1)
    _, v2, v3 = _versions(app, 3)
    build(app, V2, V1)[1].close()
    whole = app.store.object_path(v2)
    data = bytearray(whole.read_bytes())
    data[len(data) // 2] ^= 1
    whole.write_bytes(bytes(data))
    with caplog.at_level("WARNING", logger="mirror.outbound.recipe"):
        build(app, V3, V2)[1].close()
    assert "the kept recipe of its base is damaged; removed" in caplog.text
    assert not whole.exists() and not app.store.recipe_path(v2).exists()
    assert _header(app, v3)["base_sha256"] == v2


def test_an_object_that_cannot_be_removed_fails_no_pack_and_gets_no_recipe_beside_it(
    app: App, caplog: pytest.LogCaptureFixture
) -> None:
    """Something where the version's whole object belongs that cannot be unlinked (here a
    directory) is logged: the pack goes on, and no new recipe is kept that the old object
    would not match."""
    _, v2 = _versions(app, 2)
    stuck = app.store.object_path(v2)
    stuck.mkdir(parents=True)
    with caplog.at_level("WARNING", logger="mirror.outbound.recipe"):
        build(app, V2, V1)[1].close()
    assert "cannot keep the splice recipe" in caplog.text
    assert not app.store.recipe_path(v2).exists()
    assert not list(app.store.tmp_dir.iterdir())


def test_a_recipe_made_over_the_bundle_instead_counts_its_chain_from_there(
    app: App, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A damaged kept base sends the recipe to the base's bundle: its chain is one long,
    not the damaged chain's length plus one, and no object is kept whole for it."""
    monkeypatch.setattr("mirror.outbound.recipe.KEEP_WHOLE_AT", 2)
    _, v2, v3 = _versions(app, 3)
    build(app, V2, V1)[1].close()
    kept = app.store.recipe_path(v2)
    data = bytearray(kept.read_bytes())
    data[-20] ^= 1  # a literal byte: V2's kept object is not its digest
    kept.write_bytes(bytes(data))
    build(app, V3, V2)[1].close()
    assert _header(app, v3)["base_sha256"] == v2
    assert not app.store.object_path(v3).exists()
