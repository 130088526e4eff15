"""mirror.chart: pure parts (links, history, values text, refresh decisions) and the S3 parts."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import boto3
import pytest
import yaml
from botocore.config import Config

from mirror import chart
from mirror.config import TargetSettings
from mirror.errors import ConfigError, OperationFailed

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


def history_doc(*steps: tuple[str, str]) -> dict[str, object]:
    document: dict[str, object] | None = None
    for index, (action, version) in enumerate(steps):
        at = T0 + timedelta(minutes=index)
        assert action in ("promote", "rollback")
        document = chart.with_promotion(document, "d.example", version, at, action=action)  # type: ignore[arg-type]
    assert document is not None
    return document


def test_promotion_appends_history_and_sets_current() -> None:
    document = history_doc(("promote", "2026-11-20"), ("promote", "2026-11-21"))
    assert document["format"] == 1
    assert document["domain"] == "d.example"
    assert document["current"] == "2026-11-21"
    assert document["history"] == [
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


def test_history_is_bounded() -> None:
    document: dict[str, object] | None = None
    for index in range(chart.HISTORY_LIMIT + 5):
        document = chart.with_promotion(document, "d", f"v{index}", T0)
    assert document is not None
    history = document["history"]
    assert isinstance(history, list) and len(history) == chart.HISTORY_LIMIT
    assert history[-1]["version"] == f"v{chart.HISTORY_LIMIT + 4}"


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
    assert reason(soon, "2026-11-21", presigned) == "link expires in 1h"
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
