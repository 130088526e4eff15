"""A real S3 server behind a hostile network or clock: damage on the wire, a hung endpoint,
a skewed clock, a full server, two imports promoting the same version.

Each case runs the real `mirror transfer import` (or the module it calls) against the
S3 server `make test` starts, and checks that nothing is published that was not stored
as sent, and that the operator reads one line naming the cause, with its exit code.
"""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import botocore.auth
import pytest

from mirror.airgap import layout
from mirror.airgap.chart.promotion import promote
from mirror.airgap.s3.objectstore import ObjectStore
from mirror.airgap.s3.paced import BodyStalled
from mirror.config import TargetSettings
from mirror.errors import ConfigError
from tests.fixtures.cli import mirror_cli
from tests.fixtures.s3 import (
    WITHIN_DEADLINE,
    bucket_listing,
    import_config,
    packed_set,
    small_seaweed,
    timed_against,
)
from tests.fixtures.wire import BodyTricklingProxy, FlippingProxy, SilentServer

pytestmark = pytest.mark.s3

MiB = 1024 * 1024
DOCS = "docs.example.com"


def two_domains(tmp_path: Path, key_pair: tuple[Path, Path], payload: int = 6 * MiB) -> Path:
    """One set holding a version big enough to be sent in several upload parts."""
    return packed_set(
        tmp_path, key_pair, [(DOCS, "2026-11-21", payload), ("api.example.com", "2026-11-21", 4096)]
    )


def open_uploads(store: ObjectStore) -> list[Any]:
    return list(store.client.list_multipart_uploads(Bucket=store.bucket).get("Uploads", []))


@pytest.mark.fault(
    "s3: one byte of an upload part flipped on the wire", "exit 5, nothing published"
)
def test_a_part_damaged_on_the_wire_is_refused_before_anything_is_published(
    tmp_path: Path,
    key_pair: tuple[Path, Path],
    target_settings: TargetSettings,
    object_store: ObjectStore,
    fault_got: list[str],
) -> None:
    set_dir = two_domains(tmp_path, key_pair)
    with FlippingProxy(target_settings.endpoint_url) as proxy:
        config = import_config(tmp_path, key_pair, target_settings, endpoint_url=proxy.url)
        result = mirror_cli("--config", str(config), "transfer", "import", str(set_dir))
    fault_got.append(f"exit {result.returncode}, flipped {proxy.flipped}")
    assert proxy.flipped == 1
    assert result.returncode == 5, result.stderr
    assert "damaged on the way" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert bucket_listing(object_store.client, object_store.bucket) == {}
    assert open_uploads(object_store) == []
    again = mirror_cli(
        "--config", str(import_config(tmp_path, key_pair, target_settings)),
        "transfer", "import", str(set_dir),
    )  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert layout.read_index(object_store, DOCS) is not None


@pytest.mark.fault("s3: endpoint accepts connections and never answers", "exit 75 within deadline")
def test_a_hanging_endpoint_ends_the_import_within_the_deadline(
    tmp_path: Path,
    key_pair: tuple[Path, Path],
    target_settings: TargetSettings,
    fault_got: list[str],
) -> None:
    set_dir = two_domains(tmp_path, key_pair, payload=4096)
    with SilentServer() as server:
        result, took = timed_against(
            tmp_path, key_pair, target_settings, server.url, "transfer", "import", str(set_dir)
        )
    fault_got.append(f"exit {result.returncode} after {took:.1f} s")
    assert result.returncode == 75, result.stderr
    assert server.url in result.stderr and "did not answer" in result.stderr
    assert took < WITHIN_DEADLINE


