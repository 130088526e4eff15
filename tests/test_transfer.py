"""Transfer sets: manifest model, pack (atomic, incremental, split) and offline verify."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from mirror.errors import ConfigError, IntegrityError, NotFound, OperationFailed
from mirror.outbound.pack import pack
from mirror.store.app import App
from mirror.store.models import Transfer, TransferItem, Version
from mirror.timestamps import utcnow
from mirror.transferset.format import (
    MANIFEST,
    SHA256SUMS,
    SIGNATURE,
    Manifest,
    canonical_json,
    parse_manifest,
    part_names,
)
from mirror.transferset.keys import SigningKey, load_signing_key, load_trusted_keys
from mirror.transferset.reader import verify_set
from tests.fixtures.s3 import add_version

MiB = 1024 * 1024


@pytest.fixture
def signing(key_pair: tuple[Path, Path]) -> SigningKey:
    return load_signing_key(key_pair[0])


@pytest.fixture
def trusted(key_pair: tuple[Path, Path]) -> dict[str, Any]:
    return load_trusted_keys([key_pair[1]])


def resign(set_dir: Path, key: SigningKey, change: Callable[[dict[str, Any]], None]) -> None:
    """Rewrite the manifest (as a compromised or buggy source would) and sign it properly."""
    document = json.loads((set_dir / MANIFEST).read_bytes())
    change(document)
    data = json.dumps(document, sort_keys=True, separators=(",", ":")).encode()
    (set_dir / MANIFEST).write_bytes(data)
    (set_dir / SIGNATURE).write_bytes(key.signature_document(data))
    (set_dir / SHA256SUMS).unlink(missing_ok=True)  # stale now; it is optional


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
    assert sorted(os.listdir(out)) == [SHA256SUMS, "blobs", MANIFEST, SIGNATURE]
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
    assert [i.version for i in second.items] == ["2026-11-21"]
    manifest = parse_manifest((tmp_path / "s2" / MANIFEST).read_bytes())
    assert manifest.sequence == 2 and manifest.previous_sequence == 1
    assert manifest.previous_manifest_sha256 == first.manifest_sha256
    everything = pack(transfer_app, tmp_path / "s3", include_all=True)
    assert [i.version for i in everything.items] == ["2026-11-20", "2026-11-21"]
    assert everything.sequence == 3
    only = pack(transfer_app, tmp_path / "s4", include_all=True, domain="other.example.com")
    assert only.nothing


def test_delivered_versions_are_left_out(transfer_app: App, tmp_path: Path) -> None:
    vid, _ = add_version(transfer_app, "docs.example.com", "2026-11-20")
    add_version(transfer_app, "docs.example.com", "2026-11-21")
    with transfer_app.db.session() as session:
        version = session.get(Version, vid)
        assert version is not None
        version.delivered_at = utcnow()
    result = pack(transfer_app, tmp_path / "s1")
    assert [i.version for i in result.items] == ["2026-11-21"]


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
    with pytest.raises(OperationFailed, match="not enough free space"):
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


# ---- verify ---------------------------------------------------------------------------------


@pytest.fixture
def packed(transfer_app: App, tmp_path: Path) -> Path:
    add_version(transfer_app, "docs.example.com", "2026-11-20", payload_size=MiB + MiB // 2)
    add_version(transfer_app, "docs.example.com", "2026-11-21", payload_size=1000)
    out = tmp_path / "set"
    pack(transfer_app, out, max_size=MiB)
    return out


def first_part(set_dir: Path) -> Path:
    return sorted((set_dir / "blobs").iterdir())[0]


def test_verify_names_the_first_bad_file(packed: Path, trusted: dict[str, Any]) -> None:
    part = first_part(packed)
    data = bytearray(part.read_bytes())
    data[-1] ^= 1
    part.write_bytes(bytes(data))
    with pytest.raises(IntegrityError, match=f"blobs/{part.name}: sha256 differs") as info:
        verify_set(packed, trusted)
    assert info.value.exit_code == 5


def test_verify_refuses_extra_files_and_links(packed: Path, trusted: dict[str, Any]) -> None:
    (packed / "notes.txt").write_text("hi")
    with pytest.raises(IntegrityError, match=r"notes\.txt: not part of this transfer set"):
        verify_set(packed, trusted)
    (packed / "notes.txt").unlink()
    (packed / "blobs" / ("0" * 64)).write_text("x")
    with pytest.raises(IntegrityError, match="unexpected file"):
        verify_set(packed, trusted)
    (packed / "blobs" / ("0" * 64)).unlink()
    part = first_part(packed)
    moved = packed.parent / "moved"
    part.rename(moved)
    part.symlink_to(moved)
    with pytest.raises(IntegrityError, match="not a regular file"):
        verify_set(packed, trusted)


def test_verify_allows_the_receipt_beside_the_set(packed: Path, trusted: dict[str, Any]) -> None:
    (packed / "receipt.json").write_text("{}")
    (packed / "receipt.json.sig").write_text("{}")
    verify_set(packed, trusted)


def test_verify_without_trusted_keys_is_a_config_error(packed: Path) -> None:
    with pytest.raises(ConfigError, match="no trusted public keys"):
        verify_set(packed, {})


def test_verify_of_a_missing_directory_is_not_found(tmp_path: Path, trusted: Any) -> None:
    with pytest.raises(NotFound):
        verify_set(tmp_path / "nope", trusted)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d["items"][0].update(domain="../etc"), "not a hostname"),
        (lambda d: d["items"][0].update(version="../../x"), "not a version label"),
        (lambda d: d["items"][0].update(archive_format="zip/../../x"), "not an archive format"),
        (
            lambda d: d["items"][0]["parts"][0].update(name="blobs/../../etc/passwd"),
            "is not the expected",
        ),
        (lambda d: d.update(previous_sequence=5, previous_manifest_sha256="a" * 64), "lower"),
        (lambda d: d.update(previous_sequence=None, previous_manifest_sha256="a" * 64), "together"),
        (lambda d: d.update(format=2), "format"),
        (lambda d: d.update(sequence="1"), "sequence"),
        (lambda d: d.update(extra=True), "extra"),
        (lambda d: d["items"][0].update(size=d["items"][0]["size"] + 1), "add up"),
        (lambda d: d.update(key_id="0" * 16), "names key"),
        (lambda d: d["items"].append(dict(d["items"][0])), "listed twice"),
    ],
    ids=[
        "domain-escape",
        "version-escape",
        "format-escape",
        "part-escape",
        "chain-order",
        "chain-half",
        "format",
        "string-sequence",
        "unknown-field",
        "size",
        "key-id",
        "duplicate",
    ],
)
def test_a_trusted_but_malformed_manifest_is_refused(
    packed: Path, signing: SigningKey, trusted: dict[str, Any], change: Any, message: str
) -> None:
    resign(packed, signing, change)
    with pytest.raises(IntegrityError, match=message) as info:
        verify_set(packed, trusted)
    assert str(info.value).startswith("manifest.json")


def test_manifest_json_is_strict(packed: Path, signing: SigningKey, trusted: Any) -> None:
    data = (packed / MANIFEST).read_bytes()
    doubled = data[:-1] + b',"sequence":9}'
    (packed / MANIFEST).write_bytes(doubled)
    (packed / SIGNATURE).write_bytes(signing.signature_document(doubled))
    with pytest.raises(IntegrityError, match="duplicate key"):
        verify_set(packed, trusted)
    floaty = data.replace(b'"format":1', b'"format":1.0')
    (packed / MANIFEST).write_bytes(floaty)
    (packed / SIGNATURE).write_bytes(signing.signature_document(floaty))
    with pytest.raises(IntegrityError, match="float"):
        verify_set(packed, trusted)


def test_canonical_json_refuses_floats() -> None:
    with pytest.raises(ValueError):
        canonical_json({"a": [1, 2.5]})
    assert canonical_json({"b": 1, "a": "é"}) == '{"a":"é","b":1}'.encode()


def test_manifest_model_round_trips(packed: Path) -> None:
    data = (packed / MANIFEST).read_bytes()
    assert Manifest.model_validate(json.loads(data)).to_bytes() == data


def test_parts_that_each_match_but_join_to_another_blob_are_refused(
    packed: Path, signing: SigningKey, trusted: dict[str, Any]
) -> None:
    """A (trusted) manifest claiming a sha256 its correct parts do not join to."""
    manifest = parse_manifest((packed / MANIFEST).read_bytes())
    item = next(i for i in manifest.items if len(i.parts) > 1)
    claimed = "c" * 64

    def claim(document: dict[str, Any]) -> None:
        for entry in document["items"]:
            if entry["sha256"] == item.sha256:
                entry["sha256"] = claimed
                for part in entry["parts"]:
                    part["name"] = part["name"].replace(item.sha256, claimed)

    for part in item.parts:
        (packed / part.name).rename(packed / part.name.replace(item.sha256, claimed))
    resign(packed, signing, claim)
    with pytest.raises(IntegrityError, match="do not hash to the blob's sha256"):
        verify_set(packed, trusted)


# ---- SHA256SUMS and the carried tool ---------------------------------------------------------


def fake_tool(tmp_path: Path) -> Path:
    tool = tmp_path / "mirror-tool-9.9.9.tar"
    tool.write_bytes(os.urandom(3 * MiB + 7))
    return tool


def test_sha256sums_checks_with_sha256sum_and_covers_the_tool(
    transfer_app: App, tmp_path: Path, trusted: dict[str, Any]
) -> None:
    add_version(transfer_app, "docs.example.com", "2026-11-20")
    tool = fake_tool(tmp_path)
    out = tmp_path / "set"
    result = pack(transfer_app, out, tool=tool, max_size=1 * MiB)
    assert result.tool == "tool/mirror-tool-9.9.9.tar"
    assert (out / "tool" / tool.name).read_bytes() == tool.read_bytes()
    listed = [line.split("  ")[1] for line in (out / SHA256SUMS).read_text().splitlines()]
    assert listed == sorted(
        [MANIFEST, SIGNATURE, "tool/mirror-tool-9.9.9.tar"]
        + [p.relative_to(out).as_posix() for p in (out / "blobs").iterdir()]
    )
    checked = subprocess.run(
        ["sha256sum", "--strict", "-c", SHA256SUMS], cwd=out, capture_output=True, text=True
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    verified = verify_set(out, trusted)
    assert verified.manifest.tool is not None
    assert verified.manifest.tool.sha256 == hashlib.sha256(tool.read_bytes()).hexdigest()


def test_a_changed_tool_or_sha256sums_is_refused(
    transfer_app: App, tmp_path: Path, trusted: dict[str, Any]
) -> None:
    add_version(transfer_app, "docs.example.com", "2026-11-20")
    out = tmp_path / "set"
    pack(transfer_app, out, tool=fake_tool(tmp_path))
    carried = out / "tool" / "mirror-tool-9.9.9.tar"
    original = carried.read_bytes()
    carried.write_bytes(b"X" + original[1:])
    with pytest.raises(IntegrityError, match=r"tool/mirror-tool-9\.9\.9\.tar"):
        verify_set(out, trusted)
    carried.write_bytes(original)
    (out / "tool" / "mirror-tool-1.0.tar").write_bytes(b"")
    with pytest.raises(IntegrityError, match="unexpected file"):
        verify_set(out, trusted)
    (out / "tool" / "mirror-tool-1.0.tar").unlink()
    sums = (out / SHA256SUMS).read_text()
    (out / SHA256SUMS).write_text(sums.replace(sums[:64], "0" * 64, 1))
    with pytest.raises(IntegrityError, match=SHA256SUMS):
        verify_set(out, trusted)


def test_a_tool_with_another_name_is_a_config_error(transfer_app: App, tmp_path: Path) -> None:
    add_version(transfer_app, "docs.example.com", "2026-11-20")
    other = tmp_path / "evil.sh"
    other.write_text("#!/bin/sh\n")
    with pytest.raises(ConfigError, match="not a mirror tool artefact"):
        pack(transfer_app, tmp_path / "set", tool=other)
    assert not (tmp_path / "set").exists()
