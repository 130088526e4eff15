"""Provenance in the bucket: published beside each version's manifest, verified where it lies.

Promises: `publish` writes each carried statement (already verified by `verify_set`) once,
at `layout.provenance_key`, before the version's manifest, so a version whose manifest is
there has its provenance there too; an object already there with other bytes is refused
(IntegrityError, objects are never overwritten). `check_in_bucket` reads a version's
statement and verifies it against the trusted keys and the bundle the version's manifest
names (`chart check --provenance`): one IntegrityError (exit 5), or NotFound (exit 3) when
the version has none.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterator, Mapping
from typing import Any, Protocol

from mirror.airgap import layout
from mirror.airgap.s3.objectstore import ObjectStore
from mirror.errors import IntegrityError, NotFound
from mirror.integrity import hash_bytes
from mirror.transferset.format import Manifest
from mirror.transferset.keys import PublicKey
from mirror.transferset.provenance import MAX_ENVELOPE, Provenance, verify_provenance

SHA256_IDENTITY = "provenance-sha256"


class StatementStore(layout.Bucket, Protocol):
    """What reading a published statement needs of the bucket (ObjectStore; `mirror serve`'s
    read-only bucket)."""

    def head(self, key: str) -> dict[str, Any] | None: ...

    def open_stream(self, key: str) -> Iterator[bytes]: ...


def publish(
    store: ObjectStore, manifest: Manifest, carried: Mapping[tuple[str, str], bytes]
) -> int:
    """Write the carried statements of `manifest`'s items; returns how many were new."""
    created = 0
    for item in manifest.items:
        envelope = carried.get((item.domain, item.version))
        if envelope is None:
            continue
        key = layout.provenance_key(store, item.domain, item.version)
        outcome = store.put_immutable(
            key, envelope, identity={SHA256_IDENTITY: hash_bytes(envelope)}
        )
        created += outcome == "created"
    return created


def check_in_bucket(
    store: StatementStore, domain: str, version: str, trusted: Mapping[str, PublicKey]
) -> Provenance:
    """The version's published statement, verified against its manifest's bundle."""
    described = layout.read_version_manifest(store, domain, version)
    if described is None:
        raise NotFound(f"{store.bucket}: no version {version} of {domain}")
    key = layout.provenance_key(store, domain, version)
    data = b"".join(_read(store, key))
    proven = verify_provenance(
        data, trusted, sha256=_subject(described), what=f"{store.bucket}/{key}"
    )
    if proven.predicate.get("tree_sha256") != described.tree_sha256:
        raise IntegrityError(f"{store.bucket}/{key}: the statement is about another site tree")
    return proven


def read_statement(store: StatementStore, domain: str, version: str) -> dict[str, Any]:
    """The predicate of a version's published statement, NOT verified (for display only,
    where no key is trusted); NotFound when there is none."""
    key = layout.provenance_key(store, domain, version)
    try:
        envelope = json.loads(b"".join(_read(store, key)))
        statement = json.loads(base64.b64decode(envelope.get("payload", ""), validate=True))
    except (ValueError, AttributeError, binascii.Error):
        raise IntegrityError(f"{store.bucket}/{key}: not a DSSE envelope") from None
    predicate = statement.get("predicate") if isinstance(statement, dict) else None
    if not isinstance(predicate, dict):
        raise IntegrityError(f"{store.bucket}/{key}: not a provenance statement")
    return predicate


def _subject(described: layout.VersionManifest) -> str:
    """The bundle the statement is about: the published one, or for a version rebuilt from a
    delta the bundle it was made from (the statement's tree is checked against it too)."""
    original = getattr(described, "provenance_subject", None)
    return str(original) if original else described.sha256


def _read(store: StatementStore, key: str) -> list[bytes]:
    if store.head(key) is None:
        raise NotFound(
            f"{store.bucket}/{key} does not exist: the version was imported without provenance"
        )
    chunks: list[bytes] = []
    size = 0
    for chunk in store.open_stream(key):
        size += len(chunk)
        if size > MAX_ENVELOPE:
            raise IntegrityError(f"{store.bucket}/{key}: larger than {MAX_ENVELOPE} bytes")
        chunks.append(chunk)
    return chunks
