"""Reading a set from disk: offline verify, strict manifests, SHA256SUMS and the carried tool."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from mirror.errors import ConfigError, IntegrityError, NotFound
from mirror.outbound.pack import pack
from mirror.store.app import App
from mirror.transferset.format import (
    MANIFEST,
    SHA256SUMS,
    SIGNATURE,
    Manifest,
    canonical_json,
    parse_manifest,
)
from mirror.transferset.keys import SigningKey
from mirror.transferset.reader import verify_set
from tests.fixtures.versions import add_version

MiB = 1024 * 1024


def resign(set_dir: Path, key: SigningKey, change: Callable[[dict[str, Any]], None]) -> None:
    """Rewrite the manifest (as a compromised or buggy source would) and sign it properly."""
    document = json.loads((set_dir / MANIFEST).read_bytes())
    change(document)
    data = json.dumps(document, sort_keys=True, separators=(",", ":")).encode()
    (set_dir / MANIFEST).write_bytes(data)
    (set_dir / SIGNATURE).write_bytes(key.signature_document(data))
    (set_dir / SHA256SUMS).unlink(missing_ok=True)  # stale now; it is optional


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
    with pytest.raises(IntegrityError, match=f"blobs/{part.name} hashes to") as info:
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


def test_verify_names_the_first_bad_part_in_manifest_order(
    packed: Path, trusted: dict[str, Any]
) -> None:
    """Parts are hashed on several threads; the part named is still the first bad one."""
    manifest = parse_manifest((packed / MANIFEST).read_bytes())
    names = [part.name for item in manifest.blobs() for part in item.parts]
    assert len(names) >= 3
    for name in names[1:]:
        data = bytearray((packed / name).read_bytes())
        data[0] ^= 1
        (packed / name).write_bytes(bytes(data))
    for _ in range(3):
        with pytest.raises(IntegrityError, match=f"^{names[1]} hashes to"):
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
        + ["provenance/docs.example.com/2026-11-20.intoto.json"]
        + ["provenance/docs.example.com/2026-11-20.spdx.json"]
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


def test_a_manifest_field_this_release_does_not_know_is_refused(packed: Path) -> None:
    """The README's upgrade order: a later release's new item field (as `inventory` was to
    earlier ones) is refused by the manifest model, exit 5, never dropped silently."""
    document = json.loads((packed / MANIFEST).read_bytes())
    document["items"][0]["from_a_later_release"] = {"sha256": "0" * 64}
    with pytest.raises(IntegrityError, match="from_a_later_release") as refused:
        parse_manifest(json.dumps(document).encode())
    assert refused.value.exit_code == 5
