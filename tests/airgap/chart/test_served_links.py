"""`url_mode = "serve"`: `chart values` renders mirror serve's links (pinned by default, the
moving one on request), `chart refresh` keeps them, `chart check` and `chart check --site`
work through both, against a real mirror serve on loopback (the in-memory bucket behind it)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
import yaml

from mirror.airgap import chart
from mirror.airgap.chart.site import check_site
from mirror.config import TargetSettings
from mirror.errors import ConfigError, IntegrityError, NotFound
from tests.airgap.chart.seeding import DOMAIN, Seeded, seed_version
from tests.fixtures.memory import MemoryBucket
from tests.fixtures.serving import Running, serving

V1, V2 = "2026-11-20", "2026-11-21"
SERVE = TargetSettings(bucket="memory", url_mode="serve")


@pytest.fixture
def bucket(tmp_path: Path) -> tuple[MemoryBucket, dict[str, Seeded]]:
    store = MemoryBucket()
    seeded = {label: seed_version(store, tmp_path, label) for label in (V1, V2)}
    chart.promote(store, DOMAIN, V1)
    chart.promote(store, DOMAIN, V2)
    return store, seeded


def render(store: MemoryBucket, running: Running, path: Path, **how: object) -> chart.ChartValues:
    values = chart.render_values(store, SERVE, DOMAIN, served_at=running.url, **how)  # type: ignore[arg-type]
    chart.write_values(values, path)
    return values


def test_pinned_by_default_moving_on_request(
    bucket: tuple[MemoryBucket, dict[str, Seeded]], tmp_path: Path
) -> None:
    store, seeded = bucket
    with serving(store, tmp_path / "cache") as running:
        pinned = render(store, running, tmp_path / "pinned.yaml")
        moving = render(store, running, tmp_path / "moving.yaml", moving=True)
        older = render(store, running, tmp_path / "older.yaml", version=V1)
    assert pinned.bundle_url == f"{running.url}/domains/{DOMAIN}/{V2}/bundle.tar.gz"
    assert moving.bundle_url == f"{running.url}/domains/{DOMAIN}/current/bundle.tar.gz"
    assert older.bundle_url.endswith(f"/{V1}/bundle.tar.gz")
    document = yaml.safe_load((tmp_path / "moving.yaml").read_text())
    assert document["staticExport"]["version"] == "current"
    assert "follows promote and rollback" in (tmp_path / "moving.yaml").read_text()
    assert yaml.safe_load((tmp_path / "pinned.yaml").read_text())["staticExport"]["version"] == V2
    assert (pinned.expires_at, moving.as_dict()["moving"], pinned.as_dict()["moving"]) == (
        None,
        True,
        False,
    )
    assert moving.version == V2 and moving.sha256 == seeded[V2].sha256


def test_settings_that_cannot_work_are_refused(
    bucket: tuple[MemoryBucket, dict[str, Seeded]],
) -> None:
    store, _ = bucket
    with pytest.raises(ConfigError, match=r"serve.public_url is empty"):
        chart.render_values(store, SERVE, DOMAIN)
    with pytest.raises(ConfigError, match="--moving needs"):
        chart.render_values(store, TargetSettings(bucket="b"), DOMAIN, moving=True)
    with pytest.raises(ConfigError, match="no --pin"):
        chart.render_values(store, SERVE, DOMAIN, V1, served_at="http://x", moving=True)


def test_check_works_through_both_links(
    bucket: tuple[MemoryBucket, dict[str, Seeded]], tmp_path: Path
) -> None:
    store, seeded = bucket
    with serving(store, tmp_path / "cache") as running, httpx.Client(timeout=30) as http:
        render(store, running, tmp_path / "pinned.yaml")
        render(store, running, tmp_path / "moving.yaml", moving=True)
        pinned = chart.check_values_file(tmp_path / "pinned.yaml", store, http)
        moving = chart.check_values_file(tmp_path / "moving.yaml", store, http)
        chart.rollback(store, DOMAIN)
        running.refresh()
        rolled = chart.check_values_file(tmp_path / "moving.yaml", store, http)
        site = check_site(http, chart.read_values_file(tmp_path / "moving.yaml").bundle_url)
    for report, label in ((pinned, V2), (moving, V2), (rolled, V1)):
        assert report.error is None, report.error
        assert (report.status, report.version) == ("ok", label)
        assert report.actual_sha256 == seeded[label].sha256 == report.expected_sha256
        assert report.expires_at is None
    assert site.error is None and site.pages >= 1


def test_check_reports_what_mirror_serve_refused_or_lacks(
    bucket: tuple[MemoryBucket, dict[str, Seeded]], tmp_path: Path
) -> None:
    store, seeded = bucket
    stored = store.objects[seeded[V1].key]
    store.objects[seeded[V1].key] = type(stored)(b"x" + stored.data[1:], {}, "", '"forged"')
    with serving(store, tmp_path / "cache") as running, httpx.Client(timeout=30) as http:
        render(store, running, tmp_path / "older.yaml", version=V1)
        refused = chart.check_values_file(tmp_path / "older.yaml", store, http)
        text = (tmp_path / "older.yaml").read_text().replace(V1, "2019-01-01")
        (tmp_path / "gone.yaml").write_text(text)
        store_missing = chart.check_values_file(tmp_path / "gone.yaml", store, http)
    assert refused.status == "mismatch" and isinstance(refused.error, IntegrityError)
    assert f"refused {DOMAIN} {V1}" in str(refused.error) and refused.exit_code == 5
    assert store_missing.status == "missing" and isinstance(store_missing.error, NotFound)


def test_refresh_keeps_served_links_and_follows_the_current_version(
    bucket: tuple[MemoryBucket, dict[str, Seeded]], tmp_path: Path
) -> None:
    store, _ = bucket
    now = datetime(2026, 11, 22, tzinfo=UTC)
    with serving(store, tmp_path / "cache") as running:
        render(store, running, tmp_path / "pinned.yaml")
    path = tmp_path / "pinned.yaml"
    assert chart.refresh_reason(path, DOMAIN, V2, SERVE, 86400, now) is None
    assert chart.refresh_reason(path, DOMAIN, V1, SERVE, 86400, now) == f"version {V2} -> {V1}"
    presigned = TargetSettings(bucket="memory")
    assert chart.refresh_reason(path, DOMAIN, V2, presigned, 86400, now) == (
        "url_mode is now presigned"
    )
