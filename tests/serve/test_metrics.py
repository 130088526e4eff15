"""The air-gapped side's metrics on `mirror serve`'s /metrics: the freshness histogram (once
per version, also across a restart), the current version against the newest, and what the
CronJobs recorded in the bucket (mirror.airgap.records)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from mirror.airgap import chart, layout
from mirror.airgap.records import record_import, record_links, recorded_import
from mirror.errors import IntegrityError
from mirror.serve.routes import bundle_path
from tests.airgap.chart.seeding import DOMAIN, Seeded
from tests.fixtures.memory import MemoryBucket
from tests.fixtures.serving import V1, V2, Running, serving, until


def samples(running: Running) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = httpx.get(running.url + "/metrics").text
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(
    found: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str
) -> float | None:
    return found.get((name, tuple(sorted(labels.items()))))


def fetch(running: Running, version: str | None) -> None:
    answer = httpx.get(running.url + bundle_path(DOMAIN, version, "tar.gz"))
    assert answer.status_code == 200


def first_serves(
    running: Running, count: float
) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """The metrics once the freshness histogram counts `count` first serves: a whole GET is
    counted after its last byte is sent, so the client may read /metrics before that."""
    until(lambda: value(samples(running), "mirror_serve_freshness_seconds_count") == count)
    return samples(running)


def test_freshness_counts_each_version_once_also_after_a_restart(
    memory_bucket: MemoryBucket, promoted_versions: dict[str, Seeded], tmp_path: Path
) -> None:
    with serving(memory_bucket, tmp_path / "cache") as running:
        fetch(running, None)
        fetch(running, None)
        fetch(running, V1)
        first = first_serves(running, 2.0)
    assert value(first, "mirror_serve_freshness_seconds_count") == 2.0
    assert value(first, "mirror_serve_freshness_seconds_bucket", le="+Inf") == 2.0
    assert (value(first, "mirror_serve_current_version_age_seconds", domain=DOMAIN) or -1) >= 0
    with serving(memory_bucket, tmp_path / "cache") as running:
        fetch(running, None)
        again = samples(running)
    assert value(again, "mirror_serve_freshness_seconds_count") == 0.0


def test_what_readers_see_is_kept_across_a_restart(
    memory_bucket: MemoryBucket, promoted_versions: dict[str, Seeded], tmp_path: Path
) -> None:
    """Pods keep showing what they fetched while serve restarts (a rollout): the version
    last served per domain and its age are there again before any new fetch, and
    `current` is read from the pointers (a rollback meanwhile shows) (trial3637 G2, M11)."""
    with serving(memory_bucket, tmp_path / "cache") as running:
        fetch(running, None)
        served = samples(running)
    chart.rollback(memory_bucket, DOMAIN)
    with serving(memory_bucket, tmp_path / "cache") as running:
        again = samples(running)
    for found, current in ((served, "true"), (again, "false")):
        labels = {"domain": DOMAIN, "version": V2, "current": current}
        assert value(found, "mirror_serve_last_served_info", **labels) == 1.0
        assert (value(found, "mirror_serve_served_version_age_seconds", domain=DOMAIN) or -1) >= 0


def test_after_a_rollback_the_current_version_is_not_the_newest(
    memory_bucket: MemoryBucket, promoted_versions: dict[str, Seeded], tmp_path: Path
) -> None:
    with serving(memory_bucket, tmp_path / "cache") as running:
        before = samples(running)
        chart.rollback(memory_bucket, DOMAIN)
        running.refresh()
        after = samples(running)
    assert value(before, "mirror_serve_current_is_newest", domain=DOMAIN) == 1.0
    assert value(before, "mirror_serve_newest_info", domain=DOMAIN, version=V2) == 1.0
    assert value(after, "mirror_serve_current_is_newest", domain=DOMAIN) == 0.0
    assert value(after, "mirror_serve_current_info", domain=DOMAIN, version=V1) == 1.0


class _Result:
    sequence = 7
    already_imported = False


def _refuse() -> _Result:
    raise IntegrityError("set 8 is not signed by a trusted key")


def test_import_results_and_links_recorded_in_the_bucket_are_shown(
    memory_bucket: MemoryBucket, promoted_versions: dict[str, Seeded], tmp_path: Path
) -> None:
    recorded_import(memory_bucket, _Result)
    with pytest.raises(IntegrityError):
        recorded_import(memory_bucket, _refuse)
    expires = datetime(2026, 12, 1, tzinfo=UTC)
    link = chart.RefreshResult(DOMAIN, tmp_path / "v.yaml", V2, "rendered", "new", expires)
    record_links(memory_bucket, "presigned", [link])
    with serving(memory_bucket, tmp_path / "cache") as running:
        found = samples(running)
    assert value(found, "mirror_import_sets_total", result="imported") == 1.0
    assert value(found, "mirror_import_sets_total", result="refused") == 1.0
    assert value(found, "mirror_import_last_result", result="refused") == 1.0
    assert value(found, "mirror_import_last_result", result="imported") == 0.0
    assert value(found, "mirror_import_last_sequence") == 7.0
    recorded = layout.read_import_results(memory_bucket)
    assert recorded is not None and recorded.last_success_at is not None
    assert (value(found, "mirror_import_last_success_timestamp_seconds") or 0) > 0
    labels = {"domain": DOMAIN, "version": V2, "url_mode": "presigned"}
    expiry = value(found, "mirror_values_link_expiry_timestamp_seconds", **labels)
    assert expiry == expires.timestamp()


def test_a_link_recorded_before_a_switch_of_url_mode_is_not_shown(
    memory_bucket: MemoryBucket, promoted_versions: dict[str, Seeded], tmp_path: Path
) -> None:
    """A presigned link recorded before the switch to url_mode = "serve" (nothing renders
    those values again: the refresh CronJob is presigned's only) would keep
    MirrorLinkExpiresSoon firing for ever; shown are only the links rendered under the mode
    configured now, and a refresh under it takes the domain's place (trial3637 G7)."""
    soon = datetime.now(UTC) + timedelta(hours=2)
    stale = chart.RefreshResult(DOMAIN, tmp_path / "v.yaml", V1, "rendered", "new", soon)
    record_links(memory_bucket, "presigned", [stale])
    with serving(memory_bucket, tmp_path / "cache", url_mode="serve") as running:
        before = samples(running)
        served = chart.RefreshResult(
            DOMAIN, tmp_path / "v.yaml", V2, "rendered", "url_mode is now serve", None
        )
        record_links(memory_bucket, "serve", [served])
        running.refresh()
        after = samples(running)
    named = {name for name, _ in before}
    assert "mirror_values_link_expiry_timestamp_seconds" not in named
    assert "mirror_values_link_info" not in named
    serve_link = {"domain": DOMAIN, "version": V2, "url_mode": "serve"}
    assert value(after, "mirror_values_link_info", **serve_link) == 1.0
    assert "mirror_values_link_expiry_timestamp_seconds" not in {name for name, _ in after}


def test_the_last_import_time_moves_with_each_import(memory_bucket: MemoryBucket) -> None:
    start = datetime(2026, 11, 27, tzinfo=UTC)
    record_import(memory_bucket, "failed", None, start)
    record_import(memory_bucket, "already_imported", 3, start + timedelta(hours=1))
    recorded = layout.read_import_results(memory_bucket)
    assert recorded is not None
    assert recorded.counts == {"failed": 1, "already_imported": 1}
    assert recorded.last_sequence == 3 and recorded.last_success_at == recorded.last_at


def test_only_a_whole_get_is_a_first_serve_and_current_is_read_when_scraped(
    memory_bucket: MemoryBucket, promoted_versions: dict[str, Seeded], tmp_path: Path
) -> None:
    """W4 (trial M9, M10): a HEAD sends no docs and a range not all of them; after a
    rollback the version last served is no longer the current one."""
    moving = bundle_path(DOMAIN, None, "tar.gz")
    last = "mirror_serve_last_served_info"
    with serving(memory_bucket, tmp_path / "cache") as running:
        assert httpx.head(running.url + moving).status_code == 200
        headed = samples(running)
        ranged = httpx.get(running.url + moving, headers={"Range": "bytes=0-0"})
        assert ranged.status_code == 206
        partial = samples(running)
        fetch(running, None)
        whole = first_serves(running, 1.0)
        chart.rollback(memory_bucket, DOMAIN)
        running.refresh()
        after = samples(running)
    assert value(headed, "mirror_serve_freshness_seconds_count") == 0.0
    assert value(headed, last, current="true", domain=DOMAIN, version=V2) is None
    assert value(partial, "mirror_serve_freshness_seconds_count") == 0.0
    assert value(partial, last, current="true", domain=DOMAIN, version=V2) == 1.0
    assert value(whole, "mirror_serve_freshness_seconds_count") == 1.0
    assert value(after, last, current="false", domain=DOMAIN, version=V2) == 1.0
    assert value(after, "mirror_serve_current_info", domain=DOMAIN, version=V1) == 1.0
