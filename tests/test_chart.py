"""mirror.chart: pure parts (links, history, values text, refresh decisions) and the S3 parts."""

from __future__ import annotations

import hashlib
import http.server
import json
import re
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import httpx
import pytest
import yaml
from botocore.config import Config

from mirror.airgap import chart, layout
from mirror.airgap.objectstore import ObjectStore
from mirror.config import ChartSettings, TargetSettings
from mirror.errors import (
    AuthError,
    ConfigError,
    IntegrityError,
    NotFound,
    OperationFailed,
    TemporaryFailure,
)
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


# --- links -----------------------------------------------------------------------------------


def test_link_expiry_from_sigv4_signature() -> None:
    before = datetime.now(UTC).replace(microsecond=0)
    url = offline_presign("s3v4", 3600)
    expires = chart.link_expiry(url)
    assert expires is not None
    assert before + timedelta(seconds=3600) <= expires <= before + timedelta(seconds=3602)


def test_link_expiry_from_sigv2_signature() -> None:
    before = int(time.time())
    url = offline_presign("s3", 600)
    assert "Expires=" in url and "X-Amz-Date" not in url
    expires = chart.link_expiry(url)
    assert expires is not None
    assert before + 600 <= expires.timestamp() <= before + 602


def test_link_expiry_parameters_are_case_insensitive() -> None:
    url = "https://s3.internal/b/k/bundle.zip?x-amz-date=20261122T020000Z&x-amz-expires=60"
    assert chart.link_expiry(url) == T0 + timedelta(seconds=60)


def test_plain_url_has_no_expiry() -> None:
    assert chart.link_expiry("https://bundles.internal/static-export/d/v/bundle.tar.gz") is None


def test_unreadable_signature_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="unreadable signature"):
        chart.link_expiry("https://h/p/d/v/bundle.zip?X-Amz-Date=yesterday&X-Amz-Expires=60")


def test_link_target_finds_domain_and_version_in_any_url_style() -> None:
    path_style = offline_presign("s3v4", 60)
    target = chart.link_target(path_style)
    assert (target.domain, target.version, target.filename) == (
        "docs.example.com",
        "2026-11-21",
        "bundle.tar.gz",
    )
    assert target.host == "127.0.0.1:9"
    virtual = chart.link_target("https://b.s3.internal/p/docs.example.com/2026-11-21.2/bundle.zip")
    assert (virtual.domain, virtual.version) == ("docs.example.com", "2026-11-21.2")


def test_link_target_refuses_a_foreign_url() -> None:
    with pytest.raises(ConfigError, match="does not point at a mirror bundle"):
        chart.link_target("https://cdn.example.com/site.tar.gz")


# --- current.json history --------------------------------------------------------------------


def history_doc(*steps: tuple[str, str]) -> layout.Current:
    document: layout.Current | None = None
    for index, (action, version) in enumerate(steps):
        at = T0 + timedelta(minutes=index)
        assert action in ("promote", "rollback")
        document = chart.with_promotion(document, "d.example", version, at, action=action)  # type: ignore[arg-type]
    assert document is not None
    return document


def test_promotion_appends_history_and_sets_current() -> None:
    document = history_doc(("promote", "2026-11-20"), ("promote", "2026-11-21"))
    document_json = document.to_json()
    assert document_json["format"] == 1
    assert document_json["domain"] == "d.example"
    assert document_json["current"] == "2026-11-21"
    assert document_json["history"] == [
        {"version": "2026-11-20", "action": "promote", "at": "2026-11-22T02:00:00Z"},
        {"version": "2026-11-21", "action": "promote", "at": "2026-11-22T02:01:00Z"},
    ]


def test_rollback_goes_back_one_promotion_each_time() -> None:
    document = history_doc(("promote", "A"), ("promote", "B"), ("promote", "C"))
    assert chart.rollback_target(document, "d.example") == "B"
    document = history_doc(("promote", "A"), ("promote", "B"), ("promote", "C"), ("rollback", "B"))
    assert chart.rollback_target(document, "d.example") == "A"


def test_rollback_skips_repeated_promotions_of_the_current_version() -> None:
    document = history_doc(("promote", "A"), ("promote", "B"), ("promote", "B"))
    assert chart.rollback_target(document, "d.example") == "A"


def test_rollback_after_a_new_promotion_returns_to_the_one_before_it() -> None:
    document = history_doc(("promote", "A"), ("promote", "B"), ("rollback", "A"), ("promote", "C"))
    assert chart.rollback_target(document, "d.example") == "A"


