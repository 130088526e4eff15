"""The version's inventory: an SPDX 2.3 JSON document of its bundle and every file in it.

The one owner of that format. `document` is pure: from what the index and the file listing
kept beside the bundle (`store.digests`) already know, never from reading the bundle, it
gives the document's bytes in pieces, so a site of 200,000 files is written as a stream
and never held whole. The connected side writes it into the set beside the version's
provenance (`outbound/provenance.py`), whose predicate signs its sha256 (`inventory.sha256`);
the import publishes it beside the version (`airgap/layout.inventory_key`) and `mirror
evidence` hands it to an accreditor.

What the document says (validated by the SPDX reference tools, `spdx-tools`, in the tests):
- the package is the bundle: name the domain, `versionInfo` the version label,
  `packageFileName` `bundle.EXT`, its sha256, supplied by the vendor (`supplier`);
- every regular file of the site, `./PATH` in the tree hash's order, with its sha256 and the
  SHA-1 SPDX 2.3 requires of every file (kept from the same hashing pass as the sha256);
  SPDX 2.3 has no field for a file's size, so none is given;
- the package CONTAINS each file, the document DESCRIBES the package;
- `creationInfo.created` is the export's time (the version's `created_at`), and an
  annotation on the package names the vendor's project and job and when the export ran.
Promises: the same facts and files give the same bytes (a version packed again has the same
inventory, so the same provenance); keys are sorted within each object.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

SPDX_VERSION = "SPDX-2.3"
NAMESPACE = "https://spdx.org/spdxdocs/mirror"
PACKAGE_ID = "SPDXRef-Bundle"
DOCUMENT_ID = "SPDXRef-DOCUMENT"

FileEntry = tuple[str, int, str, str]
"""(path, size, sha256, sha1) of one file, in the tree hash's order."""


@dataclass(frozen=True)
class InventoryFacts:
    """What the index knows of a version that its inventory says."""

    domain: str
    version: str
    bundle_format: str
    bundle_sha256: str
    supplier: str
    exported_at: datetime
    tool_version: str
    project_id: str | None = None
    job_id: str | None = None


def supplier_of(base_url: str) -> str:
    """The vendor as an SPDX supplier: the host of the vendor API the bundle came from (the
    settings name no vendor otherwise, and that host is who supplied the bytes)."""
    return f"Organization: {urlsplit(base_url).hostname or base_url}"


def spdx_time(moment: datetime) -> str:
    """SPDX's time format: UTC, whole seconds, `Z`."""
    aware = moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
    return aware.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def document(facts: InventoryFacts, files: Iterable[FileEntry]) -> Iterator[bytes]:
    """The inventory's bytes, in pieces (module docstring)."""
    head = _dumps(_head(facts))
    yield head[:-1] + b',"files":['
    count = 0
    for count, (path, _size, sha256, sha1) in enumerate(files, start=1):
        yield (b"," if count > 1 else b"") + _dumps(_file(count, path, sha256, sha1))
    describes = _relationship(DOCUMENT_ID, "DESCRIBES", PACKAGE_ID)
    yield b'],"relationships":[' + _dumps(describes)
    for number in range(1, count + 1):
        yield b"," + _dumps(_relationship(PACKAGE_ID, "CONTAINS", _file_id(number)))
    yield b"]}\n"


def _head(facts: InventoryFacts) -> dict[str, Any]:
    tool = f"Tool: mirror-{facts.tool_version}"
    created = spdx_time(facts.exported_at)
    return {
        "SPDXID": DOCUMENT_ID,
        "spdxVersion": SPDX_VERSION,
        "dataLicense": "CC0-1.0",
        "name": f"{facts.domain} {facts.version}",
        "documentNamespace": f"{NAMESPACE}/{facts.domain}/{facts.version}-{facts.bundle_sha256}",
        "creationInfo": {"created": created, "creators": [tool]},
        "packages": [_package(facts, tool, created)],
    }


def _package(facts: InventoryFacts, tool: str, created: str) -> dict[str, Any]:
    exported = (
        f"exported by the vendor for project {facts.project_id or 'unknown'} "
        f"(job {facts.job_id or 'unknown'}) and stored by mirror at {created}"
    )
    return {
        "SPDXID": PACKAGE_ID,
        "name": facts.domain,
        "versionInfo": facts.version,
        "packageFileName": f"bundle.{facts.bundle_format}",
        "supplier": facts.supplier,
        "downloadLocation": "NOASSERTION",
        "filesAnalyzed": True,
        "primaryPackagePurpose": "ARCHIVE",
        "checksums": [{"algorithm": "SHA256", "checksumValue": facts.bundle_sha256}],
        "annotations": [
            {
                "annotationDate": created,
                "annotationType": "OTHER",
                "annotator": tool,
                "comment": exported,
            }
        ],
    }


def _file(number: int, path: str, sha256: str, sha1: str) -> dict[str, Any]:
    return {
        "SPDXID": _file_id(number),
        "fileName": f"./{path}",
        "checksums": [
            {"algorithm": "SHA1", "checksumValue": sha1},
            {"algorithm": "SHA256", "checksumValue": sha256},
        ],
    }


def _file_id(number: int) -> str:
    return f"SPDXRef-File-{number}"


def _relationship(element: str, kind: str, related: str) -> dict[str, str]:
    return {"spdxElementId": element, "relationshipType": kind, "relatedSpdxElement": related}


def _dumps(value: dict[str, Any]) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
