"""The verification record: the air-gapped side's signed word that it checked a version.

An in-toto Statement v1 in a DSSE envelope (the one owner of that format is
`mirror.transferset.provenance`), signed with this site's receipt key (a file or a key in a
token: `transfer.signing_key` on this side), published by `transfer import` beside the
version it is about (`layout.record_key`). Its subject is the object the bucket holds (its
name `DOMAIN/VERSION/bundle.EXT` and sha256: for a version carried as a delta, the archive
rebuilt here, not the vendor's bundle); its predicate (`PREDICATE_TYPE`, docs/architecture.md
"Verification records") names the set and sequence it came in, the transfer key that signed
the set, the provenance statement it verified (its sha256), the checks that passed
(`CHECKS`), the tool's version and the time. Like the provenance, it is canonical JSON, and
an accreditor checks it with openssl and coreutils alone (`mirror evidence`'s VERIFY.md).

Nothing here opens a file or the bucket: bytes and keys in, bytes or a verified record out.
Promises: `verify_record` checks the envelope and the signature by a trusted receipt key
before the statement is read (`verify_provenance`), then that it is about this object and
this version; any failure is one IntegrityError (exit 5) naming what is wrong.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mirror import __version__
from mirror.errors import IntegrityError
from mirror.transferset.keys import PublicKey, SigningKey
from mirror.transferset.provenance import Provenance, sign_statement, statement, verify_provenance

PREDICATE_TYPE = "urn:mirror:verification:import:v1"
NAME = "verification.intoto.json"
CHECKS = ("signatures", "completeness", "digests", "provenance", "delta-rebuild")
"""What a record may say passed: the set's signature by a trusted transfer key; every file
the signed manifest lists present (SHA256SUMS as it implies); every part's and the
published object's sha256 and size; the carried provenance statement (a trusted transfer
key, the same subject, domain, version and tree); a delta's rebuilt archive holding the
signed tree."""


@dataclass(frozen=True)
class ImportFacts:
    """What the import of one version knew when it was published (the predicate's facts)."""

    domain: str
    version: str
    object_name: str
    sha256: str
    size: int
    tree_sha256: str
    sequence: int
    manifest_sha256: str
    source_id: str
    site: str
    transfer_key_id: str
    provenance_sha256: str | None
    delta_base: str | None
    verified_at: str

    def checks(self) -> list[str]:
        """The checks that passed for this version (`CHECKS`, in that order)."""
        skipped = {"provenance"} if self.provenance_sha256 is None else set()
        skipped |= {"delta-rebuild"} if self.delta_base is None else set()
        return [check for check in CHECKS if check not in skipped]


def subject_name(domain: str, version: str, object_key: str) -> str:
    """`DOMAIN/VERSION/bundle.EXT`: the object's name without the bucket's prefix (as the
    provenance names the bundle)."""
    return f"{domain}/{version}/{object_key.rsplit('/', 1)[-1]}"


def predicate(facts: ImportFacts) -> dict[str, Any]:
    """The record's predicate (docs/architecture.md, "Verification records")."""
    return {
        "domain": facts.domain,
        "version": facts.version,
        "object": {"sha256": facts.sha256, "size": facts.size},
        "tree_sha256": facts.tree_sha256,
        "carried_as": "full" if facts.delta_base is None else "delta",
        "delta_base": facts.delta_base,
        "set": {
            "sequence": facts.sequence,
            "manifest_sha256": facts.manifest_sha256,
            "source_id": facts.source_id,
            "site": facts.site,
        },
        "transfer_key_id": facts.transfer_key_id,
        "provenance_sha256": facts.provenance_sha256,
        "checks": facts.checks(),
        "verified_at": facts.verified_at,
        "tool": {"name": "mirror", "version": __version__},
    }


def make_record(facts: ImportFacts, key: SigningKey) -> bytes:
    """The signed record of `facts`: a DSSE envelope, signed by `key` (in its token when it
    is one)."""
    name = subject_name(facts.domain, facts.version, facts.object_name)
    body = statement(name, facts.sha256, predicate(facts), predicate_type=PREDICATE_TYPE)
    return sign_statement(body, key)


def verify_record(
    envelope: bytes,
    trusted: Mapping[str, PublicKey],
    *,
    domain: str,
    version: str,
    sha256: str,
    what: str = NAME,
) -> Provenance:
    """The record in `envelope`, once signed by a trusted receipt key and about the object
    `sha256` of `domain` `version`; IntegrityError (exit 5) otherwise."""
    record = verify_provenance(envelope, trusted, what=what, predicate_type=PREDICATE_TYPE)
    if record.sha256 != sha256:
        raise IntegrityError(
            f"{what}: the record is about object {record.sha256[:16]}…, and the bucket holds "
            f"{sha256[:16]}… for {domain} {version}"
        )
    said = record.predicate
    subject_domain, _, rest = record.subject_name.partition("/")
    if (said.get("domain"), said.get("version")) != (domain, version) or (
        subject_domain,
        rest.partition("/")[0],
    ) != (domain, version):
        raise IntegrityError(f"{what}: the record is not about {domain} {version}")
    return record