def test_rollback_with_nothing_before_fails_clearly() -> None:
    with pytest.raises(OperationFailed, match=r"no version of d\.example has been promoted"):
        chart.rollback_target(None, "d.example")
    only = history_doc(("promote", "A"))
    with pytest.raises(OperationFailed, match=r"A is the only version of d\.example ever promoted"):
        chart.rollback_target(only, "d.example")
    back_at_start = history_doc(("promote", "A"), ("promote", "B"), ("rollback", "A"))
    with pytest.raises(OperationFailed, match="nothing to roll back to"):
        chart.rollback_target(back_at_start, "d.example")


def test_rollback_after_promote_rollback_twice_names_the_rolled_back_versions() -> None:
    document = history_doc(
        ("promote", "A"), ("promote", "B"), ("rollback", "A"), ("promote", "B"), ("rollback", "A")
    )
    with pytest.raises(OperationFailed) as failed:
        chart.rollback_target(document, "d.example")
    assert "only version" not in str(failed.value)
    assert "A is the oldest promotion of d.example left; the later ones (B) were rolled back" in (
        str(failed.value)
    )


def test_history_is_bounded() -> None:
    document: layout.Current | None = None
    for index in range(chart.HISTORY_LIMIT + 5):
        document = chart.with_promotion(document, "d", f"v{index}", T0)
    assert document is not None
    history = document.history
    assert len(history) == chart.HISTORY_LIMIT
    assert history[-1].version == f"v{chart.HISTORY_LIMIT + 4}"


def test_history_view_is_newest_first_and_marks_current() -> None:
    document = history_doc(("promote", "A"), ("promote", "B"), ("rollback", "A"))
    view = chart.history_view(document)
    assert [(e.version, e.action, e.current) for e in view] == [
        ("A", "rollback", True),
        ("B", "promote", False),
        ("A", "promote", False),
    ]
    assert chart.history_view(None) == []


# --- values text -----------------------------------------------------------------------------


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


def test_values_text_is_chart_yaml_with_expiry_and_sha_comments() -> None:
    values = sample_values()
    text = values.text()
    lines = text.splitlines()
    assert lines[0] == "# bundleUrl expires 2026-11-29T02:00:00Z (presigned, 7d)"
    assert lines[1] == f"# bundle sha256 {'ab' * 32} (docs.example.com 2026-11-21)"
    assert lines[2] == "# rendered by: mirror chart values docs.example.com --pin 2026-11-21"
    document = yaml.safe_load(text)
    assert document == {
        "staticExport": {
            "enabled": True,
            "bundleUrl": values.bundle_url,
            "version": "2026-11-21",
        }
    }
    assert isinstance(document["staticExport"]["version"], str)  # quoted, not a YAML date
    assert all(len(line) < 2000 for line in lines)  # URL on one line, never folded
    assert sum(1 for line in lines if "bundleUrl:" in line) == 1


def test_plain_values_say_the_link_does_not_expire() -> None:
    values = sample_values(url_mode="plain", expires_at=None, ttl=None)
    assert values.text().startswith("# bundleUrl is a plain URL and does not expire\n")


def test_plain_url_needs_public_base_url() -> None:
    key = "static-export/d/v/bundle.tar.gz"
    with pytest.raises(ConfigError, match="public_base_url is empty"):
        chart.plain_url(TargetSettings(url_mode="plain"), key)
    target = TargetSettings(url_mode="plain", public_base_url="http://minio.internal:9000/b/")
    assert chart.plain_url(target, key) == "http://minio.internal:9000/b/" + key


def test_written_values_read_back(tmp_path: Path) -> None:
    values = sample_values()
    out = tmp_path / "sub" / "values.yaml"
    chart.write_values(values, out)
    read = chart.read_values_file(out)
    assert read == chart.ValuesFile(
        bundle_url=values.bundle_url, version="2026-11-21", enabled=True
    )
    assert [p.name for p in out.parent.iterdir()] == ["values.yaml"]


def test_unquoted_date_version_still_reads_as_its_label(tmp_path: Path) -> None:
    path = tmp_path / "v.yaml"
    path.write_text(
        "staticExport:\n  bundleUrl: http://h/p/d/2026-11-21/bundle.zip\n  version: 2026-11-21\n"
    )
    assert chart.read_values_file(path).version == "2026-11-21"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "does not exist"),
        ("staticExport: [unclosed\n", "not valid YAML at line"),
        ("other: 1\n", "has no staticExport.bundleUrl"),
        ("staticExport:\n  enabled: true\n", "has no staticExport.bundleUrl"),
        ("- a list\n", "has no staticExport.bundleUrl"),
    ],
)
def test_bad_values_files_are_config_errors(
    tmp_path: Path, content: str | None, message: str
) -> None:
    path = tmp_path / "values.yaml"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ConfigError, match=message):
        chart.read_values_file(path)


