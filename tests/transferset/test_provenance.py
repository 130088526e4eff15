"""Provenance statements: real Ed25519 keys, real DSSE envelopes, and the README's recipe run
with openssl and coreutils (a tool that is not mirror)."""

from __future__ import annotations

import base64
import json
import subprocess
from pathlib import Path

import pytest

from mirror.errors import IntegrityError
from mirror.integrity import hash_file
from mirror.sim.site import SiteSpec, build_bundle
from mirror.transferset.keys import generate_keypair, load_public_key, load_signing_key
from mirror.transferset.provenance import (
    PAYLOAD_TYPE,
    pae,
    sign_statement,
    statement,
    verify_provenance,
)
from tests.fixtures.docs import documented

PREDICATE = {"domain": "docs.example.com", "vendor": {"job_id": "se_1", "page_count": 40}}


@pytest.fixture
def keys(tmp_path: Path) -> dict[str, object]:
    made = generate_keypair(tmp_path / "keys" / "transfer")
    other = generate_keypair(tmp_path / "keys" / "other")
    public = load_public_key(made.public_path)
    return {
        "signing": load_signing_key(made.private_path),
        "other": load_signing_key(other.private_path),
        "trusted": {public.key_id: public},
        "pub": made.public_path,
    }


def envelope_for(sha256: str, keys: dict[str, object], key: str = "signing") -> bytes:
    body = statement("docs.example.com/2026-11-24/bundle.tar.gz", sha256, PREDICATE)
    return sign_statement(body, keys[key])  # type: ignore[arg-type]


def test_a_signed_statement_verifies_and_says_what_it_was_given(keys: dict[str, object]) -> None:
    sha = "ab" * 32
    envelope = envelope_for(sha, keys)
    document = json.loads(envelope)
    assert document["payloadType"] == PAYLOAD_TYPE == "application/vnd.in-toto+json"
    body = json.loads(base64.b64decode(document["payload"]))
    assert body["_type"] == "https://in-toto.io/Statement/v1"
    assert body["subject"][0]["digest"] == {"sha256": sha}
    proven = verify_provenance(envelope, keys["trusted"], sha256=sha)  # type: ignore[arg-type]
    assert proven.predicate == PREDICATE and proven.key_id == document["signatures"][0]["keyid"]
    assert envelope_for(sha, keys) == envelope  # canonical: same input, same bytes


def test_pae_is_the_dsse_v1_encoding() -> None:
    assert pae("http://example.com/HelloWorld", b"hello world") == (
        b"DSSEv1 29 http://example.com/HelloWorld 11 hello world"
    )


def test_wrong_subject_wrong_key_and_tampering_are_refused(keys: dict[str, object]) -> None:
    sha = "ab" * 32
    trusted = keys["trusted"]
    with pytest.raises(IntegrityError, match="is about bundle abababababababab"):
        verify_provenance(envelope_for(sha, keys), trusted, sha256="cd" * 32)  # type: ignore[arg-type]
    with pytest.raises(IntegrityError, match="not trusted here"):
        verify_provenance(envelope_for(sha, keys, "other"), trusted, sha256=sha)  # type: ignore[arg-type]
    document = json.loads(envelope_for(sha, keys))
    body = base64.b64decode(document["payload"]).replace(b'"page_count": 40', b'"page_count": 4')
    document["payload"] = base64.b64encode(body).decode()
    with pytest.raises(IntegrityError, match="changed after signing"):
        verify_provenance(json.dumps(document).encode(), trusted, sha256=sha)  # type: ignore[arg-type]
    with pytest.raises(IntegrityError, match="not valid JSON"):
        verify_provenance(b"{", trusted, sha256=sha)  # type: ignore[arg-type]


def test_the_documented_recipe_verifies_with_openssl_and_catches_a_change(
    keys: dict[str, object], tmp_path: Path
) -> None:
    work = tmp_path / "check"
    work.mkdir()
    bundle = build_bundle(SiteSpec(domain="docs.example.com"), work / "bundle.tar.gz")
    sha = hash_file(bundle.path).sha256
    (work / "provenance.intoto.json").write_bytes(envelope_for(sha, keys))
    recipe = documented("provenance-verify").replace("/etc/mirror/transfer.pub", str(keys["pub"]))

    def run() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["sh", "-e", "-c", recipe], cwd=work, capture_output=True, text=True, check=False
        )

    good = run()
    assert good.returncode == 0, good.stdout + good.stderr
    assert "Signature Verified Successfully" in good.stdout
    assert "bundle.tar.gz: OK" in good.stdout
    other = build_bundle(SiteSpec(domain="docs.example.com", revision=1), work / "x.tar.gz")
    other.path.replace(work / "bundle.tar.gz")
    assert run().returncode != 0  # a different bundle
    (work / "provenance.intoto.json").write_bytes(envelope_for("ef" * 32, keys, "other"))
    assert run().returncode != 0  # another key
