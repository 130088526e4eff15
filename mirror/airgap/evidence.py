"""`mirror evidence`: one version's evidence, for someone who checks it without trusting mirror.

An accreditor asks who made a version, who verified it on this side, and when, and wants to
check the answers with tools they already trust. `gather` reads from the bucket the
version's manifest, its provenance statement (the connected side's, signed with a transfer
key) and its verification record (this side's, signed with its receipt key), and verifies
both first, with the keys this side trusts (`target.transfer_keys`, `target.receipt_keys`):
evidence that does not verify is never written (IntegrityError, exit 5; a version without
provenance or without a record is NotFound, exit 3, naming why). `write_evidence` writes
into an empty directory:

    object.sha256             the object's sha256, in `sha256sum -c` form
    provenance.intoto.json    the provenance envelope, as the bucket holds it
    verification.intoto.json  the verification record, as the bucket holds it
    transfer.pub, receipt.pub the public keys that signed them (PEM; ids in VERIFY.md)
    evidence.json             what mirror says of them (domain, version, object, key ids)
    bundle.EXT                the object itself, when asked (`with_object`)
    VERIFY.md                 the commands that check all of it with openssl, coreutils and
                              python3's json module, and what each proves

    inventory.spdx.json       the version's inventory, when its provenance signs one

The import publishes every version's inventory (`outbound/inventory.py`) with its provenance; a
version imported before inventories has none. The one at `layout.inventory_key` is carried
only when the provenance signs its sha256 (predicate `inventory.sha256`), checked here and by
VERIFY.md; one it does not sign is refused (IntegrityError), and VERIFY.md fails without one it
signs. VERIFY.md's commands also hold every piece to the domain, version, object and sha256
its title names (written into them), so evidence of another version does not pass for this one.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mirror.airgap import layout
from mirror.airgap.provenance import (
    StatementStore,
    check_in_bucket,
    check_inventory_in_bucket,
    check_record_in_bucket,
)
from mirror.airgap.verification import PREDICATE_TYPE as RECORD_TYPE
from mirror.errors import ConfigError, NotFound
from mirror.fsutil import atomic_write_bytes
from mirror.integrity import Digest, require_digest
from mirror.transferset.keys import PublicKey, public_pem
from mirror.transferset.provenance import PREDICATE_TYPE as PROVENANCE_TYPE
from mirror.transferset.provenance import Provenance
from mirror.versions import is_label

DIGEST_FILE = "object.sha256"
TRANSFER_PUB = "transfer.pub"
RECEIPT_PUB = "receipt.pub"
SUMMARY = "evidence.json"
VERIFY = "VERIFY.md"


@dataclass(frozen=True)
class Evidence:
    """One version's verified evidence: its manifest, its two signed statements and the
    public keys that signed them."""

    described: layout.VersionManifest
    provenance: Provenance
    record: Provenance
    transfer_key: PublicKey
    receipt_key: PublicKey
    inventory: bytes | None = None

    @property
    def object_name(self) -> str:
        return self.described.object.rsplit("/", 1)[-1]

    def documents(self) -> dict[str, bytes]:
        """File name -> bytes, every file but the object and VERIFY.md."""
        digest_line = f"{self.described.sha256}  {self.object_name}\n"
        inventory = {layout.INVENTORY: self.inventory} if self.inventory is not None else {}
        return {
            **inventory,
            DIGEST_FILE: digest_line.encode(),
            layout.PROVENANCE: self.provenance.envelope,
            layout.RECORD: self.record.envelope,
            TRANSFER_PUB: public_pem(self.transfer_key.key),
            RECEIPT_PUB: public_pem(self.receipt_key.key),
            SUMMARY: (json.dumps(self.as_dict(), indent=2, sort_keys=True) + "\n").encode(),
        }

    def as_dict(self) -> dict[str, Any]:
        described = self.described
        return {
            "domain": described.domain,
            "version": described.version,
            "object": described.object,
            "sha256": described.sha256,
            "size": described.size,
            "transfer_key_id": self.transfer_key.key_id,
            "receipt_key_id": self.receipt_key.key_id,
            "set_sequence": (self.record.predicate.get("set") or {}).get("sequence"),
            "checks": self.record.predicate.get("checks"),
        }


def gather(
    store: StatementStore,
    domain: str,
    version: str,
    transfer_keys: Mapping[str, PublicKey],
    receipt_keys: Mapping[str, PublicKey],
) -> Evidence:
    """The version's evidence, each statement verified with a trusted key (module docstring).
    A `version` that is no version label (`../other/2026-11-21`) is no version here: NotFound,
    before the bucket is asked (it was an unexpected ValueError, exit 1: trial37 D8)."""
    described = layout.read_version_manifest(store, domain, version) if is_label(version) else None
    if described is None:
        raise NotFound(f"{store.bucket}: no version {version} of {domain}")
    proven = check_in_bucket(store, domain, version, transfer_keys)
    record = check_record_in_bucket(store, domain, version, receipt_keys, proven)
    if record is None:
        raise NotFound(
            f"{domain} {version} has no verification record (imported before records existed, "
            "or on a side without a receipt key): no evidence of its verification here",
            hint="import its set again with `mirror transfer import --allow-replay SET` where "
            "transfer.signing_key is set",
        )
    inventory = check_inventory_in_bucket(store, domain, version, proven)
    keys = transfer_keys[proven.key_id], receipt_keys[record.key_id]
    return Evidence(described, proven, record, *keys, inventory=inventory)


def write_evidence(evidence: Evidence, out: Path, object_stream: Any | None = None) -> list[Path]:
    """Write the evidence into `out` (created, or empty: nothing is ever replaced), the object
    too when `object_stream` (its chunks) is given, checked against its digest; the files
    written, VERIFY.md last."""
    _require_empty(out)
    written: list[Path] = []
    for name, data in evidence.documents().items():
        atomic_write_bytes(out / name, data)
        written.append(out / name)
    if object_stream is not None:
        written.append(_write_object(evidence, out, object_stream))
    atomic_write_bytes(out / VERIFY, verify_text(evidence).encode())
    return [*written, out / VERIFY]


def _require_empty(out: Path) -> None:
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ConfigError(
            f"{out} exists and is not an empty directory: evidence never replaces a file",
            hint="name a new directory with --out",
        )
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot create {out}: {exc.strerror}") from None


def _write_object(evidence: Evidence, out: Path, chunks: Any) -> Path:
    """The object, hashed as it is written; IntegrityError unless it is the manifest's."""
    path = out / evidence.object_name
    digest, size = hashlib.sha256(), 0
    with path.open("xb") as handle:
        for chunk in chunks:
            digest.update(chunk)
            size += len(chunk)
            handle.write(chunk)
    described = evidence.described
    where = f"{described.object} (read for the evidence)"
    require_digest(where, Digest(digest.hexdigest(), size), described.sha256, described.size)
    return path


