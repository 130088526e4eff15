"""Ed25519 keys that sign transfer sets and receipts.

Promises: a private key file is created with mode 0600 and never replaces an
existing file; its bytes are never printed, logged or put into a message. A
key is named by its key id, the first 16 hex digits of the sha256 of the raw
32-byte public key, which both sides can show and compare.

Signature files are small JSON documents (`format`, `algorithm`, `key_id`,
`signature` in base64) over the exact bytes of the signed file.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import logging
import os
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from mirror.errors import ConfigError, IntegrityError
from mirror.fsutil import fsync_dir
from mirror.integrity import hash_bytes

log = logging.getLogger(__name__)

KEY_ID_LENGTH = 16
ALGORITHM = "ed25519"
MAX_KEY_FILE = 64 * 1024
MAX_SIGNATURE_FILE = 64 * 1024


@dataclass(frozen=True)
class PublicKey:
    """A public key that signatures are checked against, and where it came from."""

    key_id: str
    key: Ed25519PublicKey
    source: str

    def verify(self, signature: bytes, data: bytes) -> bool:
        try:
            self.key.verify(signature, data)
        except InvalidSignature:
            return False
        return True


class Signer(Protocol):
    """What makes the signatures: a private key in memory (cryptography's Ed25519PrivateKey),
    or a key in a PKCS#11 token that signs there (`mirror.transferset.token.TokenSigner`)."""

    def sign(self, data: bytes) -> bytes: ...

    def public_key(self) -> Ed25519PublicKey: ...


@dataclass(frozen=True)
class SigningKey:
    """A private key, in a file or in a token; `repr` never shows it."""

    key_id: str
    source: str
    _private: Signer

    def __repr__(self) -> str:
        return f"SigningKey(key_id={self.key_id!r}, source={self.source!r})"

    @property
    def public(self) -> PublicKey:
        return PublicKey(self.key_id, self._private.public_key(), self.source)

    def sign(self, data: bytes) -> bytes:
        return self._private.sign(data)

    def signature_document(self, data: bytes) -> bytes:
        """The bytes of a signature file for `data`."""
        document = {
            "algorithm": ALGORITHM,
            "format": 1,
            "key_id": self.key_id,
            "signature": base64.b64encode(self.sign(data)).decode("ascii"),
        }
        return (json.dumps(document, sort_keys=True, indent=2) + "\n").encode("utf-8")


def raw_public_bytes(key: Ed25519PublicKey) -> bytes:
    return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def key_id_of(key: Ed25519PublicKey) -> str:
    """First 16 hex digits of sha256(raw public key)."""
    return hash_bytes(raw_public_bytes(key))[:KEY_ID_LENGTH]


@dataclass(frozen=True)
class GeneratedKeys:
    private_path: Path
    public_path: Path
    key_id: str


def generate_keypair(prefix: Path) -> GeneratedKeys:
    """Write PREFIX.key (PEM PKCS#8, 0600) and PREFIX.pub (PEM SubjectPublicKeyInfo, which
    `openssl pkeyutl -verify -pubin` reads); never replaces a file. A missing directory is
    created with mode 0755."""
    private_path = prefix.with_name(prefix.name + ".key")
    public_path = prefix.with_name(prefix.name + ".pub")
    for path in (private_path, public_path):
        if path.exists() or path.is_symlink():
            raise ConfigError(f"{path} already exists; refusing to overwrite a key")
    _ensure_directory(private_path.parent)
    private = Ed25519PrivateKey.generate()
    private_pem = private.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    _create_exclusive(private_path, private_pem, 0o600)
    try:
        _create_exclusive(public_path, public_pem(private.public_key()), 0o644)
    except BaseException:
        with contextlib.suppress(OSError):
            private_path.unlink()
        raise
    fsync_dir(private_path.parent)
    return GeneratedKeys(private_path, public_path, key_id_of(private.public_key()))


def public_pem(key: Ed25519PublicKey) -> bytes:
    """PEM SubjectPublicKeyInfo: what `load_public_key` and `openssl pkeyutl -pubin` read."""
    return key.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def write_public_key(path: Path, key: PublicKey) -> None:
    """Write `key` to `path` as PEM (0644), the file the other side trusts; never replaces a
    file, creates a missing directory."""
    _ensure_directory(path.parent)
    _create_exclusive(path, public_pem(key.key), 0o644)
    fsync_dir(path.parent)


def _ensure_directory(directory: Path) -> None:
    """Create a missing key directory (0755: the public key beside the private one is meant
    to be read; the private key itself is 0600), so `--out /etc/mirror/transfer` works on a
    fresh host."""
    if directory.is_dir():
        return
    try:
        directory.mkdir(parents=True, mode=0o755)
        directory.chmod(0o755)
    except FileExistsError:
        raise ConfigError(f"{directory} exists and is not a directory") from None
    except OSError as exc:
        raise ConfigError(f"cannot create directory {directory}: {exc.strerror}") from None


def _create_exclusive(path: Path, data: bytes, mode: int) -> None:
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    except FileExistsError:
        raise ConfigError(f"{path} already exists; refusing to overwrite a key") from None
    except OSError as exc:
        raise ConfigError(f"cannot create {path}: {exc.strerror}") from None
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
    except BaseException:
        with contextlib.suppress(OSError):
            path.unlink()
        raise


def _read_key_file(path: Path, kind: str) -> bytes:
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_KEY_FILE + 1)
    except FileNotFoundError:
        raise ConfigError(f"{kind} key file {path} does not exist") from None
    except OSError as exc:
        raise ConfigError(f"cannot read {kind} key file {path}: {exc.strerror}") from None
    if len(data) > MAX_KEY_FILE:
        raise ConfigError(f"{kind} key file {path} is too large to be an Ed25519 key")
    return data


