"""mirror serve and a version's signed provenance: verified before a byte is cached when keys
are trusted, required with serve.require_provenance, and shown (never trusted) otherwise."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx

from mirror.serve.routes import bundle_path
from mirror.serve.supply import Trust
from mirror.transferset.keys import load_signing_key, load_trusted_keys
from tests.airgap.chart.seeding import DOMAIN, seed_version
from tests.fixtures.memory import MemoryBucket
from tests.fixtures.s3 import new_key_pair
from tests.fixtures.serving import get, publish_statement, raw, serving, until

V1 = "2026-11-20"
VENDOR = {"completed_at": "2026-11-20T01:00:00Z", "job_id": "job-7"}


def test_a_statement_by_a_trusted_key_is_verified_and_shown(
    tmp_path: Path, signing: Any, trusted: dict[str, Any]
) -> None:
    bucket = MemoryBucket()
    seeded = seed_version(bucket, tmp_path, V1)
    summary = "40 pages, 0 broken links"
    publish_statement(
        bucket, signing, DOMAIN, V1, seeded.sha256, vendor=VENDOR, completeness={"summary": summary}
    )
    with serving(bucket, tmp_path / "cache", trust=Trust(trusted, required=True)) as running:
        served = httpx.get(running.url + bundle_path(DOMAIN, V1, "tar.gz"))
        page = httpx.get(running.url + "/").text
        metrics = httpx.get(running.url + "/metrics").text
    assert served.content == seeded.archive.read_bytes()
    assert f"signed by {signing.key_id}" in page and summary in page
    assert "2026-11-20T01:00:00Z" in page
    assert f'mirror_serve_served_version_age_seconds{{domain="{DOMAIN}"}}' in metrics


def test_a_statement_by_another_key_is_refused(tmp_path: Path, trusted: dict[str, Any]) -> None:
    bucket = MemoryBucket()
    seeded = seed_version(bucket, tmp_path, V1)
    (tmp_path / "other").mkdir()
    other = load_signing_key(new_key_pair(tmp_path / "other")[0])
    publish_statement(bucket, other, DOMAIN, V1, seeded.sha256, vendor=VENDOR)
    with serving(bucket, tmp_path / "cache", trust=Trust(trusted)) as running:
        answer = raw(running.port, get(bundle_path(DOMAIN, V1, "tar.gz")))
        ready = httpx.get(running.url + "/readyz")
    assert answer.status == 502 and b"which is not trusted here" in answer.body
    assert seeded.archive.read_bytes()[:32] not in answer.raw
    assert ready.status_code == 503


def test_a_statement_about_another_bundle_of_another_site_is_refused(
    tmp_path: Path, signing: Any, trusted: dict[str, Any]
) -> None:
    """The manifest and the statement agree on a tree the object does not hold: the
    statement is about another bundle, and the object is not that site."""
    bucket = MemoryBucket()
    seeded = seed_version(bucket, tmp_path, V1, tree_sha256="1" * 64)
    publish_statement(bucket, signing, DOMAIN, V1, "0" * 64, vendor=VENDOR)
    with serving(bucket, tmp_path / "cache", trust=Trust(trusted)) as running:
        answer = raw(running.port, get(bundle_path(DOMAIN, V1, "tar.gz")))
    assert answer.status == 502 and b"about bundle" in answer.body
    assert seeded.archive.read_bytes()[:32] not in answer.raw


def test_the_signed_bundle_holding_another_tree_than_signed_is_refused(
    tmp_path: Path, signing: Any, trusted: dict[str, Any]
) -> None:
    """W4 in serve: the statement is about these very bytes (its digest matches), and it and
    the manifest name a tree the bytes do not hold; the digest alone let it be served."""
    bucket = MemoryBucket()
    seeded = seed_version(bucket, tmp_path, V1, tree_sha256="1" * 64)
    publish_statement(bucket, signing, DOMAIN, V1, seeded.sha256, vendor=VENDOR)
    with serving(bucket, tmp_path / "cache", trust=Trust(trusted)) as running:
        answer = raw(running.port, get(bundle_path(DOMAIN, V1, "tar.gz")))
    assert answer.status == 502 and b"the object is not that site" in answer.body
    assert seeded.archive.read_bytes()[:32] not in answer.raw


def test_required_provenance_refuses_a_version_without_one(
    tmp_path: Path, trusted: dict[str, Any]
) -> None:
    bucket = MemoryBucket()
    seed_version(bucket, tmp_path, V1)
    with serving(bucket, tmp_path / "cache", trust=Trust(trusted, required=True)) as running:
        required = raw(running.port, get(bundle_path(DOMAIN, V1, "tar.gz")))
    with serving(bucket, tmp_path / "cache2", trust=Trust(trusted)) as running:
        optional = httpx.get(running.url + bundle_path(DOMAIN, V1, "tar.gz"))
        page = httpx.get(running.url + "/").text
    assert required.status == 502 and b"has no provenance" in required.body
    assert optional.status_code == 200
    assert "<td>none</td>" in page


def test_without_trusted_keys_a_statement_is_shown_as_unverified(
    tmp_path: Path, signing: Any
) -> None:
    bucket = MemoryBucket()
    seeded = seed_version(bucket, tmp_path, V1)
    publish_statement(
        bucket,
        signing,
        DOMAIN,
        V1,
        seeded.sha256,
        vendor=VENDOR,
        completeness={"summary": "12 pages"},
    )
    with serving(bucket, tmp_path / "cache") as running:
        assert httpx.get(running.url + bundle_path(DOMAIN, V1, "tar.gz")).status_code == 200
        page = httpx.get(running.url + "/").text
    assert "present, not verified" in page and "12 pages" in page


def test_keys_load_as_the_cli_loads_them(key_pair: tuple[Path, Path]) -> None:
    assert list(load_trusted_keys([key_pair[1]])) == [load_signing_key(key_pair[0]).key_id]


def test_a_provenance_gone_that_the_manifest_names_is_refused_without_require(
    tmp_path: Path, signing: Any, trusted: dict[str, Any]
) -> None:
    """W1 (trial S22): the manifest says the version was imported with a statement
    (`provenance_subject`) and the statement is gone: a downgrade, refused even though
    serve.require_provenance is unset."""
    bucket = MemoryBucket()
    seeded = seed_version(bucket, tmp_path, V1)
    key = bucket.key(DOMAIN, V1, "manifest.json")
    manifest = {**json.loads(bucket.objects[key].data), "provenance_subject": seeded.sha256}
    bucket.delete(key)
    bucket.put_immutable(key, json.dumps(manifest).encode(), identity={})
    with serving(bucket, tmp_path / "cache", trust=Trust(trusted)) as running:
        answer = raw(running.port, get(bundle_path(DOMAIN, V1, "tar.gz")))
    assert answer.status == 502 and b"refused as a downgrade" in answer.body
    assert seeded.archive.read_bytes()[:32] not in answer.raw


def test_a_refusal_for_a_missing_provenance_ends_once_it_is_back(
    tmp_path: Path, signing: Any, trusted: dict[str, Any]
) -> None:
    """W2 (trial S23): the refusal was held while the bundle's ETag was unchanged, so a
    provenance put back was never read; it is held only while every object it read is."""
    bucket = MemoryBucket()
    seeded = seed_version(bucket, tmp_path, V1)
    path = bundle_path(DOMAIN, V1, "tar.gz")
    trust = Trust(trusted, required=True)
    with serving(bucket, tmp_path / "cache", trust=trust, poll_interval=1.0) as running:
        refused = raw(running.port, get(path))
        publish_statement(bucket, signing, DOMAIN, V1, seeded.sha256, vendor=VENDOR)
        back = until(lambda: httpx.get(running.url + path).status_code == 200)
        served = httpx.get(running.url + path)
    assert refused.status == 502 and b"has no provenance" in refused.body
    assert back and served.content == seeded.archive.read_bytes()


def test_a_sighup_asks_again_for_a_refused_version_at_once(
    tmp_path: Path, signing: Any, trusted: dict[str, Any]
) -> None:
    """A refusal is held for a poll interval (an hour here); SIGHUP (the poller's reread)
    ends that wait: the next request reads the objects again."""
    bucket = MemoryBucket()
    seeded = seed_version(bucket, tmp_path, V1)
    path = bundle_path(DOMAIN, V1, "tar.gz")
    trust = Trust(trusted, required=True)
    with serving(
        bucket, tmp_path / "cache", trust=trust, poll_interval=3600.0, poller=True
    ) as running:
        refused = until(lambda: httpx.get(running.url + path).status_code == 502)
        publish_statement(bucket, signing, DOMAIN, V1, seeded.sha256, vendor=VENDOR)
        held = raw(running.port, get(path))
        running.service.poller.reread()
        back = until(lambda: httpx.get(running.url + path).status_code == 200)
    assert refused and held.status == 502 and b"has no provenance" in held.body
    assert back
