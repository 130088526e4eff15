"""Ed25519 key files: generation, loading in several encodings, signature files."""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
import stat
import subprocess
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from mirror.errors import ConfigError, IntegrityError
from mirror.transferset.keys import (
    generate_keypair,
    key_id_of,
    load_public_key,
    load_signing_key,
    load_trusted_keys,
    raw_public_bytes,
    verify_signature_file,
)


def test_generate_writes_a_private_key_only_its_owner_can_read(tmp_path: Path) -> None:
    made = generate_keypair(tmp_path / "transfer")
    assert made.private_path == tmp_path / "transfer.key"
    assert made.public_path == tmp_path / "transfer.pub"
    assert stat.S_IMODE(made.private_path.stat().st_mode) == 0o600
    assert b"PRIVATE KEY" in made.private_path.read_bytes()
    assert b"PUBLIC KEY" in made.public_path.read_bytes()
    signing = load_signing_key(made.private_path)
    public = load_public_key(made.public_path)
    assert signing.key_id == public.key_id == made.key_id
    assert made.key_id == hashlib.sha256(raw_public_bytes(public.key)).hexdigest()[:16]
    assert public.verify(signing.sign(b"data"), b"data")
    assert not public.verify(signing.sign(b"data"), b"datA")


def test_generate_never_overwrites(tmp_path: Path) -> None:
    generate_keypair(tmp_path / "k")
    before = (tmp_path / "k.key").read_bytes()
    with pytest.raises(ConfigError, match="already exists"):
        generate_keypair(tmp_path / "k")
    assert (tmp_path / "k.key").read_bytes() == before
    (tmp_path / "other.pub").write_text("x")
    with pytest.raises(ConfigError, match="already exists"):
        generate_keypair(tmp_path / "other")
    assert not (tmp_path / "other.key").exists()


def test_generate_creates_a_missing_directory_0755(tmp_path: Path) -> None:
    made = generate_keypair(tmp_path / "etc" / "mirror" / "transfer")
    assert stat.S_IMODE((tmp_path / "etc" / "mirror").stat().st_mode) == 0o755
    assert stat.S_IMODE(made.private_path.stat().st_mode) == 0o600


def test_generate_under_a_file_is_a_config_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(ConfigError, match="not a directory"):
        generate_keypair(tmp_path / "file" / "k")


def test_public_key_is_pem_spki_and_openssl_checks_a_signature(tmp_path: Path) -> None:
    """The manual recipe in docs/install.md: openssl verifies our signatures with our .pub."""
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("openssl not installed")
    made = generate_keypair(tmp_path / "k")
    assert made.public_path.read_text().startswith("-----BEGIN PUBLIC KEY-----")
    data = tmp_path / "data"
    data.write_bytes(b"signed bytes\n")
    document = json.loads(load_signing_key(made.private_path).signature_document(b"signed bytes\n"))
    raw = tmp_path / "sig.bin"
    raw.write_bytes(base64.b64decode(document["signature"]))
    command = [openssl, "pkeyutl", "-verify", "-pubin", "-inkey", str(made.public_path)]
    command += ["-rawin", "-in", str(data), "-sigfile", str(raw)]
    assert subprocess.run(command, capture_output=True, check=False).returncode == 0
    data.write_bytes(b"signed bytes, changed\n")
    assert subprocess.run(command, capture_output=True, check=False).returncode != 0


def test_signing_key_repr_never_shows_the_key(tmp_path: Path) -> None:
    made = generate_keypair(tmp_path / "k")
    signing = load_signing_key(made.private_path)
    pem = made.private_path.read_text()
    body = "".join(pem.splitlines()[1:-1])
    assert body not in repr(signing) and made.key_id in repr(signing)


@pytest.mark.parametrize("encoding", ["raw", "hex", "base64", "openssh"])
def test_keys_load_from_other_encodings(tmp_path: Path, encoding: str) -> None:
    private = Ed25519PrivateKey.generate()
    raw_private = private.private_bytes(
        serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption()
    )
    raw_public = raw_public_bytes(private.public_key())
    if encoding == "raw":
        private_data, public_data = raw_private, raw_public
    elif encoding == "hex":
        private_data, public_data = raw_private.hex().encode(), raw_public.hex().encode() + b"\n"
    elif encoding == "base64":
        private_data, public_data = base64.b64encode(raw_private), base64.b64encode(raw_public)
    else:
        private_data = private.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.OpenSSH,
            serialization.NoEncryption(),
        )
        public_data = private.public_key().public_bytes(
            serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
        )
    (tmp_path / "k.key").write_bytes(private_data)
    (tmp_path / "k.pub").write_bytes(public_data)
    expected = key_id_of(private.public_key())
    assert load_signing_key(tmp_path / "k.key").key_id == expected
    assert load_public_key(tmp_path / "k.pub").key_id == expected


def test_load_errors_are_one_line_config_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_signing_key(tmp_path / "missing.key")
    garbage = tmp_path / "garbage.key"
    garbage.write_text(
        "-----BEGIN PRIVATE KEY-----\nnot base64 at all\n-----END PRIVATE KEY-----\n"
    )
    with pytest.raises(ConfigError, match="not a readable") as info:
        load_signing_key(garbage)
    assert "\n" not in str(info.value)
    with pytest.raises(ConfigError):
        load_public_key(garbage)
    made = generate_keypair(tmp_path / "k")
    with pytest.raises(ConfigError, match="holds a private key"):
        load_public_key(made.private_path)
    rsa_like = tmp_path / "short.pub"
    rsa_like.write_bytes(b"\x01" * 31)
    with pytest.raises(ConfigError):
        load_public_key(rsa_like)


def test_signature_file_round_trip_and_refusals(tmp_path: Path) -> None:
    made = generate_keypair(tmp_path / "k")
    signing = load_signing_key(made.private_path)
    trusted = load_trusted_keys([made.public_path])
    data = b'{"hello":"world"}'
    sig = tmp_path / "manifest.json.sig"
    sig.write_bytes(signing.signature_document(data))
    assert verify_signature_file(data, sig, trusted, what="manifest.json").key_id == made.key_id
    with pytest.raises(IntegrityError, match="does not match"):
        verify_signature_file(data + b" ", sig, trusted, what="manifest.json")
    other = generate_keypair(tmp_path / "other")
    with pytest.raises(IntegrityError, match="not trusted"):
        verify_signature_file(data, sig, load_trusted_keys([other.public_path]), what="m")
    document = json.loads(sig.read_bytes())
    document["signature"] = "!!!"
    sig.write_text(json.dumps(document))
    with pytest.raises(IntegrityError, match="not a valid ed25519 signature file"):
        verify_signature_file(data, sig, trusted, what="m")
    with pytest.raises(IntegrityError, match="missing"):
        verify_signature_file(data, tmp_path / "absent.sig", trusted, what="m")