# --- refresh decisions -----------------------------------------------------------------------


def test_values_paths_per_domain_or_one_file() -> None:
    assert chart.values_paths("/v/{domain}.yaml", ["a.example", "b.example"]) == {
        "a.example": Path("/v/a.example.yaml"),
        "b.example": Path("/v/b.example.yaml"),
    }
    assert chart.values_paths("/v/values.yaml", ["a.example"]) == {
        "a.example": Path("/v/values.yaml")
    }
    with pytest.raises(ConfigError, match="has no \\{domain\\}"):
        chart.values_paths("/v/values.yaml", ["a.example", "b.example"])
    with pytest.raises(ConfigError, match="values_path is not set"):
        chart.values_paths("", ["a.example"])
    with pytest.raises(ConfigError, match="no domain to refresh"):
        chart.values_paths("/v/{domain}.yaml", [])


def refresh_case(tmp_path: Path, values: chart.ChartValues | None) -> Path:
    path = tmp_path / "values.yaml"
    if values is not None:
        chart.write_values(values, path)
    return path


def test_refresh_reason(tmp_path: Path) -> None:
    presigned = TargetSettings()
    plain = TargetSettings(url_mode="plain", public_base_url="http://h/b")
    now = datetime.now(UTC)
    day = 86400.0
    fresh = sample_values(bundle_url=offline_presign("s3v4", 3 * 86400))

    def reason(
        values: chart.ChartValues | None, version: str, target: TargetSettings
    ) -> str | None:
        path = refresh_case(tmp_path, values)
        return chart.refresh_reason(path, "docs.example.com", version, target, day, now)

    assert reason(None, "2026-11-21", presigned) == "missing"
    assert reason(fresh, "2026-11-21", presigned) is None
    assert reason(fresh, "2026-11-22", presigned) == "version 2026-11-21 -> 2026-11-22"
    soon = sample_values(bundle_url=offline_presign("s3v4", 3600))
    assert re.fullmatch(
        r"link expires in (1h|59m\d*s?)", reason(soon, "2026-11-21", presigned) or ""
    )
    assert reason(fresh, "2026-11-21", plain) == "url_mode is now plain"
    plain_values = sample_values(
        url_mode="plain",
        bundle_url="http://h/b/static-export/docs.example.com/2026-11-21/bundle.tar.gz",
        expires_at=None,
        ttl=None,
    )
    assert reason(plain_values, "2026-11-21", plain) is None
    assert reason(plain_values, "2026-11-21", presigned) == "url_mode is now presigned"
    (tmp_path / "values.yaml").write_text("nonsense: [\n")
    assert (
        chart.refresh_reason(tmp_path / "values.yaml", "docs.example.com", "v", presigned, day, now)
        == "unreadable"
    )


def test_refresh_reason_for_an_expired_link(tmp_path: Path) -> None:
    values = sample_values(bundle_url=offline_presign("s3v4", 60))
    path = refresh_case(tmp_path, values)
    later = datetime.now(UTC) + timedelta(hours=2)
    reason = chart.refresh_reason(
        path, "docs.example.com", "2026-11-21", TargetSettings(), 0, later
    )
    assert reason is not None and reason.startswith("link expired 1h5")


# --- against the S3 server on loopback -------------------------------------------------------

DOMAIN = "docs.example.com"


@dataclass(frozen=True)
class Seeded:
    version: str
    key: str
    sha256: str
    size: int
    archive: Path


def seed_version(
    store: ObjectStore,
    workdir: Path,
    version: str,
    *,
    domain: str = DOMAIN,
    in_index: bool = True,
    with_manifest: bool = True,
) -> Seeded:
    """Publish a real tar.gz site as `version`, in the bucket formats of INTERFACES.md."""
    site = {**sample_site(), "version.txt": f"{domain} {version}\n".encode()}
    archive = write_tar(workdir / f"{domain}-{version}.tar.gz", site)
    sha256, size = hash_file(archive).sha256, archive.stat().st_size
    key = store.key(domain, version, "bundle.tar.gz")
    with archive.open("rb") as source:
        store.upload_blob(key, source, sha256=sha256, size=size, content_type="application/gzip")
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
            "tree_sha256": "0" * 64,
            "exported_at": now,
            "imported_at": now,
            "transfer_sequence": 1,
            "source_id": "test",
        }
        store.client.put_object(
            Bucket=store.bucket, Key=manifest_key, Body=json.dumps(manifest).encode()
        )
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


