"""Pack: a signed set written atomically, incrementally, split into parts, recorded."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from mirror.errors import (
    ConfigError,
    IntegrityError,
    NotFound,
    TemporaryFailure,
)
from mirror.outbound.pack import FREE_SPACE_MARGIN, Selection, pack
from mirror.store.app import App
from mirror.store.models import Transfer, TransferItem, Version
from mirror.transferset.format import (
    MANIFEST,
    SHA256SUMS,
    SIGNATURE,
    canonical_json,
    parse_manifest,
    part_names,
)
from mirror.transferset.reader import verify_set
from mirror.units import format_size
from tests.fixtures.versions import add_version, deliver

MiB = 1024 * 1024


def test_nothing_to_pack_is_not_an_error(transfer_app: App, tmp_path: Path) -> None:
    result = pack(transfer_app, tmp_path / "set")
    assert result.nothing and result.path is None
    assert not (tmp_path / "set").exists()


def test_pack_writes_a_signed_canonical_set_and_records_it(
    transfer_app: App, tmp_path: Path, trusted: dict[str, Any]
) -> None:
    v1, sha1 = add_version(transfer_app, "docs.example.com", "2026-11-20")
    v2, sha2 = add_version(transfer_app, "api.example.com", "2026-11-21")
    out = tmp_path / "set-1"
    result = pack(transfer_app, out)
    assert result.sequence == 1 and result.path == out
    assert sorted(os.listdir(out)) == [SHA256SUMS, "blobs", MANIFEST, SIGNATURE, "provenance"]
    assert sorted(os.listdir(out / "blobs")) == sorted([sha1, sha2])
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("set-1.partial")]
    data = (out / MANIFEST).read_bytes()
    assert canonical_json(json.loads(data)) == data
    manifest = parse_manifest(data)
    assert manifest.sequence == 1 and manifest.previous_sequence is None
    assert manifest.source_id == "test-connected" and manifest.key_id == result.key_id
    assert [(i.domain, i.version) for i in manifest.items] == [
        ("api.example.com", "2026-11-21"),
        ("docs.example.com", "2026-11-20"),
    ]
    item = manifest.items[1]
    assert item.sha256 == sha1 and item.archive_format == "tar.gz"
    assert item.size == transfer_app.store.open(sha1).stat().st_size
    assert item.parts[0].name == f"blobs/{sha1}" and item.parts[0].sha256 == sha1
    verified = verify_set(out, trusted)
    assert verified.manifest_sha256 == hashlib.sha256(data).hexdigest()
    with transfer_app.db.session() as session:
        transfer = session.execute(select(Transfer)).scalar_one()
        assert transfer.sequence == 1 and transfer.manifest_sha256 == verified.manifest_sha256
        assert transfer.item_count == 2 and transfer.path == str(out)
        items = session.execute(select(TransferItem.version_id)).scalars().all()
        assert sorted(items) == sorted([v1, v2])


def test_pack_is_incremental_and_chained(transfer_app: App, tmp_path: Path) -> None:
    add_version(transfer_app, "docs.example.com", "2026-11-20")
    first = pack(transfer_app, tmp_path / "s1")
    assert pack(transfer_app, tmp_path / "s2").nothing
    add_version(transfer_app, "docs.example.com", "2026-11-21")
    second = pack(transfer_app, tmp_path / "s2")
    assert [i.ref.label for i in second.items] == ["2026-11-21"]
    manifest = parse_manifest((tmp_path / "s2" / MANIFEST).read_bytes())
    assert manifest.sequence == 2 and manifest.previous_sequence == 1
    assert manifest.previous_manifest_sha256 == first.manifest_sha256
    everything = pack(transfer_app, tmp_path / "s3", Selection(include_all=True))
    assert [i.ref.label for i in everything.items] == ["2026-11-20", "2026-11-21"]
    assert everything.sequence == 3
    only = pack(transfer_app, tmp_path / "s4", Selection("other.example.com", include_all=True))
    assert only.nothing


def test_delivered_versions_are_left_out(transfer_app: App, tmp_path: Path) -> None:
    vid, _ = add_version(transfer_app, "docs.example.com", "2026-11-20")
    add_version(transfer_app, "docs.example.com", "2026-11-21")
    deliver(transfer_app, vid)
    result = pack(transfer_app, tmp_path / "s1")
    assert [i.ref.label for i in result.items] == ["2026-11-21"]


def test_big_blob_is_split_into_parts_that_each_verify(
    transfer_app: App, tmp_path: Path, trusted: dict[str, Any]
) -> None:
    _, sha = add_version(transfer_app, "docs.example.com", "2026-11-20", payload_size=20 * MiB)
    result = pack(transfer_app, tmp_path / "s1", max_size=4 * MiB)
    manifest = parse_manifest((tmp_path / "s1" / MANIFEST).read_bytes())
    item = manifest.items[0]
    assert len(item.parts) == result.part_count == 6
    assert [p.name for p in item.parts] == part_names(sha, 6)
    assert item.parts[0].name == f"blobs/{sha}.part001"
    assert all(p.size == 4 * MiB for p in item.parts[:-1]) and item.parts[-1].size > 0
    for part in item.parts:
        path = tmp_path / "s1" / part.name
        assert path.stat().st_size == part.size <= 4 * MiB
        assert hashlib.sha256(path.read_bytes()).hexdigest() == part.sha256
    joined = b"".join((tmp_path / "s1" / p.name).read_bytes() for p in item.parts)
    assert joined == transfer_app.store.open(sha).read_bytes()
    seen: list[int] = []
    verify_set(tmp_path / "s1", trusted, on_progress=seen.append)
    assert sum(seen) == item.size


def test_pack_refuses_a_non_empty_out_and_accepts_an_empty_one(
    transfer_app: App, tmp_path: Path
) -> None:
    add_version(transfer_app, "docs.example.com", "2026-11-20")
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "x").write_text("keep me")
    with pytest.raises(ConfigError, match="not empty"):
        pack(transfer_app, busy)
    assert (busy / "x").read_text() == "keep me"
    empty = tmp_path / "empty"
    empty.mkdir()
    assert pack(transfer_app, empty).sequence == 1


def test_pack_without_a_signing_key_is_a_config_error(store_dir: Path, tmp_path: Path) -> None:
    from mirror.config import settings_from_dict

    app = App(settings_from_dict({"store": {"path": str(store_dir)}}))
    try:
        with pytest.raises(ConfigError, match=r"transfer\.signing_key"):
            pack(app, tmp_path / "s1")
    finally:
        app.close()


def test_not_enough_free_space_is_refused_before_writing(transfer_app: App, tmp_path: Path) -> None:
    add_version(transfer_app, "docs.example.com", "2026-11-20", payload_size=64 * 1024)
    with pytest.raises(TemporaryFailure, match="not enough free space"):
        pack(transfer_app, tmp_path / "s1", free_space=lambda _path: 1000)
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("s1")) == []
    with transfer_app.db.session() as session:
        assert session.execute(select(Transfer)).first() is None


def test_a_pack_cut_short_leaves_nothing_named_out(transfer_app: App, tmp_path: Path) -> None:
    add_version(transfer_app, "docs.example.com", "2026-11-20", payload_size=3 * MiB)

    def crash(_n: int) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        pack(transfer_app, tmp_path / "s1", max_size=MiB, on_progress=crash)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("s1")] == []
    with transfer_app.db.session() as session:
        assert session.execute(select(Transfer)).first() is None
    assert pack(transfer_app, tmp_path / "s1", max_size=MiB).sequence == 1


def test_a_corrupt_store_blob_is_not_packed(transfer_app: App, tmp_path: Path) -> None:
    _, sha = add_version(transfer_app, "docs.example.com", "2026-11-20")
    path = transfer_app.store.open(sha)
    path.chmod(0o644)
    data = bytearray(path.read_bytes())
    data[100] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(IntegrityError, match="store verify"):
        pack(transfer_app, tmp_path / "s1")
    assert not (tmp_path / "s1").exists()


def test_a_missing_store_blob_is_not_found(transfer_app: App, tmp_path: Path) -> None:
    _, sha = add_version(transfer_app, "docs.example.com", "2026-11-20")
    transfer_app.store.remove(sha)
    with pytest.raises(NotFound):
        pack(transfer_app, tmp_path / "s1")


def test_a_refusal_for_space_names_the_margin_so_it_never_reads_as_enough(
    transfer_app: App, tmp_path: Path
) -> None:
    """A small set on a medium with more free than the set's size, less than size + margin:
    '6.9 KiB needed, 200 KiB free' alone reads as a contradiction at 2 a.m."""
    add_version(transfer_app, "docs.example.com", "2026-11-20", payload_size=4 * 1024)
    with pytest.raises(TemporaryFailure) as refused:
        pack(transfer_app, tmp_path / "s1", free_space=lambda _path: 200 * 1024)
    message = refused.value.message
    assert f"{format_size(FREE_SPACE_MARGIN)} kept free" in message, message
    assert "200.0 KiB is free" in message


def test_from_set_packs_that_sets_versions_again_in_a_new_sequence(
    transfer_app: App, tmp_path: Path
) -> None:
    """The remedy a refused delta names: the versions set N carried, whatever happened to
    them since (packed, delivered), and nothing else; an unknown set is NotFound."""
    add_version(transfer_app, "docs.example.com", "2026-11-20")
    add_version(transfer_app, "api.example.com", "2026-11-20")
    first = pack(transfer_app, tmp_path / "s1")
    add_version(transfer_app, "docs.example.com", "2026-11-21")
    pack(transfer_app, tmp_path / "s2")
    with transfer_app.db.session() as session:
        ids = list(session.scalars(select(Version.id)))
    deliver(transfer_app, *ids)
    assert pack(transfer_app, tmp_path / "none").nothing
    again = pack(transfer_app, tmp_path / "s3", Selection(full=True, from_set=1))
    assert again.sequence == 3
    assert sorted((i.ref.domain, i.ref.label) for i in again.items) == sorted(
        (i.ref.domain, i.ref.label) for i in first.items
    )
    only = pack(transfer_app, tmp_path / "s4", Selection("api.example.com", from_set=1))
    assert [(i.ref.domain, i.ref.label) for i in only.items] == [("api.example.com", "2026-11-20")]
    with pytest.raises(NotFound, match="no transfer set 9 was packed here"):
        pack(transfer_app, tmp_path / "s9", Selection(from_set=9))
    assert not (tmp_path / "s9").exists()