@pytest.mark.fault(
    "s3: a GET's headers come at once, then its body a byte under every read timeout",
    "exit 75 within deadline, naming the key",
)
def test_a_body_trickled_under_the_read_timeout_ends_within_the_deadline(
    tmp_path: Path,
    key_pair: tuple[Path, Path],
    target_settings: TargetSettings,
    object_store: ObjectStore,
    fault_got: list[str],
) -> None:
    """The deadline bounds a body as a whole, not only each socket read of it: a store that
    answers at once and then sends a byte every second (under the 2 s read timeout) holds
    `chart history` no longer than the deadline, and its one line names the object."""
    key = layout.current_key(object_store, DOCS)
    object_store.write_json(key, {"domain": DOCS, "history": [], "pad": "x" * 200}, if_match=None)
    with BodyTricklingProxy(target_settings.endpoint_url, b"current.json") as proxy:
        result, took = timed_against(
            tmp_path, key_pair, target_settings, proxy.url, "chart", "history", DOCS
        )
    fault_got.append(f"exit {result.returncode} after {took:.1f} s")
    assert proxy.trickled >= 1
    assert result.returncode == 75, result.stderr
    assert f"sent no more of {target_settings.bucket}/{key} for 4s" in result.stderr
    assert "target.deadline" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert took < WITHIN_DEADLINE


def test_a_stalled_stream_is_given_up_and_its_reading_thread_ends(
    target_settings: TargetSettings, object_store: ObjectStore
) -> None:
    """`ObjectStore.open_stream` of a body that trickles on raises BodyStalled after the
    deadline; its reading thread is woken (the socket shut down), closes the body and ends."""
    key = object_store.key("stalled", "bundle.tar.gz")
    object_store.client.put_object(Bucket=object_store.bucket, Key=key, Body=b"y" * 4096)
    with BodyTricklingProxy(target_settings.endpoint_url, key.encode(), 0.5) as proxy:
        started = time.monotonic()
        raised = _first_piece_through(proxy, target_settings, key, deadline=2.0)
        took = time.monotonic() - started
        assert raised and isinstance(raised[0], BodyStalled), raised
        assert f"sent no more of {object_store.bucket}/{key} for 2s" in str(raised[0])
        assert proxy.trickled == 1
        assert _ended("s3-body"), "the thread reading the stalled body is still running"
    assert took < 2.0 + 1.0 + 1.0 + 20


def test_a_body_that_stops_past_the_read_timeout_is_named_a_stall_not_an_unreachable_store(
    target_settings: TargetSettings, object_store: ObjectStore
) -> None:
    """A body whose next byte comes after the read timeout ends with the stall's one line
    (the store was reached and stopped sending), naming the key and `target.read_timeout`;
    not "cannot reach the object store ... check the network" (hostile37)."""
    key = object_store.key("stopped", "bundle.tar.gz")
    object_store.client.put_object(Bucket=object_store.bucket, Key=key, Body=b"z" * 4096)
    with BodyTricklingProxy(target_settings.endpoint_url, key.encode(), 30.0) as proxy:
        raised = _first_piece_through(proxy, target_settings, key, deadline=60.0)
        assert raised and isinstance(raised[0], BodyStalled), raised
        line = str(raised[0])
        assert f"stopped sending {object_store.bucket}/{key} part-way" in line, line
        assert "target.read_timeout" in line and "cannot reach" not in line, line
        assert proxy.trickled == 1


def _first_piece_through(
    proxy: BodyTricklingProxy, target: TargetSettings, key: str, *, deadline: float
) -> list[BaseException]:
    """What reading the first piece of `key` through `proxy` raised (a 1 s read timeout,
    `deadline`); read in a thread given 60 s past the deadline (unbounded, a trickled body
    would take half an hour)."""
    through = target.model_copy(
        update={"endpoint_url": proxy.url, "deadline": deadline, "read_timeout": 1.0}
    )
    stream = ObjectStore.from_settings(through).open_stream(key)
    raised: list[BaseException] = []
    reader = threading.Thread(target=_first_piece, args=(stream, raised), daemon=True)
    reader.start()
    reader.join(deadline + 60)
    return raised


def _first_piece(stream: Iterator[bytes], raised: list[BaseException]) -> None:
    try:
        next(stream)
    except BaseException as exc:  # the test looks at it
        raised.append(exc)


def _ended(name: str) -> bool:
    """Wait (to a generous deadline) until no thread called `name` runs."""
    done = threading.Event()
    for _ in range(600):
        if not any(thread.name == name for thread in threading.enumerate()):
            return True
        done.wait(0.1)
    return False