@pytest.fixture
def two_versions(object_store: ObjectStore, tmp_path: Path) -> tuple[Seeded, Seeded]:
    return (
        seed_version(object_store, tmp_path, "2026-11-20"),
        seed_version(object_store, tmp_path, "2026-11-21"),
    )


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


def test_values_for_the_newest_version_when_nothing_is_promoted(
    object_store: ObjectStore, target_settings: TargetSettings, two_versions: tuple[Seeded, Seeded]
) -> None:
    _, newest = two_versions
    target = target_settings.model_copy(update={"presign_ttl": 7200.0})
    before = datetime.now(UTC)
    values = chart.render_values(object_store, target, DOMAIN)
    assert values.version == newest.version
    assert values.sha256 == newest.sha256
    assert values.key == newest.key
    assert values.url_mode == "presigned"
    assert values.expires_at is not None
    assert abs((values.expires_at - before).total_seconds() - 7200) < 5
    signed = chart.link_expiry(values.bundle_url)
    assert signed is not None and abs((signed - values.expires_at).total_seconds()) <= 2
    assert values.text().splitlines()[0].endswith("(presigned, 2h)")
    assert fetch(values.bundle_url) == newest.archive.read_bytes()


def test_values_for_a_pinned_version(
    object_store: ObjectStore, target_settings: TargetSettings, two_versions: tuple[Seeded, Seeded]
) -> None:
    older, _ = two_versions
    values = chart.render_values(object_store, target_settings, DOMAIN, older.version)
    assert (values.version, values.sha256) == (older.version, older.sha256)
    document = yaml.safe_load(values.text())
    assert document["staticExport"]["version"] == older.version
    assert fetch(document["staticExport"]["bundleUrl"]) == older.archive.read_bytes()


def test_values_follow_the_promoted_version(
    object_store: ObjectStore, target_settings: TargetSettings, two_versions: tuple[Seeded, Seeded]
) -> None:
    older, _ = two_versions
    chart.promote(object_store, DOMAIN, older.version)
    assert chart.current_version(object_store, DOMAIN) == older.version
    assert chart.render_values(object_store, target_settings, DOMAIN).version == older.version


def test_plain_values_point_at_the_public_base_url(
    object_store: ObjectStore,
    target_settings: TargetSettings,
    two_versions: tuple[Seeded, Seeded],
    s3_endpoint: str,
    s3_admin_client: Any,
    tmp_path: Path,
) -> None:
    _, newest = two_versions
    base = f"{s3_endpoint}/{target_settings.bucket}"
    path = tmp_path / "plain.yaml"
    target = target_settings.model_copy(update={"url_mode": "plain", "public_base_url": base})
    chart.write_values(chart.render_values(object_store, target, DOMAIN), path)
    refused = check(path, object_store)
    assert refused.status == "refused" and refused.exit_code == 4  # bucket not readable yet
    s3_admin_client.put_bucket_policy(  # the import identity may not: an operator's task
        Bucket=target_settings.bucket, Policy=json.dumps(public_read(target_settings.bucket))
    )
    target = target_settings.model_copy(update={"url_mode": "plain", "public_base_url": base})
    values = chart.render_values(object_store, target, DOMAIN)
    assert values.bundle_url == f"{base}/{newest.key}"
    assert values.expires_at is None
    assert "does not expire" in values.text().splitlines()[0]
    assert fetch(values.bundle_url) == newest.archive.read_bytes()
    report = check(path, object_store)
    assert report.error is None and report.expires_at is None
    assert "does not expire" in report.lines()[0]
    no_base = target_settings.model_copy(update={"url_mode": "plain"})
    with pytest.raises(ConfigError, match="public_base_url"):
        chart.render_values(object_store, no_base, DOMAIN)


def test_unknown_domain_and_version_are_not_found_with_the_versions_that_exist(
    object_store: ObjectStore, target_settings: TargetSettings, two_versions: tuple[Seeded, Seeded]
) -> None:
    with pytest.raises(NotFound, match=r"domain other\.example has no versions") as missing:
        chart.render_values(object_store, target_settings, "other.example")
    assert missing.value.exit_code == 3
    with pytest.raises(
        NotFound,
        match=r"version 2026-01-01 of docs\.example\.com does not exist; "
        r"versions: 2026-11-20, 2026-11-21$",
    ):
        chart.render_values(object_store, target_settings, DOMAIN, "2026-01-01")


