"""Helpers the chart tests share: versions published into a test bucket in the bucket's
formats (on the real server or the in-memory one), values, fetching a link, `chart check`."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import boto3
import httpx
from botocore.config import Config

from mirror.airgap import chart, layout
from mirror.airgap.s3.multipart import upload_blob
from mirror.airgap.s3.objectstore import ObjectStore
from mirror.archive import inspect_archive
from mirror.config import TargetSettings
from mirror.errors import IntegrityError
from mirror.integrity import hash_file
from mirror.versions import label_key
from tests.fixtures.archives import sample_site, write_tar

T0 = datetime(2026, 11, 22, 2, 0, 0, tzinfo=UTC)


def offline_presign(signature_version: str, ttl: int) -> str:
    """A real presigned URL (boto3 signs locally, no request is made)."""
    client = boto3.client(
        "s3",
        endpoint_url="http://127.0.0.1:9",
        region_name="us-east-1",
        aws_access_key_id="AKIDEXAMPLE",
        aws_secret_access_key="not-a-real-secret",
        config=Config(signature_version=signature_version, s3={"addressing_style": "path"}),
    )
    return client.generate_presigned_url(
        "get_object",
        Params={"Bucket": "b", "Key": "static-export/docs.example.com/2026-11-21/bundle.tar.gz"},
        ExpiresIn=ttl,
    )


# --- against the S3 server on loopback -------------------------------------------------------

DOMAIN = "docs.example.com"


@dataclass(frozen=True)
class Seeded:
    version: str
    key: str
    sha256: str
    size: int
    archive: Path


def tree_of(archive: Path) -> str:
    """The tree the bundle holds, as an import records it ("0" * 64 for no archive at all,
    which a test may seed to see it refused)."""
    try:
        return inspect_archive(archive).tree_sha256
    except IntegrityError:
        return "0" * 64


def seed_version(
    store: Any,
    workdir: Path,
    version: str,
    *,
    domain: str = DOMAIN,
    in_index: bool = True,
    with_manifest: bool = True,
    archive: Path | None = None,
    tree_sha256: str | None = None,
) -> Seeded:
    """Publish a real tar.gz site as `version` (or the tar.gz `archive`), in the bucket
    formats of INTERFACES.md; its manifest names the tree the archive holds, or
    `tree_sha256` (a manifest that lies about it)."""
    if archive is None:
        site = {**sample_site(), "version.txt": f"{domain} {version}\n".encode()}
        archive = write_tar(workdir / f"{domain}-{version}.tar.gz", site)
    sha256, size = hash_file(archive).sha256, archive.stat().st_size
    key = store.key(domain, version, "bundle.tar.gz")
    with archive.open("rb") as source:
        upload_blob(store, key, source, sha256=sha256, size=size, content_type="application/gzip")
    manifest_key = store.key(domain, version, "manifest.json")
    now = chart.isoformat(datetime.now(UTC))
    if with_manifest:
        manifest = {
            "format": 1,
            "domain": domain,
            "version": version,
            "object": key,
            "sha256": sha256,
            "size": size,
            "archive_format": "tar.gz",
            "tree_sha256": tree_sha256 or tree_of(archive),
            "exported_at": now,
            "imported_at": now,
            "transfer_sequence": 1,
            "source_id": "test",
        }
        document = json.dumps(manifest).encode()
        store.put_immutable(manifest_key, document, identity={"bundle-sha256": sha256})
    if in_index:
        index_key = store.key(domain, "index.json")
        index, etag = store.read_json(index_key)
        index = index or {"format": 1, "domain": domain, "versions": []}
        index["versions"].append(
            {
                "version": version,
                "sha256": sha256,
                "size": size,
                "object": key,
                "manifest": manifest_key,
                "imported_at": now,
            }
        )
        index["versions"].sort(key=lambda entry: label_key(entry["version"]))
        index["updated_at"] = now
        store.write_json(index_key, index, if_match=etag)
    return Seeded(version=version, key=key, sha256=sha256, size=size, archive=archive)


def fetch(url: str) -> bytes:
    with httpx.Client(timeout=30) as http:
        response = http.get(url)
    assert response.status_code == 200, response.text[:200]
    return response.content


def public_read(bucket: str) -> dict[str, Any]:
    """A bucket policy letting anyone inside the network GET the objects (url_mode plain)."""
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Principal": "*",
                "Action": "s3:GetObject",
                "Resource": f"arn:aws:s3:::{bucket}/*",
            }
        ],
    }


def write_for(
    store: ObjectStore, target: TargetSettings, path: Path, version: str | None = None
) -> chart.ChartValues:
    values = chart.render_values(store, target, DOMAIN, version)
    chart.write_values(values, path)
    return values


def sample_values(**changes: object) -> chart.ChartValues:
    fields: dict[str, object] = {
        "domain": "docs.example.com",
        "version": "2026-11-21",
        "key": "static-export/docs.example.com/2026-11-21/bundle.tar.gz",
        "sha256": "ab" * 32,
        "bundle_url": offline_presign("s3v4", 604800),
        "url_mode": "presigned",
        "expires_at": datetime(2026, 11, 29, 2, 0, tzinfo=UTC),
        "ttl": 604800.0,
    }
    fields.update(changes)
    return chart.ChartValues(**fields)  # type: ignore[arg-type]


def check(path: Path, store: ObjectStore, warn: float = 60.0) -> chart.CheckReport:
    with httpx.Client(timeout=30) as http:
        return chart.check_values_file(path, store, http, warn=warn)


def assert_index_complete(store: Any, domain: str = DOMAIN) -> None:
    """Every index entry's bundle and manifest exist, and the bundle hashes to its sha256."""
    index = layout.read_index(store, domain)
    assert index is not None
    for entry in index.versions:
        data = b"".join(store.open_stream(entry.object))
        assert hashlib.sha256(data).hexdigest() == entry.sha256, entry.version
        manifest = layout.read_version_manifest(store, domain, entry.version)
        assert manifest is not None and manifest.sha256 == entry.sha256, entry.version
        assert manifest.object == entry.object, entry.version
