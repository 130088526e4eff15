"""The receipt: what an import published, carried back to the connected side for `ack`.

`receipt.json` is canonical JSON beside the set (or at --receipt), optionally
signed by the import side's key in `receipt.json.sig`.

Promises:
- `Receipt` is the one typed form of the document; `receipt_bytes` writes it
  canonically and `read_receipt` accepts only a document of that form
  (IntegrityError "not a mirror transfer receipt" otherwise).
- `read_receipt` believes a receipt only when it is signed by a trusted key and the
  signature matches its bytes. An unsigned receipt, or one signed by a key nobody
  trusts, is IntegrityError (exit 5) naming the key id, unless the caller explicitly
  accepts unproven receipts (`accept_unsigned`); the returned status then says
  "unsigned" or "signed by untrusted key …", never "verified".
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from mirror.errors import ConfigError, IntegrityError, NotFound
from mirror.transferset.format import canonical_json, parse_strict_json
from mirror.transferset.keys import PublicKey, read_signature_file

RECEIPT_KIND: Literal["mirror-transfer-receipt"] = "mirror-transfer-receipt"


class ReceiptItem(BaseModel):
    model_config = ConfigDict(frozen=True, strict=True)

    domain: str
    version: str
    sha256: str
    object: str
    status: str
    tree_sha256: str | None = None
    """The tree the published object holds; a version carried as a delta is published as a
    rebuilt archive whose sha256 is not the bundle's, and is acknowledged by its tree."""
    size: int | None = None
    """The published object's size (`sha256` is its digest); receipts written before it was
    carried have none."""


class Receipt(BaseModel):
    model_config = ConfigDict(frozen=True, strict=True)

    format: Literal[1] = 1
    kind: Literal["mirror-transfer-receipt"] = RECEIPT_KIND
    sequence: int
    manifest_sha256: str
    source_id: str = ""
    bucket: str = ""
    prefix: str = ""
    imported_at: str = ""
    signed_by: str | None = None
    items: list[ReceiptItem]

    def to_bytes(self) -> bytes:
        return canonical_json(self.model_dump(mode="json")) + b"\n"

    def listed(self, domain: str, label: str, sha256: str, tree_sha256: str) -> ReceiptItem | None:
        """What the receipt says was published of this version: the same bundle, or (for a
        version carried as a delta) an archive of the same tree; None when it lists neither."""
        for item in self.items:
            if (item.domain, item.version) == (domain, label) and (
                item.sha256 == sha256 or item.tree_sha256 == tree_sha256
            ):
                return item
        return None


def parse_receipt(data: bytes, name: str) -> Receipt:
    document = parse_strict_json(data, name)
    try:
        return Receipt.model_validate(document)
    except ValidationError:
        raise IntegrityError(f"{name}: not a mirror transfer receipt") from None


def read_receipt(
    path: Path, trusted: Mapping[str, PublicKey], *, accept_unsigned: bool = False
) -> tuple[Receipt, str]:
    """The receipt and how its signature stands: "verified (key KEY)", or (only with
    `accept_unsigned`) "unsigned" or "signed by untrusted key KEY (not checked)"."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise NotFound(f"receipt {path} does not exist") from None
    except OSError as exc:
        raise ConfigError(f"cannot read receipt {path}: {exc.strerror}") from None
    receipt = parse_receipt(data, path.name)
    signature_path = path.with_name(path.name + ".sig")
    if not signature_path.exists():
        if accept_unsigned:
            return receipt, "unsigned"
        raise IntegrityError(
            f"receipt {path} is not signed ({signature_path.name} is missing); an unsigned "
            "receipt proves nothing, so nothing was marked delivered",
            hint="sign receipts on the air-gapped side (its transfer.signing_key) and trust "
            "its receipt.pub here in transfer.receipt_keys (or its [[sites]] trusted_keys), "
            "or pass --accept-unsigned",
        )
    key_id, signature = read_signature_file(signature_path)
    key = trusted.get(key_id)
    if key is None:
        if accept_unsigned:
            return receipt, f"signed by untrusted key {key_id} (not checked)"
        raise IntegrityError(
            f"receipt {path} is signed by key {key_id}, which is not trusted here; "
            "nothing was marked delivered",
            hint="if it is the air-gapped side's receipt key, compare its id with "
            "`mirror keys show receipt.pub` there and add receipt.pub to "
            "transfer.receipt_keys (or its [[sites]] trusted_keys)",
        )
    if not key.verify(signature, data):
        raise IntegrityError(f"{signature_path.name}: the signature does not match {path.name}")
    return receipt, f"verified (key {key_id})"
