"""Trial of the real-S3 import as an operator at 2 a.m. and an attacker would try it:
a document damaged on its way back from the server, then written back by the import.

Each case runs the real `mirror transfer import` against the S3 server `make test` starts.
"""

from __future__ import annotations

import hashlib
import io
import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from mirror.airgap import layout
from mirror.airgap.s3.multipart import Staging
from mirror.airgap.s3.objectstore import ObjectStore
from mirror.config import TargetSettings
from mirror.errors import MirrorError
from tests.fixtures.cli import mirror_cli
from tests.fixtures.s3 import (
    READ_ONLY_CREDENTIALS,
    WITHIN_DEADLINE,
    bucket_listing,
    import_config,
    packed_set,
    small_seaweed,
    timed_against,
)
from tests.fixtures.wire import DamagingResponseProxy, SilentServer, TricklingServer

pytestmark = pytest.mark.s3

DOCS = "docs.example.com"
SHORT = {"deadline": "2s", "read_timeout": "2s"}
"""A dead endpoint's bounds where its wait is not the case."""
MiB = 1024 * 1024


def pack_version(tmp_path: Path, key_pair: tuple[Path, Path], label: str) -> Path:
    """A set holding `label` of DOCS (the store is shared, so each set carries one more)."""
    return packed_set(tmp_path, key_pair, [(DOCS, label, 4096)], name=f"set-{label}")


@pytest.mark.fault(
    "s3: index.json damaged on its way back to the import (one bit, still valid JSON)",
    "refused, the stored index keeps every entry as it was",
)
def test_an_index_damaged_on_the_way_back_is_not_written_back(
    tmp_path: Path,
    key_pair: tuple[Path, Path],
    target_settings: TargetSettings,
    object_store: ObjectStore,
    fault_got: list[str],
) -> None:
    """The import reads index.json, adds its entry and writes the whole document back with
    If-Match: a bit flipped in what it read must not become what is stored."""
    first = pack_version(tmp_path, key_pair, "2026-11-21")
    plain = import_config(tmp_path, key_pair, target_settings)
    assert mirror_cli("--config", str(plain), "transfer", "import", str(first)).returncode == 0
    before = layout.read_index(object_store, DOCS)
    assert before is not None
    second = pack_version(tmp_path, key_pair, "2026-11-22")
    index_path = f"GET /{object_store.bucket}/{layout.index_key(object_store, DOCS)}".encode()
    # the import reads the index twice: the check before any upload, then the update
    with DamagingResponseProxy(
        target_settings.endpoint_url, index_path, b'"sha256": "', nth=2
    ) as proxy:
        config = import_config(tmp_path, key_pair, target_settings, endpoint_url=proxy.url)
        result = mirror_cli("--config", str(config), "transfer", "import", str(second))
    after = layout.read_index(object_store, DOCS)
    assert after is not None
    kept = {e.version: e.sha256 for e in after.versions}
    same = kept.get("2026-11-21") == before.versions[0].sha256
    fault_got.append(
        f"flipped {proxy.flipped}, exit {result.returncode}, "
        f"first entry {'kept' if same else 'DAMAGED'}"
    )
    assert proxy.flipped == 1
    assert kept["2026-11-21"] == before.versions[0].sha256, result.stderr
    assert result.returncode == 5, result.stderr
    assert "damaged on the way" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    again = mirror_cli("--config", str(plain), "transfer", "import", str(second))  # "run again"
    assert again.returncode == 0, again.stderr
    index = layout.read_index(object_store, DOCS)
    assert index is not None and index.labels() == ["2026-11-21", "2026-11-22"]
    assert index.versions[0].sha256 == before.versions[0].sha256


@pytest.mark.fault(
    "s3: the import given the cluster's read-only identity (target check, then import)",
    "both exit 4 naming a refused write, one line, no secret",
)
def test_a_read_only_identity_is_named_alike_by_target_check_and_import(
    tmp_path: Path,
    key_pair: tuple[Path, Path],
    target_settings: TargetSettings,
    object_store: ObjectStore,
    fault_got: list[str],
) -> None:
    """An operator at 2 a.m. pastes the cluster's keys (read and list only) into the import
    host. `target check` is what the README says to run first: it must say what import will
    say (exit 4, the credentials may not write), not exit 2 with a bare AccessDenied."""
    read_only = {
        "AWS_ACCESS_KEY_ID": READ_ONLY_CREDENTIALS["AWS_ACCESS_KEY_ID"],
        "AWS_SECRET_ACCESS_KEY": READ_ONLY_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
    }
    config = import_config(tmp_path, key_pair, target_settings)
    set_dir = pack_version(tmp_path, key_pair, "2026-11-21")
    check = mirror_cli("--config", str(config), "target", "check", env=read_only)
    imported = mirror_cli(
        "--config", str(config), "transfer", "import", str(set_dir), env=read_only
    )
    fault_got.append(f"check exit {check.returncode}, import exit {imported.returncode}")
    secret = read_only["AWS_SECRET_ACCESS_KEY"]
    for result in (check, imported):
        assert result.returncode == 4, result.stderr
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
        assert "may not write" in result.stderr, result.stderr
        assert secret not in result.stdout + result.stderr
    assert "AccessDenied" in check.stdout
    assert bucket_listing(object_store.client, object_store.bucket) == {}


