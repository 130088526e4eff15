"""Verification records (mirror.airgap.verification): bytes and real Ed25519 keys in, a
signed in-toto statement out, refused when it is about another object or version, signed by
an untrusted key or changed after signing; a key in a SoftHSM2 token signs one too."""

from __future__ import annotations

import base64
import json
from dataclasses import replace
from pathlib import Path

import pytest

from mirror import __version__
from mirror.airgap.verification import (
    CHECKS,
    PREDICATE_TYPE,
    ImportFacts,
    make_record,
    verify_record,
)
from mirror.errors import IntegrityError
from mirror.transferset.keys import (
    PublicKey,
    SigningKey,
    generate_keypair,
    load_public_key,
    load_signing_key,
    write_public_key,
)
from mirror.transferset.provenance import PREDICATE_TYPE as PROVENANCE_TYPE
from mirror.transferset.provenance import sign_statement, statement
from mirror.transferset.token import open_signing_key
from tests.fixtures.tokens import SoftHSM

DOCS = "docs.example.com"
FULL = ImportFacts(
    domain=DOCS,
    version="2026-11-24",
    object_name="static-export/docs.example.com/2026-11-24/bundle.tar.gz",
    sha256="ab" * 32,
    size=1234,
    tree_sha256="cd" * 32,
    sequence=7,
    manifest_sha256="ef" * 32,
    source_id="connected-1",
    site="default",
    transfer_key_id="0123456789abcdef",
    provenance_sha256="12" * 32,
    delta_base=None,
    verified_at="2026-11-24T03:00:00Z",
)
DELTA = replace(FULL, version="2026-11-25", delta_base="2026-11-24", provenance_sha256=None)


def keypair(tmp_path: Path, name: str) -> tuple[SigningKey, dict[str, PublicKey]]:
    made = generate_keypair(tmp_path / name)
    public = load_public_key(made.public_path)
    return load_signing_key(made.private_path), {public.key_id: public}


def statement_of(envelope: bytes) -> dict[str, object]:
    return dict(json.loads(base64.b64decode(json.loads(envelope)["payload"])))


def test_a_record_names_the_object_the_set_the_key_the_checks_and_the_tool(
    tmp_path: Path,
) -> None:
    key, trusted = keypair(tmp_path, "receipt")
    envelope = make_record(FULL, key)
    said = statement_of(envelope)
    assert said["_type"] == "https://in-toto.io/Statement/v1"
    assert said["predicateType"] == PREDICATE_TYPE == "urn:mirror:verification:import:v1"
    assert said["subject"] == [
        {"name": f"{DOCS}/2026-11-24/bundle.tar.gz", "digest": {"sha256": "ab" * 32}}
    ]
    predicate = said["predicate"]
    assert isinstance(predicate, dict)
    assert predicate["set"] == {
        "sequence": 7,
        "manifest_sha256": "ef" * 32,
        "source_id": "connected-1",
        "site": "default",
    }
    assert predicate["transfer_key_id"] == "0123456789abcdef"
    assert predicate["checks"] == ["signatures", "completeness", "digests", "provenance"]
    assert (predicate["carried_as"], predicate["delta_base"]) == ("full", None)
    assert predicate["tool"] == {"name": "mirror", "version": __version__}
    assert predicate["verified_at"] == "2026-11-24T03:00:00Z"
    record = verify_record(envelope, trusted, domain=DOCS, version="2026-11-24", sha256="ab" * 32)
    assert record.key_id == key.key_id and record.predicate == predicate
    assert make_record(FULL, key) == envelope  # canonical: the same facts, the same bytes


def test_a_delta_names_its_rebuild_and_its_base(tmp_path: Path) -> None:
    key, _ = keypair(tmp_path, "receipt")
    predicate = statement_of(make_record(DELTA, key))["predicate"]
    assert isinstance(predicate, dict)
    assert predicate["checks"] == ["signatures", "completeness", "digests", "delta-rebuild"]
    assert (predicate["carried_as"], predicate["delta_base"]) == ("delta", "2026-11-24")
    assert set(predicate["checks"]) <= set(CHECKS)


def test_another_object_version_signer_or_a_change_is_refused(tmp_path: Path) -> None:
    key, trusted = keypair(tmp_path, "receipt")
    other, _ = keypair(tmp_path, "other")
    envelope = make_record(FULL, key)
    where = {"domain": DOCS, "version": "2026-11-24"}
    with pytest.raises(IntegrityError, match="about object abababababababab"):
        verify_record(envelope, trusted, **where, sha256="99" * 32)
    with pytest.raises(IntegrityError, match=r"not about docs\.example\.com 2026-11-25"):
        verify_record(envelope, trusted, domain=DOCS, version="2026-11-25", sha256="ab" * 32)
    with pytest.raises(IntegrityError, match=f"signed by key '{other.key_id}', which is not"):
        verify_record(make_record(FULL, other), trusted, **where, sha256="ab" * 32)
    document = json.loads(envelope)
    body = base64.b64decode(document["payload"]).replace(b'"sequence": 7', b'"sequence": 8')
    document["payload"] = base64.b64encode(body).decode()
    with pytest.raises(IntegrityError, match="changed after signing"):
        verify_record(json.dumps(document).encode(), trusted, **where, sha256="ab" * 32)


def test_a_provenance_statement_is_no_record(tmp_path: Path) -> None:
    """The transfer key's statement about the same bytes, even trusted here, is not this
    side's record: the predicate type tells them apart."""
    key, trusted = keypair(tmp_path, "receipt")
    body = statement(f"{DOCS}/2026-11-24/bundle.tar.gz", "ab" * 32, {"domain": DOCS})
    with pytest.raises(IntegrityError, match=f"expected '{PREDICATE_TYPE}'"):
        verify_record(
            sign_statement(body, key), trusted, domain=DOCS, version="2026-11-24", sha256="ab" * 32
        )
    assert PROVENANCE_TYPE != PREDICATE_TYPE


def test_a_key_in_a_token_signs_a_record(in_process: SoftHSM, tmp_path: Path) -> None:
    in_process.tool("--keypairgen", "--key-type", "EC:edwards25519", "--label", "receipt")
    key = open_signing_key(in_process.uri("receipt"))
    write_public_key(tmp_path / "receipt.pub", key.public)
    public = load_public_key(tmp_path / "receipt.pub")
    record = verify_record(
        make_record(DELTA, key),
        {public.key_id: public},
        domain=DOCS,
        version="2026-11-25",
        sha256="ab" * 32,
    )
    assert record.key_id == key.key_id