def test_a_version_without_its_manifest_is_incomplete(
    object_store: ObjectStore, target_settings: TargetSettings, tmp_path: Path
) -> None:
    seed_version(object_store, tmp_path, "2026-11-20")
    seed_version(object_store, tmp_path, "2026-11-21", with_manifest=False)
    with pytest.raises(NotFound, match=r"2026-11-21 of docs\.example\.com is incomplete"):
        chart.render_values(object_store, target_settings, DOMAIN, "2026-11-21")
    with pytest.raises(NotFound, match="is incomplete"):
        chart.promote(object_store, DOMAIN, "2026-11-21")
    seed_version(object_store, tmp_path, "2026-11-22", in_index=False)
    with pytest.raises(NotFound, match="does not exist"):
        chart.promote(object_store, DOMAIN, "2026-11-22")


def test_promote_rollback_history(
    object_store: ObjectStore, two_versions: tuple[Seeded, Seeded], tmp_path: Path
) -> None:
    third = seed_version(object_store, tmp_path, "2026-11-21.2")
    clock = iter(T0 + timedelta(minutes=m) for m in range(10))

    def now() -> datetime:
        return next(clock)

    for version in ("2026-11-20", "2026-11-21", third.version):
        chart.promote(object_store, DOMAIN, version, now=now)
    again = chart.promote(object_store, DOMAIN, third.version, now=now)
    assert len(again.history) == 3  # promoting the current version changes nothing

    assert chart.rollback(object_store, DOMAIN, now=now).current == "2026-11-21"
    assert chart.rollback(object_store, DOMAIN, now=now).current == "2026-11-20"
    with pytest.raises(OperationFailed, match="nothing to roll back to") as nothing:
        chart.rollback(object_store, DOMAIN, now=now)
    assert nothing.value.exit_code == 1

    document, _ = object_store.read_json(object_store.key(DOMAIN, "current.json"))
    assert document is not None
    assert document["format"] == 1 and document["domain"] == DOMAIN
    assert document["current"] == "2026-11-20"
    view = chart.history_view(layout.Current.model_validate(document))
    assert [(e.version, e.action, e.current) for e in view] == [
        ("2026-11-20", "rollback", True),
        ("2026-11-21", "rollback", False),
        ("2026-11-21.2", "promote", False),
        ("2026-11-21", "promote", False),
        ("2026-11-20", "promote", False),
    ]
    assert view[-1].at == "2026-11-22T02:00:00Z"


def test_concurrent_change_makes_the_slower_writer_fail_temporarily(
    object_store: ObjectStore,
    s3_client: Any,
    target_settings: TargetSettings,
    two_versions: tuple[Seeded, Seeded],
    tmp_path: Path,
) -> None:
    older, newest = two_versions
    third = seed_version(object_store, tmp_path, "2026-11-22")
    chart.promote(object_store, DOMAIN, older.version)
    chart.promote(object_store, DOMAIN, newest.version)
    other = ObjectStore(s3_client, target_settings.bucket, target_settings.prefix)

    def meanwhile_someone_else_promotes() -> datetime:
        # Runs after this rollback read current.json and before it writes it back.
        chart.promote(other, DOMAIN, third.version)
        return T0

    with pytest.raises(TemporaryFailure, match="changed by someone else") as lost:
        chart.rollback(object_store, DOMAIN, now=meanwhile_someone_else_promotes)
    assert lost.value.exit_code == 75
    document, _ = object_store.read_json(object_store.key(DOMAIN, "current.json"))
    assert document is not None and document["current"] == third.version
    assert [entry["version"] for entry in document["history"]] == [
        older.version,
        newest.version,
        third.version,
    ]


def test_concurrent_first_promotions_do_not_overwrite_each_other(
    object_store: ObjectStore,
    s3_client: Any,
    target_settings: TargetSettings,
    two_versions: tuple[Seeded, Seeded],
) -> None:
    older, newest = two_versions
    other = ObjectStore(s3_client, target_settings.bucket, target_settings.prefix)

    def meanwhile() -> datetime:
        chart.promote(other, DOMAIN, older.version)
        return T0

    with pytest.raises(TemporaryFailure):
        chart.promote(object_store, DOMAIN, newest.version, now=meanwhile)
    assert chart.current_version(object_store, DOMAIN) == older.version
    chart.promote(object_store, DOMAIN, newest.version)  # run again: now it wins
    assert chart.current_version(object_store, DOMAIN) == newest.version


