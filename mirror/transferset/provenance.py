"""Signed provenance of a version: an in-toto Statement v1 in a DSSE envelope, bytes in and out.

Where a version came from and what was checked, readable by any in-toto/DSSE tool and by
`openssl` and Python's standard library (README "Checking a version's provenance by hand"):
the statement's subject is the bundle (`DOMAIN/LABEL/bundle.EXT`, its sha256), its
predicate (`PREDICATE_TYPE`) names the site's tree hash, the vendor project, domain and
job, when the export started and completed, the vendor's `pageCount`, the completeness
report's digest and summary, the checks passed, any acceptance and its reason, and the
tool's version. Like `trust.py`, nothing here opens a
file. Promises:

- `sign_statement` signs the DSSE pre-authentication encoding (PAE) of the statement with
  the transfer key (Ed25519); the envelope's `keyid` is the key id `mirror keys show` prints;
- `verify_provenance` checks, in this order, the envelope's form and payload type, a
  signature by a trusted key over the PAE (before the payload is parsed at all), the
  statement's type and predicate type, and that it has one subject, a sha256, exactly the
  expected bundle's when one is expected; any failure is one IntegrityError (exit 5) naming
  what is wrong; `check_about` then compares everything else it says (the subject's name,
  the predicate's domain, version and tree) with the version it is taken for, wherever a
  statement is checked (the import, `chart check --provenance`, `mirror serve`);
- the predicate's `tree_sha256` (`mirror.archive`'s tree hash) is what covers every object
  of the version, the bundle itself or an archive of the same tree in other bytes that a
  delta's import made (`mirror.airgap.provenance.check_object`, and the README's recipe by
  hand);
- the statement and envelope are canonical JSON (sorted keys, two-space indent), so the
  same provenance always has the same bytes and the README's `sed` recipe reads them.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mirror.errors import IntegrityError
from mirror.transferset.format import HEX64, ManifestItem
from mirror.transferset.keys import KEY_ID_LENGTH, PublicKey, SigningKey

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PAYLOAD_TYPE = "application/vnd.in-toto+json"
PREDICATE_TYPE = "urn:mirror:provenance:site:v1"
NAME = "provenance.intoto.json"
MAX_ENVELOPE = 1024 * 1024


@dataclass(frozen=True)
class Provenance:
    """A verified statement: its subject, its predicate, and the key that signed it."""

    subject_name: str
    sha256: str
    predicate: dict[str, Any]
    key_id: str
    envelope: bytes


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE v1 pre-authentication encoding: what is signed, so the type cannot be swapped."""
    kind = payload_type.encode("utf-8")
    return b"DSSEv1 %d %s %d %s" % (len(kind), kind, len(payload), payload)


def _canonical(document: Any) -> bytes:
    return (json.dumps(document, sort_keys=True, indent=2, ensure_ascii=False) + "\n").encode()


def statement(
    subject_name: str,
    sha256: str,
    predicate: Mapping[str, Any],
    *,
    predicate_type: str = PREDICATE_TYPE,
) -> bytes:
    """The canonical bytes of an in-toto Statement v1 about one object (a bundle; the import
    side's verification record, `mirror.airgap.verification`, is about the bucket's object)."""
    return _canonical(
        {
            "_type": STATEMENT_TYPE,
            "subject": [{"name": subject_name, "digest": {"sha256": sha256}}],
            "predicateType": predicate_type,
            "predicate": dict(predicate),
        }
    )


def sign_statement(statement_bytes: bytes, key: SigningKey) -> bytes:
    """The DSSE envelope of `statement_bytes`, signed by `key`."""
    signature = key.sign(pae(PAYLOAD_TYPE, statement_bytes))
    return _canonical(
        {
            "payloadType": PAYLOAD_TYPE,
            "payload": base64.b64encode(statement_bytes).decode("ascii"),
            "signatures": [
                {"keyid": key.key_id, "sig": base64.b64encode(signature).decode("ascii")}
            ],
        }
    )


def verify_provenance(
    envelope: bytes,
    trusted: Mapping[str, PublicKey],
    *,
    sha256: str | None = None,
    what: str = NAME,
    predicate_type: str = PREDICATE_TYPE,
) -> Provenance:
    """The provenance in `envelope`, once signed by a trusted key and, when `sha256` is
    given, about that bundle (else about the one bundle it names, in `Provenance.sha256`).
    `predicate_type`: the statement's kind (a verification record's, for the one owner of
    the envelope's checks)."""
    payload, signatures = _envelope(envelope, what)
    key_id = _signed_by(payload, signatures, trusted, what)
    document = _json(payload, f"{what}: the statement")
    if not isinstance(document, dict) or document.get("_type") != STATEMENT_TYPE:
        raise IntegrityError(f"{what}: not an in-toto Statement v1")
    if document.get("predicateType") != predicate_type:
        raise IntegrityError(
            f"{what}: predicate type {document.get('predicateType')!r}, expected {predicate_type!r}"
        )
    subjects = document.get("subject")
    if not isinstance(subjects, list) or len(subjects) != 1 or not isinstance(subjects[0], dict):
        raise IntegrityError(f"{what}: the statement must have exactly one subject")
    subject = subjects[0]
    digest = subject.get("digest")
    named = digest.get("sha256") if isinstance(digest, dict) else None
    if not isinstance(named, str) or not HEX64.match(named):
        raise IntegrityError(f"{what}: the statement's subject has no sha256")
    if sha256 is not None and named != sha256:
        raise IntegrityError(
            f"{what}: the statement is about bundle {named[:16]}…, not {sha256[:16]}…"
        )
    predicate = document.get("predicate")
    if not isinstance(predicate, dict):
        raise IntegrityError(f"{what}: the statement has no predicate")
    return Provenance(str(subject.get("name", "")), named, predicate, key_id, envelope)


