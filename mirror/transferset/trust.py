"""The trust core of a transfer set: bytes and trusted keys in, a trusted manifest out.

Like python-tuf's TrustedMetadataSet, nothing here opens a file: the caller
reads `manifest.json` and `manifest.json.sig` and hands over their bytes, so
the rules can be tested (and reasoned about) without a disk.

Promises:
- `verify_manifest` checks the signature against a trusted key before the
  manifest is parsed at all, then the manifest's strict form, then that the
  manifest names the key that signed it, and (when `follows` is given) that it
  continues that chain; any failure is IntegrityError (exit 5) with one line.
- A TrustedManifest exists only through `verify_manifest`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from mirror.errors import ConfigError, IntegrityError
from mirror.integrity import hash_bytes
from mirror.transferset.format import MANIFEST, SIGNATURE, Manifest, parse_manifest
from mirror.transferset.keys import PublicKey, verify_signature


@dataclass(frozen=True)
class ChainLink:
    """The set a new one must follow: its sequence and its manifest's sha256."""

    sequence: int
    manifest_sha256: str


@dataclass(frozen=True)
class TrustedManifest:
    manifest: Manifest
    manifest_bytes: bytes
    manifest_sha256: str
    key_id: str


def verify_manifest(
    manifest_bytes: bytes,
    signature_bytes: bytes,
    trusted: Mapping[str, PublicKey],
    *,
    follows: ChainLink | None = None,
) -> TrustedManifest:
    """The manifest, once its signature, form, key and (optionally) chain are checked."""
    require_trusted(trusted)
    key = verify_signature(manifest_bytes, signature_bytes, trusted, what=MANIFEST, name=SIGNATURE)
    manifest = parse_manifest(manifest_bytes)
    if manifest.key_id != key.key_id:
        raise IntegrityError(
            f"{MANIFEST}: names key {manifest.key_id!r} but is signed by {key.key_id!r}"
        )
    if follows is not None:
        check_follows(manifest, follows)
    digest = hash_bytes(manifest_bytes)
    return TrustedManifest(manifest, manifest_bytes, digest, key.key_id)


def require_trusted(trusted: Mapping[str, PublicKey]) -> None:
    """ConfigError (exit 2) when no key is trusted: nothing could ever verify."""
    if not trusted:
        raise ConfigError(
            "no trusted public keys",
            hint="set target.transfer_keys or pass --trusted-key FILE.pub",
        )


def check_follows(manifest: Manifest, previous: ChainLink) -> None:
    """IntegrityError unless `manifest` names `previous` as the set before it."""
    if (manifest.previous_sequence, manifest.previous_manifest_sha256) != (
        previous.sequence,
        previous.manifest_sha256,
    ):
        raise IntegrityError(
            f"{MANIFEST}: set {manifest.sequence} does not follow set {previous.sequence} "
            f"(manifest {previous.manifest_sha256[:16]}): broken chain"
        )