def test_a_concurrent_promotion_of_the_same_version_is_not_a_conflict(
    object_store: ObjectStore,
    s3_client: Any,
    target_settings: TargetSettings,
    two_versions: tuple[Seeded, Seeded],
) -> None:
    """Two imports of one set with --promote: the slower finds its version already current
    and succeeds without writing (it used to exit 75, and running it again exit 5)."""
    older, newest = two_versions
    chart.promote(object_store, DOMAIN, older.version)
    other = ObjectStore(s3_client, target_settings.bucket, target_settings.prefix)

    def meanwhile_the_other_import_promotes() -> datetime:
        chart.promote(other, DOMAIN, newest.version)
        return T0

    updated = chart.promote(
        object_store, DOMAIN, newest.version, now=meanwhile_the_other_import_promotes
    )
    assert updated.current == newest.version
    document, _ = object_store.read_json(object_store.key(DOMAIN, "current.json"))
    assert document is not None
    assert [entry["version"] for entry in document["history"]] == [older.version, newest.version]


# --- chart check -----------------------------------------------------------------------------


def check(path: Path, store: ObjectStore, warn: float = 60.0) -> chart.CheckReport:
    with httpx.Client(timeout=30) as http:
        return chart.check_values_file(path, store, http, warn=warn)


def test_the_read_only_identity_renders_and_checks_but_cannot_promote(
    s3_read_only_client: Any,
    target_settings: TargetSettings,
    two_versions: tuple[Seeded, Seeded],
    tmp_path: Path,
) -> None:
    """The cluster's keys (Read and List only, as the README sets SeaweedFS up) are enough
    to render values and check their link; changing the bucket is refused, exit 4."""
    _, newest = two_versions
    reader = ObjectStore(s3_read_only_client, target_settings.bucket, target_settings.prefix)
    path = tmp_path / "values.yaml"
    values = write_for(reader, target_settings, path)
    assert values.version == newest.version
    assert fetch(values.bundle_url) == newest.archive.read_bytes()
    report = check(path, reader)
    assert report.error is None and report.exit_code == 0, report.error
    with pytest.raises(AuthError) as refused:
        chart.promote(reader, DOMAIN, newest.version)
    assert refused.value.exit_code == 4
    assert reader.read_json(reader.key(DOMAIN, "current.json")) == (None, None)


def test_check_passes_on_a_fresh_file(
    object_store: ObjectStore,
    target_settings: TargetSettings,
    two_versions: tuple[Seeded, Seeded],
    tmp_path: Path,
) -> None:
    _, newest = two_versions
    path = tmp_path / "values.yaml"
    write_for(object_store, target_settings, path)
    report = check(path, object_store, warn=86400)
    assert report.error is None, report.error
    assert report.exit_code == 0
    assert report.actual_sha256 == report.expected_sha256 == newest.sha256
    assert report.size == newest.size
    assert report.seconds_left is not None and report.seconds_left > 6 * 86400
    assert report.as_dict()["status"] == "ok"
    (line,) = report.lines()
    assert line.startswith(f"ok: {DOMAIN} {newest.version} from ")
    assert "X-Amz" not in line and "Signature" not in line

    document = yaml.safe_load(path.read_text())
    document["staticExport"]["enabled"] = False
    path.write_text(yaml.safe_dump(document))
    disabled = check(path, object_store, warn=86400)
    assert disabled.error is None and disabled.as_dict()["enabled"] is False
    assert disabled.lines()[1].startswith("note: staticExport.enabled is not true")


def test_check_warns_when_the_link_expires_soon(
    object_store: ObjectStore,
    target_settings: TargetSettings,
    two_versions: tuple[Seeded, Seeded],
    tmp_path: Path,
) -> None:
    path = tmp_path / "values.yaml"
    write_for(object_store, target_settings.model_copy(update={"presign_ttl": 3600.0}), path)
    report = check(path, object_store, warn=86400)
    assert report.status == "expiring"
    assert isinstance(report.error, OperationFailed) and report.exit_code == 1
    assert re.search(r" expires \S+Z, in (1h|59m\d*s?) \(warning at 1d\)", str(report.error))
    assert report.actual_sha256 == report.expected_sha256  # the bytes were still checked
    assert check(path, object_store, warn=600).error is None


def test_check_fails_on_an_expired_link(
    object_store: ObjectStore,
    target_settings: TargetSettings,
    two_versions: tuple[Seeded, Seeded],
    tmp_path: Path,
) -> None:
    path = tmp_path / "values.yaml"
    write_for(object_store, target_settings.model_copy(update={"presign_ttl": 1.0}), path)
    time.sleep(2.1)
    report = check(path, object_store)
    assert report.status == "expired"
    assert report.exit_code == 1
    message = str(report.error)
    assert "expired at" in message and "ago" in message and "chart values" in message
    assert "\n" not in message


