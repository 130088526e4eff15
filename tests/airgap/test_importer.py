"""Import into a real S3 API server (SeaweedFS on loopback): order, idempotence, sequence checks,
receipts, and the air-gapped side loading no database code."""

from __future__ import annotations

import io
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from mirror.airgap import chart, layout
from mirror.airgap.chart.bucket import complete_version
from mirror.airgap.importer import import_set
from mirror.airgap.s3.multipart import upload_blob
from mirror.airgap.s3.objectstore import ObjectStore
from mirror.errors import IntegrityError, NotFound
from mirror.outbound.pack import pack
from mirror.store.app import App
from mirror.transferset.format import MANIFEST, RECEIPT, SIGNATURE, parse_manifest
from mirror.transferset.keys import generate_keypair, load_signing_key, load_trusted_keys
from mirror.transferset.reader import verify_set
from mirror.transferset.receipt import read_receipt
from tests.fixtures.s3 import bucket_listing
from tests.fixtures.versions import add_version

pytestmark = pytest.mark.s3

DOCS = "docs.example.com"
API = "api.example.com"
MiB = 1024 * 1024


@pytest.fixture
def app(target_app: App) -> App:
    return target_app


def listing(store: ObjectStore) -> dict[str, str]:
    return bucket_listing(store.client, store.bucket)


def test_import_publishes_bundles_manifests_index_and_state(
    app: App, object_store: ObjectStore, trusted: Any, tmp_path: Path
) -> None:
    _, docs_sha = add_version(app, DOCS, "2026-11-20")
    add_version(app, DOCS, "2026-11-20.2")
    add_version(app, API, "2026-11-21")
    packed = pack(app, tmp_path / "set")
    result = import_set(object_store, tmp_path / "set", trusted)
    assert [i.status for i in result.items] == ["published"] * 3
    keys = set(listing(object_store))
    assert keys == {
        "static-export/_mirror/import-state.json",
        "static-export/api.example.com/index.json",
        "static-export/api.example.com/2026-11-21/bundle.tar.gz",
        "static-export/api.example.com/2026-11-21/manifest.json",
        "static-export/api.example.com/2026-11-21/provenance.intoto.json",
        "static-export/api.example.com/2026-11-21/inventory.spdx.json",
        "static-export/docs.example.com/index.json",
        "static-export/docs.example.com/2026-11-20/bundle.tar.gz",
        "static-export/docs.example.com/2026-11-20/manifest.json",
        "static-export/docs.example.com/2026-11-20/provenance.intoto.json",
        "static-export/docs.example.com/2026-11-20/inventory.spdx.json",
        "static-export/docs.example.com/2026-11-20.2/bundle.tar.gz",
        "static-export/docs.example.com/2026-11-20.2/manifest.json",
        "static-export/docs.example.com/2026-11-20.2/provenance.intoto.json",
        "static-export/docs.example.com/2026-11-20.2/inventory.spdx.json",
    }
    bundle = object_store.key(DOCS, "2026-11-20", "bundle.tar.gz")
    facts = object_store.head(bundle)
    assert facts is not None and facts["sha256"] == docs_sha
    assert facts["size"] == app.store.open(docs_sha).stat().st_size
    assert facts["content_type"] == "application/gzip"
    data = b"".join(object_store.open_stream(bundle))
    assert data == app.store.open(docs_sha).read_bytes()
    manifest, _ = object_store.read_json(object_store.key(DOCS, "2026-11-20", "manifest.json"))
    assert manifest is not None
    assert manifest["object"] == bundle and manifest["sha256"] == docs_sha
    assert manifest["transfer_sequence"] == 1 and manifest["source_id"] == "test-connected"
    assert manifest["format"] == 1 and manifest["archive_format"] == "tar.gz"
    assert manifest["provenance_subject"] == docs_sha  # serve refuses it should that go
    index, _ = object_store.read_json(object_store.key(DOCS, "index.json"))
    assert index is not None and index["domain"] == DOCS
    assert [v["version"] for v in index["versions"]] == ["2026-11-20", "2026-11-20.2"]
    assert index["versions"][0]["manifest"].endswith("2026-11-20/manifest.json")
    state, _ = object_store.read_json(layout.state_key(object_store))
    assert state is not None and state["last_sequence"] == 1
    assert state["manifest_sha256"] == packed.manifest_sha256
    assert state["imported"][0]["sequence"] == 1
    receipt = json.loads((tmp_path / "set" / RECEIPT).read_bytes())
    assert receipt["manifest_sha256"] == packed.manifest_sha256
    assert len(receipt["items"]) == 3 and receipt["signed_by"] == result.receipt_signed_by


