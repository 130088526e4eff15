"""The trust core on bytes alone: no file is opened, so every rule is shown without a disk."""

from __future__ import annotations

import hashlib
import json

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from mirror.errors import ConfigError, IntegrityError
from mirror.transferset.format import Manifest, ManifestItem, PartEntry, canonical_json
from mirror.transferset.keys import PublicKey, SigningKey, key_id_of
from mirror.transferset.trust import ChainLink, TrustedManifest, verify_manifest

BLOB = hashlib.sha256(b"bundle").hexdigest()


def new_key(source: str = "memory") -> SigningKey:
    private = Ed25519PrivateKey.generate()
    return SigningKey(key_id_of(private.public_key()), source, private)


def manifest_bytes(
    key: SigningKey, *, sequence: int = 2, previous: ChainLink | None = None
) -> bytes:
    manifest = Manifest(
        format=1,
        sequence=sequence,
        previous_sequence=previous.sequence if previous else None,
        previous_manifest_sha256=previous.manifest_sha256 if previous else None,
        created_at="2026-11-22T02:00:00Z",
        source_id="connected.example",
        key_id=key.key_id,
        max_part_size=1024 * 1024,
        items=[
            ManifestItem(
                domain="docs.example.com",
                version="2026-11-21",
                sha256=BLOB,
                size=6,
                archive_format="tar.gz",
                tree_sha256="0" * 64,
                exported_at="2026-11-21T00:00:00Z",
                parts=[PartEntry(name=f"blobs/{BLOB}", size=6, sha256=BLOB)],
            )
        ],
    )
    return manifest.to_bytes()


def trusting(*keys: SigningKey) -> dict[str, PublicKey]:
    return {key.key_id: key.public for key in keys}


def test_a_signed_manifest_by_a_trusted_key_is_trusted() -> None:
    key = new_key()
    data = manifest_bytes(key)
    trusted = verify_manifest(data, key.signature_document(data), trusting(key))
    assert isinstance(trusted, TrustedManifest)
    assert trusted.key_id == key.key_id
    assert trusted.manifest.sequence == 2
    assert trusted.manifest_sha256 == hashlib.sha256(data).hexdigest()
    assert trusted.manifest_bytes == data


def test_a_signature_over_other_bytes_is_refused() -> None:
    key = new_key()
    data = manifest_bytes(key)
    other = manifest_bytes(key, sequence=3)
    with pytest.raises(IntegrityError, match=r"signature does not match manifest\.json"):
        verify_manifest(data, key.signature_document(other), trusting(key))


def test_an_unknown_key_is_refused_and_named() -> None:
    key, stranger = new_key(), new_key()
    data = manifest_bytes(stranger)
    with pytest.raises(IntegrityError, match=f"signed by key '{stranger.key_id}'.*not trusted"):
        verify_manifest(data, stranger.signature_document(data), trusting(key))


def test_one_flipped_byte_is_refused_before_parsing() -> None:
    key = new_key()
    data = manifest_bytes(key)
    signature = key.signature_document(data)
    tampered = data.replace(b'"size":6', b'"size":7', 1)
    assert tampered != data
    with pytest.raises(IntegrityError, match="changed after signing"):
        verify_manifest(tampered, signature, trusting(key))
    garbage = b"\xff" + data[1:]
    with pytest.raises(IntegrityError, match="signature does not match"):
        verify_manifest(garbage, signature, trusting(key))


def test_a_garbled_signature_document_is_refused() -> None:
    key = new_key()
    data = manifest_bytes(key)
    with pytest.raises(IntegrityError, match="not a valid ed25519 signature file"):
        verify_manifest(data, b'{"format": 1}', trusting(key))


def test_a_manifest_naming_another_key_than_its_signer_is_refused() -> None:
    named, signer = new_key(), new_key()
    data = manifest_bytes(named)
    with pytest.raises(IntegrityError, match=f"names key '{named.key_id}'"):
        verify_manifest(data, signer.signature_document(data), trusting(named, signer))


def test_the_chain_is_checked_when_asked() -> None:
    key = new_key()
    before = ChainLink(1, "a" * 64)
    data = manifest_bytes(key, previous=before)
    signature = key.signature_document(data)
    assert verify_manifest(data, signature, trusting(key), follows=before).manifest.sequence == 2
    with pytest.raises(IntegrityError, match=r"does not follow set 1.*broken chain"):
        verify_manifest(data, signature, trusting(key), follows=ChainLink(1, "b" * 64))
    with pytest.raises(IntegrityError, match="broken chain"):
        verify_manifest(data, signature, trusting(key), follows=ChainLink(0, "a" * 64))
    first = manifest_bytes(key, sequence=1)
    with pytest.raises(IntegrityError, match="broken chain"):
        verify_manifest(first, key.signature_document(first), trusting(key), follows=before)


def test_no_trusted_key_is_a_configuration_error() -> None:
    key = new_key()
    data = manifest_bytes(key)
    with pytest.raises(ConfigError, match="no trusted public keys"):
        verify_manifest(data, key.signature_document(data), {})


def test_a_signed_document_that_is_not_a_manifest_is_refused() -> None:
    key = new_key()
    data = b'{"format":1,"sequence":1.5}'
    with pytest.raises(IntegrityError, match=r"manifest\.json: not valid strict JSON"):
        verify_manifest(data, key.signature_document(data), trusting(key))


def test_a_single_part_that_is_not_the_blob_is_refused() -> None:
    """Verify hashes parts only (their hashes are signed), so where a part is the whole blob
    the trust core holds the signed blob sha256 to it; several parts are proved whole by the
    import, which hashes the joined bytes as it uploads them."""
    key = new_key()
    document = json.loads(manifest_bytes(key))
    document["items"][0]["parts"][0]["sha256"] = hashlib.sha256(b"other").hexdigest()
    data = canonical_json(document)
    with pytest.raises(IntegrityError, match="a single part must hash to the blob's sha256"):
        verify_manifest(data, key.signature_document(data), trusting(key))