def test_check_fails_on_a_replaced_object(
    object_store: ObjectStore,
    target_settings: TargetSettings,
    two_versions: tuple[Seeded, Seeded],
    tmp_path: Path,
) -> None:
    _, newest = two_versions
    path = tmp_path / "values.yaml"
    write_for(object_store, target_settings, path)
    tampered = newest.archive.read_bytes() + b"\0"
    object_store.client.put_object(Bucket=object_store.bucket, Key=newest.key, Body=tampered)
    report = check(path, object_store)
    assert report.status == "mismatch"
    assert isinstance(report.error, IntegrityError) and report.exit_code == 5
    assert "replaced or damaged" in str(report.error)
    assert report.actual_sha256 == hashlib.sha256(tampered).hexdigest()


def test_check_fails_on_a_missing_version(
    object_store: ObjectStore, two_versions: tuple[Seeded, Seeded], tmp_path: Path
) -> None:
    url, _ = object_store.presign_get(object_store.key(DOMAIN, "2030-01-01", "bundle.tar.gz"), 3600)
    path = tmp_path / "values.yaml"
    path.write_text(
        yaml.safe_dump(
            {"staticExport": {"enabled": True, "bundleUrl": url, "version": "2030-01-01"}}
        )
    )
    report = check(path, object_store)
    assert report.status == "missing"
    assert isinstance(report.error, NotFound) and report.exit_code == 3
    assert "2030-01-01 of docs.example.com does not exist" in str(report.error)
    assert "2026-11-20, 2026-11-21" in str(report.error)


def test_check_fails_when_the_object_is_gone(
    object_store: ObjectStore,
    target_settings: TargetSettings,
    two_versions: tuple[Seeded, Seeded],
    tmp_path: Path,
) -> None:
    _, newest = two_versions
    path = tmp_path / "values.yaml"
    write_for(object_store, target_settings, path)
    object_store.client.delete_object(Bucket=object_store.bucket, Key=newest.key)
    report = check(path, object_store)
    assert report.status == "missing" and report.exit_code == 3
    assert "HTTP 404" in str(report.error)


def test_check_fails_when_the_file_names_another_version(
    object_store: ObjectStore,
    target_settings: TargetSettings,
    two_versions: tuple[Seeded, Seeded],
    tmp_path: Path,
) -> None:
    path = tmp_path / "values.yaml"
    values = write_for(object_store, target_settings, path)
    document = values.document()
    document["staticExport"]["version"] = "2026-11-20"
    path.write_text(yaml.safe_dump(document))
    report = check(path, object_store)
    assert report.status == "version-mismatch" and report.exit_code == 5
    assert "says version 2026-11-20 but its bundleUrl points at" in str(report.error)


class _S3Refusal(http.server.BaseHTTPRequestHandler):
    """Answers every GET like S3 refusing a presigned link."""

    code = "AccessDenied"
    message = "Request has expired"

    def do_GET(self) -> None:
        body = (
            '<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>'
            f"{self.code}</Code><Message>{self.message}</Message></Error>"
        ).encode()
        self.send_response(403)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def refusing_server() -> Iterator[tuple[str, type[_S3Refusal]]]:
    handler = type("Refusal", (_S3Refusal,), {})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", handler
    server.shutdown()
    server.server_close()


def test_check_reads_the_servers_expired_refusal(
    object_store: ObjectStore,
    two_versions: tuple[Seeded, Seeded],
    tmp_path: Path,
    refusing_server: tuple[str, type[_S3Refusal]],
) -> None:
    """A server whose clock is ahead refuses a link that looks valid here: still 'expired'."""
    base, handler = refusing_server
    signed = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    url = (
        f"{base}/bucket/static-export/{DOMAIN}/2026-11-21/bundle.tar.gz"
        f"?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Date={signed}&X-Amz-Expires=604800"
    )
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump({"staticExport": {"enabled": True, "bundleUrl": url}}))
    report = check(path, object_store)
    assert report.status == "expired" and report.exit_code == 1
    handler.code, handler.message = "SignatureDoesNotMatch", "The request signature we calculated"
    report = check(path, object_store)
    assert report.status == "refused" and report.exit_code == 4
    assert "SignatureDoesNotMatch" in str(report.error)


def test_check_reports_an_unreachable_server(
    object_store: ObjectStore, two_versions: tuple[Seeded, Seeded], tmp_path: Path
) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"http://127.0.0.1:{port}/b/static-export/{DOMAIN}/2026-11-21/bundle.tar.gz"
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump({"staticExport": {"enabled": True, "bundleUrl": url}}))
    report = check(path, object_store)
    assert report.status == "unreachable" and report.exit_code == 75


# --- refresh ---------------------------------------------------------------------------------