def test_missing_bucket_is_reported_before_the_set_is_read(
    s3_client: Any, trusted: Any, tmp_path: Path
) -> None:
    store = ObjectStore(s3_client, "bucket-that-is-not-there")
    with pytest.raises(NotFound, match="bucket-that-is-not-there"):
        import_set(store, tmp_path / "no-such-set", trusted)


def test_receipt_is_signed_with_a_key_on_the_import_side(
    app: App, object_store: ObjectStore, trusted: Any, tmp_path: Path
) -> None:
    add_version(app, DOCS, "2026-11-20")
    pack(app, tmp_path / "set")
    made = generate_keypair(tmp_path / "airgap")
    receipt_key = load_signing_key(made.private_path)
    result = import_set(object_store, tmp_path / "set", trusted, receipt_key=receipt_key)
    assert result.receipt_signed_by == made.key_id
    document, status = read_receipt(
        tmp_path / "set" / RECEIPT, load_trusted_keys([made.public_path])
    )
    assert status.startswith("verified") and document.sequence == 1
    with pytest.raises(IntegrityError, match=f"signed by key {made.key_id}, which is not trusted"):
        read_receipt(tmp_path / "set" / RECEIPT, trusted)
    _, untrusted = read_receipt(tmp_path / "set" / RECEIPT, trusted, accept_unsigned=True)
    assert untrusted == f"signed by untrusted key {made.key_id} (not checked)"


def test_unsigned_receipt_says_so(
    app: App, object_store: ObjectStore, trusted: Any, tmp_path: Path
) -> None:
    add_version(app, DOCS, "2026-11-20")
    pack(app, tmp_path / "set")
    result = import_set(object_store, tmp_path / "set", trusted)
    assert result.receipt_signed_by is None
    assert any("unsigned" in note for note in result.notes)
    assert not (tmp_path / "set" / "receipt.json.sig").exists()


def test_replay_is_refused_and_allowed_on_request(
    app: App, object_store: ObjectStore, trusted: Any, tmp_path: Path
) -> None:
    add_version(app, DOCS, "2026-11-20")
    pack(app, tmp_path / "set")
    import_set(object_store, tmp_path / "set", trusted)
    before = listing(object_store)
    with pytest.raises(IntegrityError, match="already imported") as info:
        import_set(object_store, tmp_path / "set", trusted)
    assert info.value.exit_code == 5
    assert listing(object_store) == before
    again = import_set(object_store, tmp_path / "set", trusted, allow_replay=True)
    assert again.replayed and [i.status for i in again.items] == ["already there"]
    after = listing(object_store)
    for key, etag in before.items():
        if "/_mirror/" not in key and not key.endswith("index.json"):
            assert after[key] == etag


def test_a_finished_set_run_again_is_skipped_when_asked(
    app: App, object_store: ObjectStore, trusted: Any, tmp_path: Path
) -> None:
    """--skip-imported (the Kubernetes import Job): the very set imported before is a success
    that changes nothing, not even the import state, the index, the promotion or the receipt."""
    add_version(app, DOCS, "2026-11-20")
    pack(app, tmp_path / "set")
    first = import_set(object_store, tmp_path / "set", trusted)
    receipt = (tmp_path / "set" / RECEIPT).read_bytes()
    before = listing(object_store)
    calls: list[tuple[str, str]] = []

    def promote(store: ObjectStore, domain: str, version: str) -> None:
        calls.append((domain, version))

    again = import_set(object_store, tmp_path / "set", trusted, skip_imported=True, promote=promote)
    assert again.already_imported and again.items == [] and again.promoted == [] and calls == []
    assert again.receipt == first.receipt and again.sequence == first.sequence
    assert (tmp_path / "set" / RECEIPT).read_bytes() == receipt
    assert listing(object_store) == before
    assert again.as_dict()["already_imported"] is True
    assert first.as_dict()["already_imported"] is False


