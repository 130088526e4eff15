"""The SPDX inventory document (`mirror/outbound/inventory.py`), parsed and validated by the SPDX
reference tools (`spdx-tools`), from a real archive's inspection."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest
from spdx_tools.spdx.model import ChecksumAlgorithm, RelationshipType
from spdx_tools.spdx.parser.parse_anything import parse_file
from spdx_tools.spdx.validation.document_validator import validate_full_spdx_document

from mirror.archive import inspect_archive
from mirror.integrity import hash_file
from mirror.outbound.inventory import InventoryFacts, document, spdx_time, supplier_of
from tests.fixtures.archives import make_tar_gz

SITE = {
    "index.html": b"<h1>home</h1>\n",
    "guides/a b.html": b"<p>a space</p>\n",
    "guides/\u00e9t\u00e9.html": b"<p>summer</p>\n",
    'odd/"quoted".txt': b"",
}


def facts_of(bundle: Path, **changes: object) -> InventoryFacts:
    fields: dict[str, object] = {
        "domain": "docs.example.com",
        "version": "2026-11-21",
        "bundle_format": "tar.gz",
        "bundle_sha256": hash_file(bundle).sha256,
        "supplier": supplier_of("https://api.vendor.test:8443/v1"),
        "exported_at": datetime(2026, 11, 21, 4, 5, 6, 789, tzinfo=timezone(timedelta(hours=1))),
        "tool_version": "1.2.3",
        "project_id": "proj_1",
        "job_id": "job_9",
        **changes,
    }
    return InventoryFacts(**fields)  # type: ignore[arg-type]


def written(tmp_path: Path, facts: InventoryFacts, bundle: Path) -> Path:
    report = inspect_archive(bundle)
    assert report.digests is not None
    files = [(p, n, d, s or "") for p, n, d, s in report.digests.with_sha1()]
    out = tmp_path / "inventory.spdx.json"
    out.write_bytes(b"".join(document(facts, files)))
    return out


def test_the_document_is_valid_spdx_2_3_and_says_what_the_bundle_holds(tmp_path: Path) -> None:
    bundle = make_tar_gz(tmp_path / "site.tar.gz", SITE)
    facts = facts_of(bundle)
    parsed = parse_file(str(written(tmp_path, facts, bundle)))
    assert validate_full_spdx_document(parsed) == []
    assert parsed.creation_info.spdx_version == "SPDX-2.3"
    assert parsed.creation_info.created == datetime(2026, 11, 21, 3, 5, 6)  # UTC, whole seconds
    (package,) = parsed.packages
    assert (package.name, package.version) == ("docs.example.com", "2026-11-21")
    assert package.file_name == "bundle.tar.gz"
    assert str(package.supplier) == "Organization: api.vendor.test"
    assert [(c.algorithm, c.value) for c in package.checksums] == [
        (ChecksumAlgorithm.SHA256, facts.bundle_sha256)
    ]
    (note,) = [a for a in parsed.annotations if a.spdx_id == package.spdx_id]
    assert "proj_1" in note.annotation_comment and "job_9" in note.annotation_comment
    got = {f.name: {c.algorithm: c.value for c in f.checksums} for f in parsed.files}
    assert got == {
        f"./{path}": {
            ChecksumAlgorithm.SHA1: hashlib.sha1(data).hexdigest(),
            ChecksumAlgorithm.SHA256: hashlib.sha256(data).hexdigest(),
        }
        for path, data in SITE.items()
    }
    contains = {
        r.related_spdx_element_id
        for r in parsed.relationships
        if r.relationship_type == RelationshipType.CONTAINS and r.spdx_element_id == package.spdx_id
    }
    assert contains == {f.spdx_id for f in parsed.files}


def test_the_same_facts_give_the_same_bytes_and_files_come_in_the_tree_order(
    tmp_path: Path,
) -> None:
    """A version packed again carries the same inventory (so the same provenance)."""
    first = make_tar_gz(tmp_path / "a.tar.gz", SITE)
    again = make_tar_gz(tmp_path / "b.tar.gz", dict(reversed(list(SITE.items()))))
    facts = facts_of(first)
    (tmp_path / "1").mkdir()
    (tmp_path / "2").mkdir()
    one, two = written(tmp_path / "1", facts, first), written(tmp_path / "2", facts, again)
    assert one.read_bytes() == two.read_bytes()
    names = [entry["fileName"] for entry in json.loads(one.read_bytes())["files"]]
    assert names == sorted(names, key=lambda name: name.encode("utf-8"))


def test_an_empty_site_is_a_valid_document_of_a_package_without_files(tmp_path: Path) -> None:
    bundle = make_tar_gz(tmp_path / "empty.tar.gz", {})
    parsed = parse_file(str(written(tmp_path, facts_of(bundle, job_id=None), bundle)))
    assert validate_full_spdx_document(parsed) == []
    assert parsed.files == []


def test_a_document_without_the_sha1_spdx_requires_is_refused_by_the_reference_tools(
    tmp_path: Path,
) -> None:
    """Why every file's SHA-1 is kept (the validator is not lenient): with none, invalid."""
    bundle = make_tar_gz(tmp_path / "site.tar.gz", SITE)
    out = written(tmp_path, facts_of(bundle), bundle)
    doc = json.loads(out.read_bytes())
    for entry in doc["files"]:
        entry["checksums"] = [c for c in entry["checksums"] if c["algorithm"] != "SHA1"]
    out.write_text(json.dumps(doc))
    messages = validate_full_spdx_document(parse_file(str(out)))
    assert any("SHA1" in m.validation_message for m in messages)


@pytest.mark.parametrize(
    ("moment", "said"),
    [
        (datetime(2026, 1, 2, 3, 4, 5, 999999, tzinfo=UTC), "2026-01-02T03:04:05Z"),
        (datetime(2026, 1, 2, 3, 4, 5), "2026-01-02T03:04:05Z"),  # the index's naive UTC
    ],
)
def test_times_are_spdx_times(moment: datetime, said: str) -> None:
    assert spdx_time(moment) == said


def test_the_supplier_is_the_vendor_api_host() -> None:
    assert supplier_of("https://api.mintlify.com") == "Organization: api.mintlify.com"


def test_the_readme_command_of_the_reference_tools_validates_it(tmp_path: Path) -> None:
    """README: `pyspdxtools -i inventory.spdx.json` reads and validates it (exit 0), and
    refuses a document without the SHA-1s."""
    bundle = make_tar_gz(tmp_path / "site.tar.gz", SITE)
    out = written(tmp_path, facts_of(bundle), bundle)
    tool = Path(sys.executable).parent / "pyspdxtools"
    done = subprocess.run(
        [str(tool), "-i", out.name], cwd=tmp_path, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    doc = json.loads(out.read_bytes())
    doc["files"][0]["checksums"].pop(0)
    out.write_text(json.dumps(doc))
    done = subprocess.run(
        [str(tool), "-i", out.name], cwd=tmp_path, capture_output=True, text=True, check=False
    )
    assert done.returncode != 0 and "SHA1" in done.stdout + done.stderr
