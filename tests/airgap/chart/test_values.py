"""mirror.airgap.chart.values: links, the values text and file, values rendered from the bucket."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from mirror.airgap import chart
from mirror.airgap.s3.objectstore import ObjectStore
from mirror.config import TargetSettings
from mirror.errors import ConfigError, NotFound
from tests.airgap.chart.seeding import (
    DOMAIN,
    T0,
    Seeded,
    check,
    fetch,
    offline_presign,
    public_read,
    sample_values,
)

# --- links -----------------------------------------------------------------------------------


def test_link_expiry_from_sigv4_signature() -> None:
    before = datetime.now(UTC).replace(microsecond=0)
    url = offline_presign("s3v4", 3600)
    after = datetime.now(UTC)
    expires = chart.link_expiry(url)
    assert expires is not None
    assert before + timedelta(seconds=3600) <= expires <= after + timedelta(seconds=3601)


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


# --- values text -----------------------------------------------------------------------------


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


def test_a_values_file_that_is_not_there_is_not_found(tmp_path: Path) -> None:
    """A missing input file is exit 3, as for every command (docs/architecture.md)."""
    with pytest.raises(NotFound, match="does not exist") as missing:
        chart.read_values_file(tmp_path / "values.yaml")
    assert missing.value.exit_code == 3


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("staticExport: [unclosed\n", "not valid YAML at line"),
        ("other: 1\n", "has no staticExport.bundleUrl"),
        ("staticExport:\n  enabled: true\n", "has no staticExport.bundleUrl"),
        ("- a list\n", "has no staticExport.bundleUrl"),
    ],
)
def test_bad_values_files_are_config_errors(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "values.yaml"
    path.write_text(content)
    with pytest.raises(ConfigError, match=message):
        chart.read_values_file(path)


def test_values_for_the_newest_version_when_nothing_is_promoted(
    object_store: ObjectStore, target_settings: TargetSettings, two_versions: tuple[Seeded, Seeded]
) -> None:
    _, newest = two_versions
    target = target_settings.model_copy(update={"presign_ttl": 7200.0})
    before = datetime.now(UTC)
    values = chart.render_values(object_store, target, DOMAIN)
    after = datetime.now(UTC)
    assert values.version == newest.version
    assert values.sha256 == newest.sha256
    assert values.key == newest.key
    assert values.url_mode == "presigned"
    assert values.expires_at is not None
    ttl = timedelta(seconds=7200)  # from the moment of signing, in whole seconds
    assert (
        before + ttl - timedelta(seconds=1)
        <= values.expires_at
        <= after + ttl + timedelta(seconds=1)
    )
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
