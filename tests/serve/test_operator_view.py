"""What the operator reads when something is wrong: /readyz and the status page say why a
version is not served, a configured domain the bucket does not hold is not silent, the store's
state is the last call's (fills do not hold up the reads), a cache_max too small is said,
credentials refused at the first read are the one line said before the exit."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from mirror.airgap import chart, layout
from mirror.config import ServeSettings
from mirror.errors import AuthError
from mirror.serve.routes import bundle_path
from mirror.serve.service import Service
from mirror.serve.supply import Trust
from tests.airgap.chart.seeding import DOMAIN, seed_version
from tests.fixtures.memory import MemoryBucket
from tests.fixtures.serving import (
    SwitchableBucket,
    read_to_end,
    serving,
    start_download,
    until,
)

V1, V2 = "2026-11-20", "2026-11-21"


def test_a_refused_current_version_is_named_with_its_reason(tmp_path: Path) -> None:
    bucket = MemoryBucket()
    seed_version(bucket, tmp_path, V1)
    seeded = seed_version(bucket, tmp_path, V2)
    chart.promote(bucket, DOMAIN, V2)
    stored = bucket.objects[seeded.key]
    forged = bytes([stored.data[0] ^ 0xFF]) + stored.data[1:]
    bucket.objects[seeded.key] = type(stored)(forged, stored.metadata, "", '"forged"')
    with serving(bucket, tmp_path / "cache", refresh=False) as running:
        running.service.supply.hold = 0.0  # a refusal is not held: the next turn asks again
        running.refresh()
        ready = httpx.get(running.url + "/readyz")
        page = httpx.get(running.url + "/").text
        bucket.objects[seeded.key] = stored  # put right: the fill clears the refusal
        running.refresh()
        healed = httpx.get(running.url + "/readyz")
        healed_page = httpx.get(running.url + "/").text
    assert ready.status_code == 503
    assert ready.text.startswith(f"{DOMAIN}'s current version {V2} was refused: ")
    assert "not the bundle its manifest names" in ready.text
    assert "refused: " in page and "not the bundle its manifest names" in page
    assert healed.status_code == 200 and "refused" not in healed_page


def test_a_served_domain_without_an_index_is_a_warning_and_shown(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    bucket = MemoryBucket()
    seed_version(bucket, tmp_path, V1)
    chart.promote(bucket, DOMAIN, V1)
    domains = [DOMAIN, "nope.example.com"]
    with (
        caplog.at_level(logging.WARNING, logger="mirror.serve"),
        serving(bucket, tmp_path / "cache", domains=domains) as running,
    ):
        running.refresh()  # a second read: warned once, not at every poll
        page = httpx.get(running.url + "/").text
        ready = httpx.get(running.url + "/readyz")
    warned = [r.getMessage() for r in caplog.records if "no index.json" in r.getMessage()]
    assert warned == [
        "nope.example.com has no index.json in the bucket: nothing to serve for it (check "
        "serve.domains, or import a version of it)"
    ]
    assert "The bucket has no index.json for this domain" in page
    assert page.count("has no index.json") == 1  # the one domain, not docs.example.com
    assert ready.status_code == 200  # nothing to wait for: not a reason to leave the Service


def test_a_cache_file_written_to_during_a_send_is_reported_and_dropped(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Not mirror's doing (it renames fills into place): disk trouble or root. The bytes
    already went out; the operator is told, and the next request gets a verified refill."""
    bucket = MemoryBucket()
    big = tmp_path / "big.tar.gz"
    big.write_bytes(bytes(range(256)) * (16 * 1024 * 1024 // 256))
    seeded = seed_version(bucket, tmp_path, V1, archive=big)
    chart.promote(bucket, DOMAIN, V1)
    with (
        caplog.at_level(logging.ERROR, logger="mirror.serve"),
        serving(bucket, tmp_path / "cache") as running,
    ):
        path = tmp_path / "cache" / "bundles" / seeded.sha256
        conn, first = start_download(running.port, bundle_path(DOMAIN, V1, "tar.gz"))
        path.chmod(0o644)
        with open(path, "r+b") as handle:
            handle.seek(len(big.read_bytes()) - 4)
            handle.write(b"XXXX")
        read_to_end(conn, first)
        assert until(lambda: running.counter("cache_dropped_total") == 1)
        again = httpx.get(running.url + bundle_path(DOMAIN, V1, "tar.gz"), timeout=60)
    assert again.content == big.read_bytes()
    (said,) = [
        r.getMessage() for r in caplog.records if "changed while it was sent" in r.getMessage()
    ]
    assert said.startswith(f"the cached bundle {seeded.sha256} was changed while it was sent")


def test_a_prefix_in_the_bucket_that_is_no_domain_name_is_never_served(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Someone who may write the bucket adds `PREFIX/evil"} 1\\nx/index.json`: not a domain,
    so it neither shows nor holds readiness hostage; the operator is told once."""
    bucket = MemoryBucket()
    seed_version(bucket, tmp_path, V1)
    chart.promote(bucket, DOMAIN, V1)
    odd = 'evil"} 1\nx'
    for key in (layout.index_key, layout.current_key):
        bucket.objects[key(bucket, odd)] = bucket.objects[key(bucket, DOMAIN)]
    with (
        caplog.at_level(logging.WARNING, logger="mirror.serve"),
        serving(bucket, tmp_path / "cache") as running,
    ):
        running.refresh()
        served = set(running.service.pointers.domains)
        ready = httpx.get(running.url + "/readyz")
    assert served == {DOMAIN} and ready.status_code == 200
    warned = [r.getMessage() for r in caplog.records if "no domain name" in r.getMessage()]
    assert warned == [f"ignoring {odd!r} in the bucket: it has an index but is no domain name"]


def test_a_fill_under_way_never_holds_up_the_pointers_nor_hides_a_store_gone_away(
    tmp_path: Path,
) -> None:
    """A fill held (as by a store that hangs mid-fill) while the store goes away: the next
    read of the pointers still comes within poll_interval and the page says the store is
    away, with the time of the call that failed."""
    bucket = MemoryBucket()
    seed_version(bucket, tmp_path, V1)
    chart.promote(bucket, DOMAIN, V1)
    away = SwitchableBucket(bucket)
    away.gate = threading.Event()  # every bundle stream waits here before its first byte
    with serving(away, tmp_path / "cache", poller=True, poll_interval="1s") as running:
        assert away.waiting.acquire(timeout=120)  # the settler's fill is held at the gate
        away.away = True
        said = until(lambda: "unreachable" in httpx.get(running.url + "/").text, 50)
        held = away.released == 0  # said while the fill was still held, not after it
        page = httpx.get(running.url + "/").text
        away.gate.set()
    assert said and held, page
    assert "Object store unreachable since" in page and "the last call to it failed at" in page


def test_a_cache_max_below_what_must_be_kept_is_said_once_and_shown(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    bucket = MemoryBucket()
    for label in (V1, V2):
        seed_version(bucket, tmp_path, label)
        chart.promote(bucket, DOMAIN, label)
    with (
        caplog.at_level(logging.WARNING, logger="mirror.serve"),
        serving(bucket, tmp_path / "cache", cache_max=1) as running,
    ):
        running.refresh()
        page = httpx.get(running.url + "/").text
        served = httpx.get(running.url + bundle_path(DOMAIN, V1, "tar.gz"))
    warned = [r.getMessage() for r in caplog.records if "serve.cache_max" in r.getMessage()]
    assert len(warned) == 1, warned
    assert warned[0].startswith("serve.cache_max (1 B) is below the ")
    assert "every domain's current version and rollback target" in warned[0]
    assert 'id="cache"' in page and "serve.cache_max (1 B) is below" in page
    assert served.status_code == 200  # kept all the same


def test_a_cache_max_that_holds_them_says_nothing(tmp_path: Path) -> None:
    bucket = MemoryBucket()
    seed_version(bucket, tmp_path, V1)
    chart.promote(bucket, DOMAIN, V1)
    with serving(bucket, tmp_path / "cache") as running:
        page = httpx.get(running.url + "/").text
    assert 'id="cache"' not in page and "Object store reachable: the last call" in page


class _Refusing(SwitchableBucket):
    """A store that refuses the credentials at every call."""

    def _reached(self, call: Callable[..., Any]) -> Callable[..., Any]:
        def refused(*args: Any, **kwargs: Any) -> Any:
            raise AuthError("the object store refused the credentials (test)")

        return refused


@pytest.mark.parametrize("domains", [None, [DOMAIN]], ids=["listed", "configured"])
def test_credentials_refused_at_the_first_read_say_nothing_but_the_exit(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, domains: list[str] | None
) -> None:
    """The service is about to exit 4 (mirror.serve.run): no "serving what was read before"
    warning ahead of its fatal line, and the pointers an earlier run saved are kept."""
    bucket = MemoryBucket()
    seed_version(bucket, tmp_path, V1)
    chart.promote(bucket, DOMAIN, V1)
    with serving(bucket, tmp_path / "cache"):
        pass  # an earlier run: its pointers are saved in the cache directory
    saved = (tmp_path / "cache" / "pointers.json").read_bytes()
    settings = ServeSettings(listen="127.0.0.1:0", cache_dir=tmp_path / "cache", domains=domains)
    service = Service(settings, _Refusing(bucket), Trust({}), url_mode="serve")
    service.start()
    try:
        with caplog.at_level(logging.INFO, logger="mirror"):
            assert service.poll() is False
    finally:
        service.close()
    assert isinstance(service.fatal, AuthError)
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
    assert (tmp_path / "cache" / "pointers.json").read_bytes() == saved
