"""`chart check --provenance` and `--site`: the extra checks, parsed and printed here."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from mirror.airgap.chart.check import CheckReport
from mirror.airgap.provenance import (
    check_in_bucket,
    check_inventory_in_bucket,
    check_object,
    check_record_in_bucket,
)
from mirror.airgap.s3.objectstore import ObjectStore
from mirror.cli.common import CliContext
from mirror.cli.preflight import transfer_keys
from mirror.errors import MirrorError, NotFound
from mirror.integrity import hash_bytes
from mirror.transferset.keys import load_trusted_keys
from mirror.transferset.provenance import Provenance


def provenance_check(
    cli: CliContext,
    store: ObjectStore,
    report: CheckReport,
    document: dict[str, Any],
    lines: list[str],
) -> MirrorError | None:
    """Verify the version's published statement, then this side's verification record;
    fills `document["provenance"]` and `document["record"]`."""
    try:
        trusted = transfer_keys(cli.settings)
        proven = check_in_bucket(store, report.domain, report.version, trusted)
        check_object(store, report.domain, report.version, proven)
        inventory = check_inventory_in_bucket(store, report.domain, report.version, proven)
    except MirrorError as exc:
        document["provenance"] = {"verified": False, "error": str(exc)}
        return exc
    _provenance_lines(proven.key_id, proven.predicate, document, lines)
    _inventory_line(inventory, document, lines)
    return record_check(cli, store, report, document, lines, proven)


def _provenance_lines(
    key_id: str, said: dict[str, Any], document: dict[str, Any], lines: list[str]
) -> None:
    vendor = said.get("vendor") or {}
    completeness = said.get("completeness") or {}
    acceptance = said.get("acceptance") or {}
    document["provenance"] = {
        "verified": True,
        "key_id": key_id,
        "job_id": vendor.get("job_id"),
        "page_count": vendor.get("page_count"),
        "summary": completeness.get("summary"),
        "accepted_reason": acceptance.get("reason"),
    }
    line = f"provenance: signed by {key_id}, export job {vendor.get('job_id')}"
    if completeness.get("summary"):
        line += f"; {completeness['summary']}"
    if acceptance.get("reason"):
        line += f"; accepted: {acceptance['reason']}"
    lines.append(line)


def _inventory_line(inventory: bytes | None, document: dict[str, Any], lines: list[str]) -> None:
    digest = hash_bytes(inventory) if inventory is not None else None
    document["provenance"]["inventory_sha256"] = digest
    if digest is None:
        lines.append("inventory: none (imported before inventories)")
    else:
        lines.append(
            f"inventory: SPDX, {len(inventory or b'')} bytes, sha256 {digest[:16]}…, signed"
        )


NO_RECORD = (
    "verification record: none (imported before records existed, or on a side without a "
    "receipt key); to sign one, import its set again with `mirror transfer import "
    "--allow-replay SET` where transfer.signing_key is set"
)
NO_RECEIPT_KEYS = (
    "verification record: not checked (no target.receipt_keys: name this site's receipt.pub)"
)


def record_check(
    cli: CliContext,
    store: ObjectStore,
    report: CheckReport,
    document: dict[str, Any],
    lines: list[str],
    proven: Provenance,
) -> MirrorError | None:
    """The second link of the chain: the version's verification record, signed by a key of
    target.receipt_keys, about the object the bucket holds. One the manifest names and is
    gone, one missing for a version whose provenance (`proven`) signs an inventory, or one
    signed by another key, is the error returned (exit 5); none at all (a version imported
    before records) and no receipt keys set are each a line, not a failure."""
    trusted = load_trusted_keys(cli.settings.target.receipt_keys)
    if not trusted:
        document["record"] = {"verified": False, "reason": "no target.receipt_keys"}
        lines.append(NO_RECEIPT_KEYS)
        return None
    try:
        record = check_record_in_bucket(store, report.domain, report.version, trusted, proven)
    except MirrorError as exc:
        document["record"] = {"verified": False, "error": str(exc)}
        return exc
    if record is None:
        document["record"] = {"verified": False, "reason": "none"}
        lines.append(NO_RECORD)
        return None
    _record_lines(record.key_id, record.predicate, document, lines)
    return None


def site_check(
    http: httpx.Client, file: Path, document: dict[str, Any], lines: list[str]
) -> MirrorError | None:
    """Serve and crawl the bundle behind `file`'s link; fills `document["site"]`."""
    from mirror.airgap.chart.site import check_site
    from mirror.airgap.chart.values import read_values_file

    values = read_values_file(file)
    report = check_site(http, values.bundle_url)
    document["site"] = report.as_dict()
    lines.append(report.line())
    return report.error


def history_sites(
    cli: CliContext, store: ObjectStore, domain: str, versions: list[str]
) -> dict[str, str | None]:
    """Each version's completeness summary from its provenance in the bucket: verified
    against target.transfer_keys when some are configured, else marked unverified."""
    trusted = load_trusted_keys(cli.settings.target.accepted_keys())
    found: dict[str, str | None] = {}
    for version in dict.fromkeys(versions):
        found[version] = _site_of(store, domain, version, trusted)
    return found


def _site_of(store: ObjectStore, domain: str, version: str, trusted: dict[str, Any]) -> str | None:
    from mirror.airgap.provenance import read_statement

    try:
        if trusted:
            predicate = check_in_bucket(store, domain, version, trusted).predicate
            note = ""
        else:
            predicate = read_statement(store, domain, version)
            note = " (provenance not verified: no target.transfer_keys)"
    except MirrorError as exc:
        return f"provenance: {exc}" if not isinstance(exc, NotFound) else None
    completeness = predicate.get("completeness") or {}
    acceptance = predicate.get("acceptance") or {}
    summary = completeness.get("summary") or "no completeness check"
    if acceptance.get("reason"):
        summary += f"; accepted: {acceptance['reason']}"
    return summary + note


def _record_lines(
    key_id: str, said: dict[str, Any], document: dict[str, Any], lines: list[str]
) -> None:
    """What `chart check` shows of a verified record."""
    sequence = (said.get("set") or {}).get("sequence")
    document["record"] = {
        "verified": True,
        "key_id": key_id,
        "sequence": sequence,
        "transfer_key_id": said.get("transfer_key_id"),
        "checks": said.get("checks"),
        "verified_at": said.get("verified_at"),
    }
    lines.append(
        f"verification record: signed by {key_id}, set {sequence} checked "
        f"{', '.join(said.get('checks') or [])} at {said.get('verified_at')}"
    )