@pytest.mark.fault("s3: this host's clock 20 minutes off", "exit 2 naming the clock")
def test_a_skewed_clock_is_named_with_its_remedy(
    object_store: ObjectStore, monkeypatch: pytest.MonkeyPatch, fault_got: list[str]
) -> None:
    """The clock is the injected fault: SigV4 signs with a time 20 minutes ahead."""
    real = dt.datetime

    class Skewed(dt.datetime):
        @classmethod
        def now(cls, tz: dt.tzinfo | None = None) -> Any:
            return real.now(tz) + dt.timedelta(minutes=20)

        @classmethod
        def utcnow(cls) -> Any:
            return real.now(dt.UTC).replace(tzinfo=None) + dt.timedelta(minutes=20)

    monkeypatch.setattr(botocore.auth.datetime, "datetime", Skewed)
    with pytest.raises(ConfigError) as refused:
        object_store.check_access()
    fault_got.append(str(refused.value)[:60])
    assert "clock" in str(refused.value) and "NTP" in str(refused.value)


class RacedBucket:
    """The bucket as one import sees it, where the other import's promotion lands between
    this one's read of current.json and its conditional write."""

    def __init__(self, store: ObjectStore, other: Any) -> None:
        self.store, self.other, self.raced = store, other, False
        self.bucket = store.bucket

    def key(self, *parts: str) -> str:
        return self.store.key(*parts)

    def read_json(self, key: str) -> tuple[dict[str, Any] | None, str | None]:
        return self.store.read_json(key)

    def write_json(self, key: str, document: dict[str, Any], *, if_match: str | None) -> str:
        if not self.raced:
            self.raced = True
            self.other()
        return self.store.write_json(key, document, if_match=if_match)


@pytest.mark.fault("s3: two imports promote the same version at once", "both succeed")
def test_two_imports_promoting_the_same_version_both_succeed(
    object_store: ObjectStore, monkeypatch: pytest.MonkeyPatch, fault_got: list[str]
) -> None:
    """The second writer's If-Match fails after the first made the same version current;
    reading again shows nothing left to do, which is success, not 'run again'."""
    from mirror.airgap.chart import promotion

    monkeypatch.setattr(promotion, "present_version", lambda *a, **k: None)
    promote(object_store, DOCS, "v1")
    raced = RacedBucket(object_store, lambda: promote(object_store, DOCS, "v2"))
    document = promote(raced, DOCS, "v2")  # type: ignore[arg-type]
    fault_got.append(f"both promoted, current {document.current}")
    assert raced.raced and document.current == "v2"
    current = layout.read_current(object_store, DOCS)
    assert current is not None and current.current == "v2"
    assert [entry.version for entry in current.history] == ["v1", "v2"]  # promoted once


@pytest.mark.fault(
    "s3: server out of volumes (No writable volumes)", "exit 75 naming space, bounded"
)
def test_a_full_server_is_named_and_bounded(
    tmp_path: Path, key_pair: tuple[Path, Path], fault_got: list[str]
) -> None:
    """A SeaweedFS with one volume, taken by a first bucket: every write to another bucket
    fails with a bare InternalError (its log says 'No writable volumes')."""
    with small_seaweed(tmp_path / "full", "full-bucket", volume_max=1) as (target, admin):
        admin.create_bucket(Bucket="first-bucket")  # takes the one volume there is
        admin.put_object(Bucket="first-bucket", Key="k", Body=b"x")
        admin.create_bucket(Bucket=target.bucket)
        set_dir = two_domains(tmp_path, key_pair, payload=4096)
        config = import_config(tmp_path, key_pair, target, deadline="20s")
        started = time.monotonic()
        result = mirror_cli("--config", str(config), "transfer", "import", str(set_dir))
        took = time.monotonic() - started
    fault_got.append(f"exit {result.returncode} after {took:.0f} s")
    assert result.returncode == 75, result.stderr
    assert "could not store it" in result.stderr and "out of space" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert took < 20 + 20 + 20  # the deadline, its last try, a busy machine's start and end