def _raw_32(data: bytes) -> bytes | None:
    """32 raw key bytes from a raw, hex or base64 key file, or None."""
    if len(data) == 32:
        return data
    try:
        text = data.strip().decode("ascii")
    except UnicodeDecodeError:
        return None
    candidates: list[bytes] = []
    with contextlib.suppress(ValueError):
        candidates.append(bytes.fromhex(text))
    with contextlib.suppress(ValueError, binascii.Error):
        candidates.append(base64.b64decode(text, validate=True))
    for raw in candidates:
        if len(raw) == 32:
            return raw
    return None


def load_signing_key(path: Path) -> SigningKey:
    """The Ed25519 private key in `path` (PEM PKCS#8, OpenSSH, or raw/hex/base64 32 bytes)."""
    data = _read_key_file(path, "signing")
    with contextlib.suppress(OSError):
        if stat.S_IMODE(path.stat().st_mode) & 0o077:
            log.warning("signing key %s is readable by other users; chmod 600 it", path)
    private: Any = None
    try:
        if b"-----BEGIN OPENSSH PRIVATE KEY-----" in data:
            private = serialization.load_ssh_private_key(data, password=None)
        elif b"-----BEGIN" in data:
            private = serialization.load_pem_private_key(data, password=None)
        else:
            raw = _raw_32(data)
            if raw is not None:
                private = Ed25519PrivateKey.from_private_bytes(raw)
    except (ValueError, TypeError, UnsupportedAlgorithm):
        raise ConfigError(
            f"signing key file {path} is not a readable unencrypted Ed25519 private key"
        ) from None
    if not isinstance(private, Ed25519PrivateKey):
        raise ConfigError(f"signing key file {path} does not hold an Ed25519 private key")
    return SigningKey(key_id_of(private.public_key()), str(path), private)


def load_public_key(path: Path) -> PublicKey:
    """The Ed25519 public key in `path` (PEM, OpenSSH `ssh-ed25519 ...`, or raw/hex/base64)."""
    data = _read_key_file(path, "public")
    public: Any = None
    try:
        if b"PRIVATE KEY" in data:
            raise ConfigError(
                f"{path} holds a private key; give the .pub file (never copy the private key)"
            )
        if data.lstrip().startswith(b"ssh-ed25519 "):
            public = serialization.load_ssh_public_key(data.strip())
        elif b"-----BEGIN" in data:
            public = serialization.load_pem_public_key(data)
        else:
            raw = _raw_32(data)
            if raw is not None:
                public = Ed25519PublicKey.from_public_bytes(raw)
    except (ValueError, TypeError, UnsupportedAlgorithm):
        raise ConfigError(f"public key file {path} is not a readable Ed25519 public key") from None
    if not isinstance(public, Ed25519PublicKey):
        raise ConfigError(f"public key file {path} does not hold an Ed25519 public key")
    return PublicKey(key_id_of(public), public, str(path))


def load_trusted_keys(paths: Iterable[Path]) -> dict[str, PublicKey]:
    """{key id: key} for every trusted public key file."""
    keys: dict[str, PublicKey] = {}
    for path in paths:
        key = load_public_key(Path(path))
        keys[key.key_id] = key
    return keys


def read_signature_file(path: Path) -> tuple[str, bytes]:
    """(key id, signature bytes) from a signature file; IntegrityError names the file."""
    return parse_signature(read_signature_bytes(path), path.name)


def read_signature_bytes(path: Path) -> bytes:
    try:
        with open(path, "rb") as handle:
            return handle.read(MAX_SIGNATURE_FILE + 1)
    except FileNotFoundError:
        raise IntegrityError(f"{path.name} is missing; the set is not signed") from None
    except OSError as exc:
        raise IntegrityError(f"cannot read {path.name}: {exc.strerror}") from None


def parse_signature(data: bytes, name: str) -> tuple[str, bytes]:
    """(key id, signature bytes) from a signature document's bytes; IntegrityError names it."""
    try:
        document = json.loads(data)
        if not isinstance(document, dict):
            raise ValueError
        if document.get("format") != 1 or document.get("algorithm") != ALGORITHM:
            raise ValueError
        key_id = document["key_id"]
        signature = base64.b64decode(document["signature"], validate=True)
        if not isinstance(key_id, str) or len(signature) != 64:
            raise ValueError
    except (ValueError, KeyError, TypeError, binascii.Error, RecursionError):
        raise IntegrityError(f"{name} is not a valid ed25519 signature file") from None
    return key_id, signature


def verify_signature_file(
    data: bytes, signature_path: Path, trusted: Mapping[str, PublicKey], *, what: str
) -> PublicKey:
    """Check that `signature_path` signs exactly `data` with a trusted key; returns that key."""
    signature = read_signature_bytes(signature_path)
    return verify_signature(data, signature, trusted, what=what, name=signature_path.name)


def verify_signature(
    data: bytes,
    signature_document: bytes,
    trusted: Mapping[str, PublicKey],
    *,
    what: str,
    name: str,
) -> PublicKey:
    """Check that the signature document `name` signs exactly `data` with a trusted key;
    returns that key. Bytes in, no files: IntegrityError otherwise."""
    key_id, signature = parse_signature(signature_document, name)
    key = trusted.get(key_id)
    if key is None:
        known = ", ".join(sorted(trusted)) or "none"
        raise IntegrityError(
            f"{name}: {what} is signed by key {key_id[:KEY_ID_LENGTH]!r}, "
            f"which is not trusted here (trusted: {known})"
        )
    if not key.verify(signature, data):
        raise IntegrityError(
            f"{name}: the signature does not match {what}; the file was changed after signing"
        )
    return key