@pytest.mark.fault(
    "s3: endpoint answers one byte a second for ever (trickle)", "exit 75 within deadline"
)
def test_a_trickling_endpoint_ends_within_the_deadline(
    tmp_path: Path,
    key_pair: tuple[Path, Path],
    target_settings: TargetSettings,
    fault_got: list[str],
) -> None:
    """target.deadline promises that one request, retries included, ends within the deadline
    plus one read timeout; a server that sends a byte within every read timeout must not hold
    the operator's terminal for ever."""
    with TricklingServer() as server:
        try:
            result, took = timed_against(
                tmp_path, key_pair, target_settings, server.url, "target", "check", timeout=90
            )
        except subprocess.TimeoutExpired:
            fault_got.append("still waiting after 90 s")
            pytest.fail("target check still waited for the trickling endpoint after 90 s")
    fault_got.append(f"exit {result.returncode} after {took:.1f} s")
    assert result.returncode == 75, result.stderr
    assert server.url in result.stderr
    assert took < WITHIN_DEADLINE


class ThenOther(io.BytesIO):
    """A part source that, once its first part has been read, lets `other` run to the end:
    another import of the same key finishes (and sweeps this upload) while this one still
    has parts to send."""

    def __init__(self, data: bytes, after: int, other: Callable[[], None]) -> None:
        super().__init__(data)
        self.after, self.other, self.ran = after, other, False

    def read(self, size: int | None = -1, /) -> bytes:
        if not self.ran and self.tell() >= self.after:
            self.ran = True
            self.other()
        return super().read(size)


@pytest.mark.fault(
    "s3: two imports of one set at once; the faster completes while the slower sends parts",
    "both succeed (the slower finds the object there)",
)
def test_an_upload_swept_while_its_parts_are_sent_finds_the_object_there(
    object_store: ObjectStore, fault_got: list[str]
) -> None:
    """Double-launched imports of one set (a timer and an operator): the faster one's sweep
    aborts the slower one's upload of a key it has just published. The slower one's next
    part meets NoSuchUpload: the object is there, with the same sha256, so that is success,
    not exit 1 "upload part failed with NoSuchUpload"."""
    store = ObjectStore(object_store.client, object_store.bucket, part_size=5 * MiB, workers=2)
    data = os.urandom(12 * MiB)
    sha = hashlib.sha256(data).hexdigest()
    key = store.key(DOCS, "v1", "bundle.tar.gz")

    def faster() -> None:
        with Staging(store) as other:
            other.stage(key, io.BytesIO(data), sha256=sha, size=len(data))
            assert other.complete() == {key: "created"}

    try:
        with Staging(store) as slower:
            slower.stage(key, ThenOther(data, 5 * MiB, faster), sha256=sha, size=len(data))
            outcome: object = slower.complete()
    except MirrorError as exc:
        outcome = f"exit {exc.exit_code}: {exc}"
    fault_got.append(str(outcome)[:70])
    assert outcome == {key: "exists"}
    assert object_store.client.list_multipart_uploads(Bucket=store.bucket).get("Uploads", []) == []
    assert object_store.head(key) is not None


@pytest.mark.fault(
    "s3: SeaweedFS fills up half-way through a blob's parts",
    "exit 75 naming space, one line, nothing published, no upload left open",
)
def test_a_server_that_fills_up_mid_import_publishes_nothing(
    tmp_path: Path, key_pair: tuple[Path, Path], fault_got: list[str]
) -> None:
    """One 16 MiB volume for the bucket: the probe and the first parts fit, a later part
    meets 'No writable volumes'."""
    small = small_seaweed(tmp_path / "full", "fills-up", volume_max=1, volume_size_mb=16)
    with small as (target, admin):
        admin.create_bucket(Bucket=target.bucket)
        set_dir = packed_set(tmp_path, key_pair, [(DOCS, "2026-11-21", 48 * MiB)])
        config = import_config(tmp_path, key_pair, target, deadline="20s")
        started = time.monotonic()
        result = mirror_cli("--config", str(config), "transfer", "import", str(set_dir))
        took = time.monotonic() - started
        listing = bucket_listing(admin, target.bucket)
        uploads = admin.list_multipart_uploads(Bucket=target.bucket).get("Uploads", [])
    fault_got.append(f"exit {result.returncode} after {took:.0f} s, {len(uploads)} open uploads")
    assert result.returncode == 75, result.stderr
    assert "out of space" in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert listing == {}
    assert uploads == []


@pytest.mark.fault(
    "config: target.endpoint_url with a user name and password in it",
    "the password in no output (as config check redacts it), reachable or not",
)
def test_a_password_in_the_endpoint_url_is_never_printed(
    tmp_path: Path,
    key_pair: tuple[Path, Path],
    target_settings: TargetSettings,
    fault_got: list[str],
) -> None:
    """Some operators put a reverse proxy's basic-auth login in the URL (`config check`
    redacts it); every S3 message and `--json` document names the endpoint, so it must be
    redacted there too."""
    host = target_settings.endpoint_url.split("://", 1)[1]
    with SilentServer() as dead:
        dead_host = dead.url.split("://", 1)[1]
    results = []
    for where, expected in ((host, 0), (dead_host, 75)):
        bound = SHORT if expected else {}  # the live store keeps the default on a busy machine
        config = import_config(
            tmp_path,
            key_pair,
            target_settings,
            endpoint_url=f"http://admin:hunter2-pw@{where}",
            **bound,
        )
        for json_flag in ([], ["--json"]):
            result = mirror_cli("--config", str(config), *json_flag, "target", "check")
            results.append(result)
            assert "hunter2-pw" not in result.stdout + result.stderr
            assert result.returncode == expected, result.stderr
    fault_got.append(", ".join(f"exit {r.returncode}" for r in results))