def hook_settings(tmp_path: Path, hook: str = "", before: float = 86400.0) -> ChartSettings:
    return ChartSettings(
        values_path=str(tmp_path / "values" / "{domain}.yaml"),
        on_change=hook,
        refresh_before=before,
    )


def test_refresh_renders_missing_and_expiring_files_and_runs_the_hook(
    object_store: ObjectStore,
    target_settings: TargetSettings,
    two_versions: tuple[Seeded, Seeded],
    tmp_path: Path,
) -> None:
    older, newest = two_versions
    marker = tmp_path / "hook.out"
    hook = f"sh -c 'echo \"$MIRROR_DOMAIN $MIRROR_VERSION $MIRROR_VALUES_FILE\" >> {marker}'"
    settings = hook_settings(tmp_path, hook, before=2 * 3600)
    values_file = tmp_path / "values" / f"{DOMAIN}.yaml"

    short = target_settings.model_copy(update={"presign_ttl": 3600.0})
    (first,) = chart.refresh_values(object_store, short, settings, [DOMAIN])
    assert (first.action, first.reason, first.version) == ("rendered", "missing", newest.version)
    assert first.hook_exit == 0
    assert marker.read_text() == f"{DOMAIN} {newest.version} {values_file}\n"
    assert chart.read_values_file(values_file).version == newest.version

    (second,) = chart.refresh_values(object_store, target_settings, settings, [DOMAIN])
    assert second.action == "rendered"
    assert re.fullmatch(r"link expires in (1h|59m\d*s?)", second.reason)
    assert len(marker.read_text().splitlines()) == 2
    expiry = chart.link_expiry(chart.read_values_file(values_file).bundle_url)
    assert expiry is not None and expiry > datetime.now(UTC) + timedelta(days=6)

    (third,) = chart.refresh_values(object_store, target_settings, settings, [DOMAIN])
    assert (third.action, third.hook_exit) == ("fresh", None)
    assert len(marker.read_text().splitlines()) == 2

    chart.promote(object_store, DOMAIN, older.version)
    (fourth,) = chart.refresh_values(object_store, target_settings, settings, [DOMAIN])
    assert (fourth.action, fourth.reason) == (
        "rendered",
        f"version {newest.version} -> {older.version}",
    )
    assert marker.read_text().splitlines()[-1].split()[1] == older.version
    assert check(values_file, object_store).error is None


def test_refresh_reports_a_failing_hook(
    object_store: ObjectStore,
    target_settings: TargetSettings,
    two_versions: tuple[Seeded, Seeded],
    tmp_path: Path,
) -> None:
    settings = hook_settings(tmp_path, "sh -c 'echo helm says no >&2; exit 7'")
    with pytest.raises(chart.RefreshFailed) as failed:
        chart.refresh_values(object_store, target_settings, settings, [DOMAIN])
    message = str(failed.value)
    assert failed.value.exit_code == 1
    assert "exited with 7" in message and "helm says no" in message and "\n" not in message
    assert (tmp_path / "values" / f"{DOMAIN}.yaml").exists()
    assert [r.hook_exit for r in failed.value.results] == [7]

    missing = hook_settings(tmp_path / "2", "/nonexistent/helm upgrade")
    with pytest.raises(chart.RefreshFailed, match=r"exited with 127.*cannot start it"):
        chart.refresh_values(object_store, target_settings, missing, [DOMAIN])


def test_a_rewrite_that_keeps_the_current_version_is_retried_not_refused(
    object_store: ObjectStore,
    s3_client: Any,
    target_settings: TargetSettings,
    two_versions: tuple[Seeded, Seeded],
) -> None:
    older, newest = two_versions
    chart.promote(object_store, DOMAIN, older.version)
    other = ObjectStore(s3_client, target_settings.bucket, target_settings.prefix)
    calls: list[datetime] = []

    def meanwhile_a_rewrite() -> datetime:
        # Another writer rewrites current.json (same current version) after our read.
        if not calls:
            document, etag = other.read_json(other.key(DOMAIN, "current.json"))
            assert document is not None
            rewritten = {**document, "note": "from a newer tool"}
            other.write_json(other.key(DOMAIN, "current.json"), rewritten, if_match=etag)
        calls.append(T0)
        return T0

    updated = chart.promote(object_store, DOMAIN, newest.version, now=meanwhile_a_rewrite)
    assert len(calls) == 2  # read, lost the race, read again, applied again
    assert updated.current == newest.version
    assert chart.current_version(object_store, DOMAIN) == newest.version
    assert [entry.version for entry in updated.history] == [older.version, newest.version]
    assert updated.to_json()["note"] == "from a newer tool"