def test_skip_imported_still_refuses_a_different_or_older_set(
    app: App, object_store: ObjectStore, trusted: Any, tmp_path: Path, key_pair: Any
) -> None:
    """Only the very set recorded is skipped: the same sequence signed over another manifest,
    or an older set, is refused (exit 5) as without the option."""
    add_version(app, DOCS, "2026-11-20")
    pack(app, tmp_path / "s1")
    add_version(app, DOCS, "2026-11-21")
    pack(app, tmp_path / "s2")
    import_set(object_store, tmp_path / "s2", trusted)
    before = listing(object_store)
    with pytest.raises(IntegrityError, match="rollback") as info:
        import_set(object_store, tmp_path / "s1", trusted, skip_imported=True)
    assert info.value.exit_code == 5
    signing = load_signing_key(key_pair[0])
    document = json.loads((tmp_path / "s2" / MANIFEST).read_bytes())
    document["created_at"] = "2030-01-01T00:00:00Z"
    data = json.dumps(document, sort_keys=True, separators=(",", ":")).encode()
    (tmp_path / "s2" / MANIFEST).write_bytes(data)
    (tmp_path / "s2" / SIGNATURE).write_bytes(signing.signature_document(data))
    (tmp_path / "s2" / "SHA256SUMS").unlink()  # a re-signed manifest leaves it stale
    with pytest.raises(IntegrityError, match="different manifest") as info:
        import_set(object_store, tmp_path / "s2", trusted, skip_imported=True)
    assert info.value.exit_code == 5
    assert listing(object_store) == before


def test_a_skipped_set_without_its_receipt_names_the_remedy_and_the_remedy_works(
    app: App, object_store: ObjectStore, trusted: Any, tmp_path: Path
) -> None:
    add_version(app, DOCS, "2026-11-20")
    pack(app, tmp_path / "set")
    import_set(object_store, tmp_path / "set", trusted, promote=chart.promote)
    current = object_store.read_json(object_store.key(DOCS, "current.json"))[0]
    (tmp_path / "set" / RECEIPT).unlink()
    before = listing(object_store)
    skipped = import_set(object_store, tmp_path / "set", trusted, skip_imported=True)
    assert skipped.receipt is None
    (note,) = [n for n in skipped.notes if n.startswith("no receipt at")]
    assert "`mirror transfer import --allow-replay` without --promote" in note
    again = import_set(object_store, tmp_path / "set", trusted, allow_replay=True)
    assert again.receipt is not None and again.receipt.is_file()
    document, _ = read_receipt(again.receipt, trusted, accept_unsigned=True)
    assert document.sequence == skipped.sequence and document.items[0].domain == DOCS
    after = listing(object_store)
    for key, etag in before.items():  # the bundles and manifests are left as they were
        if "/_mirror/" not in key and not key.endswith("index.json"):
            assert after[key] == etag, key
    assert object_store.read_json(object_store.key(DOCS, "current.json"))[0] == current


def test_rollback_and_broken_chain_are_refused(
    app: App, object_store: ObjectStore, trusted: Any, tmp_path: Path, key_pair: Any
) -> None:
    add_version(app, DOCS, "2026-11-20")
    pack(app, tmp_path / "s1")
    add_version(app, DOCS, "2026-11-21")
    pack(app, tmp_path / "s2")
    import_set(object_store, tmp_path / "s2", trusted)
    before = listing(object_store)
    with pytest.raises(IntegrityError, match="rollback"):
        import_set(object_store, tmp_path / "s1", trusted)
    assert listing(object_store) == before
    add_version(app, DOCS, "2026-11-22")
    pack(app, tmp_path / "s3")
    signing = load_signing_key(key_pair[0])
    document = json.loads((tmp_path / "s3" / MANIFEST).read_bytes())
    document["previous_manifest_sha256"] = "f" * 64
    data = json.dumps(document, sort_keys=True, separators=(",", ":")).encode()
    (tmp_path / "s3" / MANIFEST).write_bytes(data)
    (tmp_path / "s3" / SIGNATURE).write_bytes(signing.signature_document(data))
    (tmp_path / "s3" / "SHA256SUMS").unlink()  # a re-signed manifest leaves it stale
    with pytest.raises(IntegrityError, match="broken chain"):
        import_set(object_store, tmp_path / "s3", trusted)
    assert listing(object_store) == before