def verify_text(evidence: Evidence) -> str:
    """VERIFY.md for this version: what each file is and the commands that check it."""
    described = evidence.described
    expected = (described.domain, described.version, evidence.object_name, described.sha256)
    return VERIFY_TEMPLATE.format(
        expected=json.dumps(expected),
        domain=described.domain,
        version=described.version,
        object=evidence.object_name,
        sha256=described.sha256,
        transfer_id=evidence.transfer_key.key_id,
        receipt_id=evidence.receipt_key.key_id,
        provenance_type=PROVENANCE_TYPE,
        record_type=RECORD_TYPE,
        checks=", ".join(evidence.record.predicate.get("checks") or []),
    )


VERIFY_TEMPLATE = """\
# Evidence for {domain} {version}

The object `{object}` (sha256 `{sha256}`) and two signed statements about it, in-toto
Statements v1 in DSSE envelopes (Ed25519):

- `provenance.intoto.json` (predicate `{provenance_type}`): made and signed on the
  connected side with the transfer key `transfer.pub` (key id `{transfer_id}`): where the
  site came from, its tree hash, the vendor's export job and page count;
- `verification.intoto.json` (predicate `{record_type}`): signed on the air-gapped side
  with its receipt key `receipt.pub` (key id `{receipt_id}`) when it imported the version:
  the set and sequence it came in, the transfer key that signed the set, the checks that
  passed ({checks}), the tool's version and the time.
- `inventory.spdx.json`, when the provenance signs one (`inventory.sha256`): the
  version's inventory, SPDX 2.3, each file of the site with its sha256. Its package
  (`packageFileName` `bundle.EXT`) is the vendor's bundle, the one the provenance's
  subject names; for a version carried whole that is this object, for one carried as a
  delta it is not: the object is an archive rebuilt here of the same files in other bytes
  (other sha256), and the commands below check the package against the signed subject.

A key id is the first 16 hex digits of the sha256 of the raw 32-byte public key: compare
both with the ids recorded when the keys were made (`mirror keys show`), not with this
file. The commands below need only a POSIX shell, coreutils, OpenSSL 3 and python3 (its
`json` and `hashlib` modules); run them in this directory, with the object beside them
(`mirror evidence --with-object`, or fetched from the bucket). Each ends with an error
(a non-zero exit) when a document, a key or the object is not what it should be.

```sh
set -e
sha256sum -c object.sha256
for key in transfer receipt; do
  printf '%s key id: ' "$key"
  openssl pkey -pubin -in "$key.pub" -outform DER | tail -c 32 | sha256sum | cut -c1-16
done
for doc in provenance verification; do
  python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["payload"])' \\
    "$doc.intoto.json" | base64 -d > "$doc.statement.json"
  python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["signatures"][0]["sig"])' \\
    "$doc.intoto.json" | base64 -d > "$doc.sig"
  printf 'DSSEv1 28 application/vnd.in-toto+json %s ' "$(wc -c < "$doc.statement.json")" \\
    | cat - "$doc.statement.json" > "$doc.pae"
done
openssl pkeyutl -verify -pubin -inkey transfer.pub -rawin \\
  -in provenance.pae -sigfile provenance.sig
openssl pkeyutl -verify -pubin -inkey receipt.pub -rawin \\
  -in verification.pae -sigfile verification.sig
python3 - <<'EOF'
import hashlib, json, sys

DOMAIN, VERSION, OBJECT, SHA256 = {expected}
provenance = json.load(open("provenance.statement.json"))
record = json.load(open("verification.statement.json"))
said, checked = provenance["predicate"], record["predicate"]
digest = hashlib.sha256()
with open(OBJECT, "rb") as handle:
    for block in iter(lambda: handle.read(1 << 20), b""):
        digest.update(block)
sha256 = digest.hexdigest()
envelope = hashlib.sha256(open("provenance.intoto.json", "rb").read()).hexdigest()
full = checked["carried_as"] == "full"
bundle = provenance["subject"][0]["digest"]["sha256"]
passed = set(checked["checks"])
signed = (said.get("inventory") or {{}}).get("sha256")
try:
    spdx = open("inventory.spdx.json", "rb").read()
    inventory, package = hashlib.sha256(spdx).hexdigest(), json.loads(spdx)["packages"][0]
except FileNotFoundError:
    inventory, package = None, {{}}
package_sha256 = [c["checksumValue"] for c in package.get("checksums", [])
                  if c["algorithm"] == "SHA256"]
claims = [
    (f"the object is the one this file names ({{SHA256[:16]}}…)", sha256 == SHA256),
    ("object.sha256 names it", open("object.sha256").read().split() == [SHA256, OBJECT]),
    (f"the provenance is about {{DOMAIN}} {{VERSION}}",
     (said["domain"], said["version"]) == (DOMAIN, VERSION)
     and provenance["subject"][0]["name"].startswith(f"{{DOMAIN}}/{{VERSION}}/")),
    (f"the record is about {{DOMAIN}} {{VERSION}}'s {{OBJECT}}",
     (checked["domain"], checked["version"]) == (DOMAIN, VERSION)
     and record["subject"][0]["name"] == f"{{DOMAIN}}/{{VERSION}}/{{OBJECT}}"),
    ("the provenance is a provenance statement",
     provenance["predicateType"] == "{provenance_type}"),
    ("the record is a verification record", record["predicateType"] == "{record_type}"),
    ("the record is about the object", record["subject"][0]["digest"]["sha256"] == sha256),
    ("the record names this provenance", checked["provenance_sha256"] == envelope),
    ("both are about the same version",
     (said["domain"], said["version"]) == (checked["domain"], checked["version"])),
    ("both are about the same site tree", said["tree_sha256"] == checked["tree_sha256"]),
    ("the record says every check passed",
     {{"signatures", "completeness", "digests", "provenance"}} <= passed),
    ("a whole version is the signed bundle", not full or bundle == sha256),
    ("a delta's rebuild was checked", full or "delta-rebuild" in passed),
    ("the inventory is the one the provenance signs (none if it signs none)",
     inventory == signed),
    ("the inventory's package is the signed bundle", inventory is None
     or package_sha256 == [bundle]),
]
for claim, holds in claims:
    print(f"{{claim}}: {{'OK' if holds else 'FAILED'}}")
print(f"{{DOMAIN}} {{VERSION}}: set {{checked['set']['sequence']}}, "
      f"transfer key {{checked['transfer_key_id']}}, verified {{checked['verified_at']}} "
      f"by mirror {{checked['tool']['version']}}")
if not all(holds for _, holds in claims):
    sys.exit("the evidence does not hold: FAILED")
EOF
```

Every line `OK` and `Signature Verified Successfully` twice: the object is the one the
site verified, both statements are about the domain, version and object this file's
title names (a piece of another version's evidence, even all of them, fails), every
piece the statements name is here (the provenance the record names, the inventory the
provenance signs), and the site says which set and which transfer key it came with. For a
version carried as a delta the object is an archive the site rebuilt (other bytes, the
same files); the README's "Checking a version's provenance by hand" hashes its tree and
compares it with the signed one, without trusting the record.
"""