def check_item(envelope: bytes, item: ManifestItem, trusted: Mapping[str, PublicKey]) -> Provenance:
    """The provenance carried for `item`: signed by a trusted key, about the bundle the signed
    manifest names (`provenance.subject_sha256`), which for an item carried whole is the
    item's own bytes (the import hashes them), of the same domain, version and tree."""
    entry = item.provenance
    assert entry is not None
    if item.delta is None and entry.subject_sha256 != item.sha256:
        raise IntegrityError(
            f"{entry.name}: the statement is about bundle {entry.subject_sha256[:16]}…, and "
            f"{item.label} carries bundle {item.sha256[:16]}…"
        )
    proven = verify_provenance(envelope, trusted, sha256=entry.subject_sha256, what=entry.name)
    check_about(proven, item.domain, item.version, item.tree_sha256, what=entry.name)
    return proven


def check_about(
    proven: Provenance, domain: str, version: str, tree_sha256: str, *, what: str
) -> None:
    """IntegrityError (exit 5) unless everything the statement says names this version: its
    subject (`DOMAIN/VERSION/bundle.EXT`), the predicate's domain and version, and its tree.
    The one comparison of a statement with what it describes: the import (`check_item`), and
    the bucket's checks (`mirror.airgap.provenance.check_in_bucket`: `chart check
    --provenance`, `chart history`, `mirror serve`)."""
    said = proven.predicate
    subject_domain, _, rest = proven.subject_name.partition("/")
    subject_version, _, bundle = rest.partition("/")
    if (subject_domain, subject_version) != (domain, version) or not bundle.startswith("bundle."):
        raise IntegrityError(
            f"{what}: the statement's subject is {proven.subject_name!r}, not a bundle of "
            f"{domain} {version}"
        )
    if (said.get("domain"), said.get("version")) != (domain, version):
        raise IntegrityError(
            f"{what}: the statement is about {said.get('domain')} {said.get('version')}, "
            f"not {domain} {version}"
        )
    if said.get("tree_sha256") != tree_sha256:
        raise IntegrityError(f"{what}: the statement is about another site tree than {version}'s")


def _envelope(envelope: bytes, what: str) -> tuple[bytes, list[Any]]:
    if len(envelope) > MAX_ENVELOPE:
        raise IntegrityError(f"{what}: larger than {MAX_ENVELOPE} bytes")
    document = _json(envelope, what)
    if not isinstance(document, dict) or document.get("payloadType") != PAYLOAD_TYPE:
        raise IntegrityError(f"{what}: not a DSSE envelope of type {PAYLOAD_TYPE}")
    signatures = document.get("signatures")
    if not isinstance(signatures, list) or not signatures:
        raise IntegrityError(f"{what}: the envelope has no signature")
    return _b64(document.get("payload"), f"{what}: payload"), signatures


class UntrustedSigner(IntegrityError):
    """Signed by no key trusted here (exit 5, as every IntegrityError): told apart so that a
    caller can name the remedy of its own trust setting (a transfer key retired too soon)."""


def _signed_by(
    payload: bytes, signatures: list[Any], trusted: Mapping[str, PublicKey], what: str
) -> str:
    message = pae(PAYLOAD_TYPE, payload)
    named: list[str] = []
    for entry in signatures:
        if not isinstance(entry, dict):
            continue
        key_id = str(entry.get("keyid", ""))[: KEY_ID_LENGTH * 2]
        named.append(key_id)
        key = trusted.get(key_id)
        if key is not None and key.verify(_b64(entry.get("sig"), f"{what}: signature"), message):
            return key_id
    if not any(k in trusted for k in named):
        known = ", ".join(sorted(trusted)) or "none"
        raise UntrustedSigner(
            f"{what}: signed by key {', '.join(map(repr, named))}, which is not trusted here "
            f"(trusted: {known})"
        )
    raise IntegrityError(
        f"{what}: the signature does not match the statement; it was changed after signing"
    )


def _json(data: bytes, what: str) -> Any:
    try:
        return json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise IntegrityError(f"{what} is not valid JSON") from None


def _b64(value: Any, what: str) -> bytes:
    if not isinstance(value, str):
        raise IntegrityError(f"{what} is missing")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise IntegrityError(f"{what} is not base64") from None