def test_a_gap_in_the_chain_is_imported_with_a_note(
    app: App, object_store: ObjectStore, trusted: Any, tmp_path: Path
) -> None:
    add_version(app, DOCS, "2026-11-20")
    pack(app, tmp_path / "s1")
    import_set(object_store, tmp_path / "s1", trusted)
    add_version(app, DOCS, "2026-11-21")
    pack(app, tmp_path / "s2")
    add_version(app, DOCS, "2026-11-22")
    pack(app, tmp_path / "s3")
    result = import_set(object_store, tmp_path / "s3", trusted)
    assert result.never_seen == [2]
    assert any(
        note.startswith("set 2 never arrived here (the newest set imported is 1)")
        and "importing set 3 is safe" in note
        for note in result.notes
    )
    index, _ = object_store.read_json(object_store.key(DOCS, "index.json"))
    assert index is not None
    assert [v["version"] for v in index["versions"]] == ["2026-11-20", "2026-11-22"]
    import_set(object_store, tmp_path / "s2", trusted, allow_replay=True)
    index, _ = object_store.read_json(object_store.key(DOCS, "index.json"))
    assert index is not None
    assert [v["version"] for v in index["versions"]] == ["2026-11-20", "2026-11-21", "2026-11-22"]
    state, _ = object_store.read_json(layout.state_key(object_store))
    assert state is not None and state["last_sequence"] == 3


def open_uploads(store: ObjectStore) -> list[str]:
    answer = store.client.list_multipart_uploads(Bucket=store.bucket)
    return [upload["Key"] for upload in answer.get("Uploads", [])]


def test_a_bad_second_bundle_leaves_nothing_of_the_first(
    app: App, object_store: ObjectStore, trusted: Any, tmp_path: Path
) -> None:
    """The first bundle was uploaded whole and matched, but is never completed: the second's
    bad part aborts every upload of the import."""
    add_version(app, DOCS, "2026-11-20", payload_size=3 * MiB)
    add_version(app, API, "2026-11-21", payload_size=3 * MiB)
    pack(app, tmp_path / "set", max_size=MiB)
    manifest = parse_manifest((tmp_path / "set" / MANIFEST).read_bytes())
    first, second = manifest.items
    assert len(first.parts) > 1 and len(second.parts) > 1
    bad = tmp_path / "set" / second.parts[-1].name
    data = bytearray(bad.read_bytes())
    data[100] ^= 1
    bad.write_bytes(bytes(data))
    with pytest.raises(IntegrityError, match=f"{second.parts[-1].name} hashes to"):
        import_set(object_store, tmp_path / "set", trusted)
    assert listing(object_store) == {}
    assert open_uploads(object_store) == []
    assert not (tmp_path / "set" / RECEIPT).exists()


