"""The bucket layout's documents: they round-trip, and a malformed one is refused by name."""

from __future__ import annotations

import json
from typing import Any

import pytest

from mirror.airgap import layout
from mirror.errors import IntegrityError

SHA = "a" * 64

VERSION_MANIFEST = {
    "format": 1,
    "domain": "docs.example.com",
    "version": "2026-11-21",
    "object": "static-export/docs.example.com/2026-11-21/bundle.tar.gz",
    "sha256": SHA,
    "size": 6,
    "archive_format": "tar.gz",
    "tree_sha256": "0" * 64,
    "exported_at": "2026-11-21T00:00:00Z",
    "imported_at": "2026-11-22T02:00:00Z",
    "transfer_sequence": 1,
    "source_id": "connected.example",
}
INDEX = {
    "format": 1,
    "domain": "docs.example.com",
    "updated_at": "2026-11-22T02:00:00Z",
    "versions": [
        {
            "version": "2026-11-21",
            "sha256": SHA,
            "size": 6,
            "object": "static-export/docs.example.com/2026-11-21/bundle.tar.gz",
            "manifest": "static-export/docs.example.com/2026-11-21/manifest.json",
            "imported_at": "2026-11-22T02:00:00Z",
        }
    ],
}
CURRENT = {
    "format": 1,
    "domain": "docs.example.com",
    "current": "2026-11-21",
    "history": [{"version": "2026-11-21", "action": "promote", "at": "2026-11-22T02:00:00Z"}],
}
STATE = {
    "format": 1,
    "last_sequence": 3,
    "manifest_sha256": SHA,
    "source_id": "connected.example",
    "imported": [
        {"sequence": 2, "manifest_sha256": "b" * 64, "source_id": "c", "at": "t"},
        {"sequence": 3, "manifest_sha256": SHA, "source_id": "c", "at": "t"},
    ],
    "site": "default",
}
DOCUMENTS: list[tuple[type[Any], dict[str, Any]]] = [
    (layout.VersionManifest, VERSION_MANIFEST),
    (layout.Index, INDEX),
    (layout.Current, CURRENT),
    (layout.ImportState, STATE),
]


@pytest.mark.parametrize(("model", "document"), DOCUMENTS)
def test_documents_round_trip_exactly(model: type[Any], document: dict[str, Any]) -> None:
    parsed = layout.parse_document(model, document, "bucket/key")
    assert parsed.as_dict() == document
    assert json.loads(parsed.to_bytes()) == document
    assert parsed.to_bytes().endswith(b"\n")


def test_fields_of_a_newer_tool_are_kept_on_rewrite() -> None:
    newer = {**CURRENT, "channel": "stable"}
    assert layout.parse_document(layout.Current, newer, "k").as_dict()["channel"] == "stable"


@pytest.mark.parametrize(
    ("model", "document", "field"),
    [
        (layout.Index, {**INDEX, "versions": [{"version": "1"}]}, "versions.0.sha256"),
        (layout.Index, {**INDEX, "versions": "2026-11-21"}, "versions"),
        (layout.Index, {**INDEX, "format": 2}, "format"),
        (layout.Current, {**CURRENT, "current": 20261121}, "current"),
        (
            layout.Current,
            {**CURRENT, "history": [{"version": "x", "action": "delete"}]},
            "history.0.action",
        ),
        (layout.ImportState, {**STATE, "last_sequence": "3"}, "last_sequence"),
        (layout.ImportState, {"format": 1}, "last_sequence"),
        (layout.VersionManifest, {**VERSION_MANIFEST, "size": -1}, "size"),
        (layout.VersionManifest, {**VERSION_MANIFEST, "size": True}, "size"),
    ],
)
def test_a_malformed_document_is_an_integrity_error_naming_key_and_field(
    model: type[Any], document: dict[str, Any], field: str
) -> None:
    with pytest.raises(IntegrityError, match=f"bucket/key is not a valid {model.__name__}") as bad:
        layout.parse_document(model, document, "bucket/key")
    assert f"({field}:" in str(bad.value)
    assert bad.value.exit_code == 5


def test_import_state_history_includes_the_newest_set() -> None:
    state = layout.parse_document(layout.ImportState, {**STATE, "imported": []}, "k")
    assert state.history() == {3: SHA}
    full = layout.parse_document(layout.ImportState, STATE, "k")
    assert full.has(2, "b" * 64) and not full.has(2, SHA)


class Keys:
    bucket = "b"

    def key(self, *parts: str) -> str:
        return "/".join(["p", *parts])

    def read_json(self, key: str) -> tuple[dict[str, Any] | None, str | None]:
        raise AssertionError("not used")

    def write_json(self, key: str, document: dict[str, Any], *, if_match: str | None) -> str:
        raise AssertionError("not used")


def test_key_names() -> None:
    keys = Keys()
    assert layout.index_key(keys, "d") == "p/d/index.json"
    assert layout.current_key(keys, "d") == "p/d/current.json"
    assert layout.version_manifest_key(keys, "d", "v") == "p/d/v/manifest.json"
    assert layout.bundle_key(keys, "d", "v", "tar.gz") == "p/d/v/bundle.tar.gz"
    assert layout.state_key(keys) == "p/_mirror/import-state.json"


def test_an_import_state_from_before_sites_follows_no_site_until_its_next_import() -> None:
    before = {key: value for key, value in STATE.items() if key != "site"}
    assert layout.parse_document(layout.ImportState, before, "bucket/key").site is None
