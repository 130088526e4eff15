"""mirror.airgap.chart.refresh: when a values file is rendered again, and the hook."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from mirror.airgap import chart
from mirror.airgap.s3.objectstore import ObjectStore
from mirror.config import ChartSettings, TargetSettings
from mirror.errors import (
    ConfigError,
)
from tests.airgap.chart.seeding import (
    DOMAIN,
    T0,
    Seeded,
    check,
    offline_presign,
    sample_values,
)

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
    assert updated.as_dict()["note"] == "from a newer tool"