def test_parts_that_each_match_but_join_to_another_blob_are_never_published(
    app: App, object_store: ObjectStore, signing: Any, trusted: Any, tmp_path: Path
) -> None:
    """A trusted manifest claiming a sha256 its correct parts do not join to: verify trusts the
    signed part hashes (it hashes each byte once), the import hashes the whole and refuses."""
    add_version(app, DOCS, "2026-11-20", payload_size=MiB + MiB // 2)
    set_dir = tmp_path / "set"
    pack(app, set_dir, max_size=MiB)
    (item,) = parse_manifest((set_dir / MANIFEST).read_bytes()).items
    assert len(item.parts) > 1
    claimed = "c" * 64
    document = json.loads((set_dir / MANIFEST).read_bytes())
    document["items"][0]["sha256"] = claimed
    # its statement is about the real bytes (the import refuses that first): carried without
    del document["items"][0]["provenance"]
    del document["items"][0]["inventory"]  # it lies beside the statement, which signs it
    shutil.rmtree(set_dir / "provenance")
    for part in document["items"][0]["parts"]:
        old = part["name"]
        part["name"] = old.replace(item.sha256, claimed)
        (set_dir / old).rename(set_dir / part["name"])
    data = json.dumps(document, sort_keys=True, separators=(",", ":")).encode()
    (set_dir / MANIFEST).write_bytes(data)
    (set_dir / SIGNATURE).write_bytes(signing.signature_document(data))
    (set_dir / "SHA256SUMS").unlink(missing_ok=True)
    verify_set(set_dir, trusted)
    with pytest.raises(IntegrityError, match="nothing was published"):
        import_set(object_store, set_dir, trusted)
    assert listing(object_store) == {}
    assert open_uploads(object_store) == []


def test_a_different_object_under_the_same_key_stops_the_import(
    app: App, object_store: ObjectStore, trusted: Any, tmp_path: Path
) -> None:
    add_version(app, DOCS, "2026-11-20")
    pack(app, tmp_path / "set")
    key = object_store.key(DOCS, "2026-11-20", "bundle.tar.gz")
    object_store.client.put_object(
        Bucket=object_store.bucket, Key=key, Body=b"other", Metadata={"sha256": "0" * 64}
    )
    before = listing(object_store)
    with pytest.raises(IntegrityError, match="already exists with different content"):
        import_set(object_store, tmp_path / "set", trusted)
    assert listing(object_store) == before


def test_an_object_there_is_read_back_before_any_other_upload_is_completed(
    app: App, object_store: ObjectStore, trusted: Any, tmp_path: Path
) -> None:
    """Other bytes of the right size whose metadata names the signed digest, at the second
    version's key: refused, and the first version's bundle, staged meanwhile, is never
    completed (trial37 D3: the read-back came after every upload was completed, leaving an
    object no index names)."""
    add_version(app, DOCS, "2026-11-20")
    add_version(app, API, "2026-11-21")
    pack(app, tmp_path / "set")
    second = parse_manifest((tmp_path / "set" / MANIFEST).read_bytes()).items[1]
    key = object_store.key(second.domain, second.version, f"bundle.{second.archive_format}")
    object_store.client.put_object(
        Bucket=object_store.bucket,
        Key=key,
        Body=b"x" * second.size,
        Metadata={"sha256": second.sha256},
    )
    before = listing(object_store)
    with pytest.raises(IntegrityError, match="already exists and names tree"):
        import_set(object_store, tmp_path / "set", trusted)
    assert listing(object_store) == before
    assert open_uploads(object_store) == []


def test_an_interrupted_import_resumes(
    app: App, object_store: ObjectStore, trusted: Any, tmp_path: Path
) -> None:
    """A bundle that landed before a crash is kept; its version is completed and listed once."""
    add_version(app, DOCS, "2026-11-20")
    _, sha = add_version(app, DOCS, "2026-11-21")
    pack(app, tmp_path / "set")
    manifest = parse_manifest((tmp_path / "set" / MANIFEST).read_bytes())
    item = next(i for i in manifest.items if i.sha256 == sha)
    key = object_store.key(DOCS, "2026-11-21", "bundle.tar.gz")
    data = app.store.open(sha).read_bytes()
    upload_blob(object_store, key, io.BytesIO(data), sha256=sha, size=item.size)
    etag = listing(object_store)[key]
    result = import_set(object_store, tmp_path / "set", trusted)
    assert [i.status for i in result.items] == ["published", "published"]
    assert listing(object_store)[key] == etag
    index, _ = object_store.read_json(object_store.key(DOCS, "index.json"))
    assert index is not None
    assert [v["version"] for v in index["versions"]] == ["2026-11-20", "2026-11-21"]


def test_index_keeps_versions_from_earlier_sets(
    app: App, object_store: ObjectStore, trusted: Any, tmp_path: Path
) -> None:
    add_version(app, DOCS, "2026-11-20")
    pack(app, tmp_path / "s1")
    import_set(object_store, tmp_path / "s1", trusted)
    first, _ = object_store.read_json(object_store.key(DOCS, "index.json"))
    add_version(app, DOCS, "2026-11-21")
    pack(app, tmp_path / "s2")
    import_set(object_store, tmp_path / "s2", trusted)
    index, _ = object_store.read_json(object_store.key(DOCS, "index.json"))
    assert first is not None and index is not None
    assert index["versions"][0] == first["versions"][0]
    assert [v["version"] for v in index["versions"]] == ["2026-11-20", "2026-11-21"]


@pytest.mark.parametrize(
    ("document", "damage"),
    [
        ("index.json", b"[]"),
        ("index.json", b"{not json"),
        ("index.json", b'{"versions": 7}'),
        ("current.json", b"[]"),
    ],
)
def test_a_damaged_document_is_refused_before_anything_is_uploaded(
    app: App, object_store: ObjectStore, trusted: Any, tmp_path: Path, document: str, damage: bytes
) -> None:
    """The index (and, promoting, `current.json`) is read before the bundles are staged: an
    import refused for it leaves the bucket as it was (it used to leave the new version's
    bundle and manifest behind)."""
    add_version(app, DOCS, "2026-11-20")
    pack(app, tmp_path / "s1")
    import_set(object_store, tmp_path / "s1", trusted, promote=chart.promote)
    add_version(app, DOCS, "2026-11-21")
    pack(app, tmp_path / "s2")
    key = object_store.key(DOCS, document)
    object_store.client.put_object(Bucket=object_store.bucket, Key=key, Body=damage)
    before = listing(object_store)
    with pytest.raises(IntegrityError, match=re.escape(document)):
        import_set(object_store, tmp_path / "s2", trusted, promote=chart.promote)
    assert listing(object_store) == before
    assert open_uploads(object_store) == []


def test_promote_hook_gets_each_domains_newest_version(
    app: App, object_store: ObjectStore, trusted: Any, tmp_path: Path
) -> None:
    add_version(app, DOCS, "2026-11-20")
    add_version(app, DOCS, "2026-11-20.2")
    add_version(app, API, "2026-11-19")
    pack(app, tmp_path / "set")
    calls: list[tuple[str, str]] = []

    def promote(store: ObjectStore, domain: str, version: str) -> None:
        index, _ = store.read_json(store.key(domain, "index.json"))
        assert index is not None and version in [v["version"] for v in index["versions"]]
        calls.append((domain, version))

    result = import_set(object_store, tmp_path / "set", trusted, promote=promote)
    assert sorted(calls) == [(API, "2026-11-19"), (DOCS, "2026-11-20.2")]
    assert sorted(result.promoted) == sorted(calls)


def test_promote_with_the_chart_module(
    app: App, object_store: ObjectStore, trusted: Any, tmp_path: Path
) -> None:
    add_version(app, DOCS, "2026-11-20")
    pack(app, tmp_path / "set")
    import_set(object_store, tmp_path / "set", trusted, promote=chart.promote)
    current, _ = object_store.read_json(object_store.key(DOCS, "current.json"))
    assert current is not None and current["current"] == "2026-11-20"


def test_promote_refuses_a_version_whose_bundle_object_is_gone_and_the_remedy_works(
    app: App, object_store: ObjectStore, trusted: Any, tmp_path: Path
) -> None:
    """A pointer to an object that is not there makes every pod's fetch fail while the
    pointer looks right: promote refuses first (exit 3), current.json untouched; the remedy
    it names (import the set again with --allow-replay) puts the object back (trial3637 G5)."""
    add_version(app, DOCS, "2026-11-20")
    pack(app, tmp_path / "set")
    import_set(object_store, tmp_path / "set", trusted)
    key = complete_version(object_store, DOCS, "2026-11-20").key
    object_store.client.delete_object(Bucket=object_store.bucket, Key=key)
    with pytest.raises(NotFound, match="has no bundle object") as refused:
        chart.promote(object_store, DOCS, "2026-11-20")
    assert refused.value.exit_code == 3 and "--allow-replay" in str(refused.value)
    assert object_store.read_json(object_store.key(DOCS, "current.json"))[0] is None
    import_set(object_store, tmp_path / "set", trusted, allow_replay=True)
    assert chart.promote(object_store, DOCS, "2026-11-20").current == "2026-11-20"


def test_a_carried_tool_is_verified_but_never_published(
    app: App, object_store: ObjectStore, trusted: Any, tmp_path: Path
) -> None:
    add_version(app, DOCS, "2026-11-20")
    tool = tmp_path / "mirror-tool-0.1.0.tar"
    tool.write_bytes(b"the tool" * 1000)
    pack(app, tmp_path / "set", tool=tool)
    result = import_set(object_store, tmp_path / "set", trusted)
    assert [i.status for i in result.items] == ["published"]
    assert not [key for key in listing(object_store) if "tool" in key]
    assert any("tool/mirror-tool-0.1.0.tar" in note for note in result.notes)
    assert (tmp_path / "set" / "tool" / tool.name).read_bytes() == tool.read_bytes()


def test_the_air_gapped_side_loads_no_database_and_no_connected_side_code() -> None:
    """Every module of mirror.airgap and mirror.transferset, imported in a fresh interpreter,
    leaves SQLAlchemy, the index models and the connected side's packages unloaded."""
    script = (
        "import importlib, pkgutil, sys\n"
        "import mirror.airgap, mirror.transferset\n"
        "for package in (mirror.airgap, mirror.transferset):\n"
        "    for found in pkgutil.walk_packages(package.__path__, package.__name__ + '.'):\n"
        "        importlib.import_module(found.name)\n"
        "print(len([m for m in sys.modules if m.startswith('mirror.airgap.')]))\n"
        "banned = ('sqlalchemy', 'mirror.store', 'mirror.export', 'mirror.vendorapi',"
        " 'mirror.outbound')\n"
        "print(sorted(m for m in sys.modules if m == 'sqlalchemy' or m.startswith(banned)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60
    )
    count, loaded = done.stdout.splitlines()
    assert int(count) >= 10
    assert loaded == "[]"
