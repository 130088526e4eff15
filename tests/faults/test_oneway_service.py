"""`mirror transfer receive` as the long-running service it is (no --once), over loopback UDP
with the real sender and, with --import, the real S3 server (issue 38, classes 1 and 2):

- forged datagrams with a right CRC that ended the service with "unexpected" are dropped and
  counted (its --metrics say by which reason), and the real set sent next lands;
- a set the import refuses (one the bucket already has) is logged, counted and kept in
  DIR/refused/ with its reason, and the next set lands and is imported;
- a set that lands while the object store is away is imported when it is back, and one
  that lands while the store refuses the credentials (exit 4) is imported once they are
  fixed, never put aside in refused/ (what `transfer import` exits 5 for);
- forged DATA for a forged large file fills the spool's disk: the forged session is removed
  and the service goes on (it ended with exit 75 before, and again at each restart);
  a forged table claiming more than `transfer.spool_budget` is never taken.

Every wait is on a condition polled to a generous deadline (a file, a counter)."""

from __future__ import annotations

import contextlib
import signal
import socket
import subprocess
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from mirror.airgap.s3.objectstore import ObjectStore
from mirror.config import TargetSettings
from mirror.oneway import wire
from tests.fixtures.cli import mirror_cli, start_mirror, write_config
from tests.fixtures.forged import (
    SYMBOL,
    filler,
    forged_table,
    packet,
    sha,
    status,
    table_datagrams,
)
from tests.fixtures.s3 import (
    TEST_CREDENTIALS,
    free_port,
    import_config,
    packed_set,
    transfer_config,
)
from tests.fixtures.udp import free_udp_port, wait_bound
from tests.fixtures.wire import Proxy

DEADLINE = 180.0
DOCS = ("docs.example.com", "2026-11-20", 3000)
API = ("api.example.com", "2026-11-21", 3000)


class Receiving:
    """A receiver service started on a free port with --metrics; stopped by SIGTERM."""

    def __init__(self, config: list[str], spool: Path, *extra: str, **start: Any) -> None:
        self.config, self.spool = config, spool
        self.port, self.metrics_port = free_udp_port(), free_port()
        self.to = f"127.0.0.1:{self.port}"
        self.process = start_mirror(
            *config, "transfer", "receive", str(spool), "--listen", self.to,
            "--metrics", f"127.0.0.1:{self.metrics_port}", *extra,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **start,
        )  # fmt: skip
        wait_bound(self.port)

    def send(self, set_dir: Path) -> None:
        sent = mirror_cli(*self.config, "transfer", "send", str(set_dir),
                          "--to", self.to, "--rate", "4MiB", "--passes", "2")  # fmt: skip
        assert sent.returncode == 0, sent.stderr

    def counter(self, name: str, label: str = "") -> float:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/", timeout=30) as got:
            text = got.read().decode()
        wanted = f"{name}{{{label}}}" if label else name
        values = [line.split()[-1] for line in text.splitlines() if line.startswith(wanted + " ")]
        return float(values[0]) if values else 0.0

    def until(self, what: str, holds: Callable[[], bool]) -> None:
        deadline = time.monotonic() + DEADLINE
        while not self._holds(holds):
            if self.process.poll() is not None:
                raise AssertionError(f"the receiver ended before {what}: {self.stop()}")
            assert time.monotonic() < deadline, f"no {what} within {DEADLINE:.0f} s"
            time.sleep(0.1)

    def _holds(self, holds: Callable[[], bool]) -> bool:
        try:
            return holds()
        except OSError:  # its --metrics gone with it: said by the poll that follows
            return False

    def stop(self) -> tuple[int, str, str]:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        out, err = self.process.communicate(timeout=120)
        return self.process.returncode, out, err


@contextlib.contextmanager
def receiving(config: list[str], spool: Path, *extra: str, **start: Any) -> Iterator[Receiving]:
    service = Receiving(config, spool, *extra, **start)
    try:
        yield service
    finally:
        if service.process.poll() is None:
            service.process.kill()
            service.process.communicate(timeout=120)


def forged_datagrams() -> list[bytes]:
    """One of each forgery that ended the service before (issue 38's and the parsers')."""
    good, good_table = forged_table(60, [["x", 3 * 200 * SYMBOL, sha(61)]])
    made = [
        wire.build(wire.Kind.TABLE, 1, 0, 5, 2, b"{}"),  # a fragment index past its count
        wire.build(wire.Kind.TABLE, 1, 0, 0, 2, b"{"),
        *table_datagrams(*forged_table(62, [["x", -1, sha(63)]])),  # a size of -1
        *table_datagrams(*forged_table(64, [], symbol_size=70000)),
        *table_datagrams(*forged_table(65, [["a", 1, sha(66)], ["a/b", 1, sha(67)]])),
        *table_datagrams(*forged_table(68, [["x", float("inf"), sha(69)]])),
        *table_datagrams(good, good_table),
        wire.build(wire.Kind.DATA, good, 1, 0, 0, b""),  # a Rust panic in the decoder
        wire.build(wire.Kind.DATA, good, 1, 0, 0, b"\5" + packet()[1:]),
        status(wire.Kind.END, 70, [1, 1]),
        status(wire.Kind.HEARTBEAT, 71, {"pass": 1e999, "passes": 1}),
    ]
    return made


def test_forged_datagrams_are_counted_and_the_real_set_lands(
    tmp_path: Path, key_pair: tuple[Path, Path]
) -> None:
    set_dir = packed_set(tmp_path, key_pair, [DOCS], name="set-1")
    spool = tmp_path / "spool"
    with receiving(["--defaults"], spool, "--trusted-key", str(key_pair[1])) as service:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            for datagram in forged_datagrams():
                sock.sendto(datagram, ("127.0.0.1", service.port))
        total = "mirror_oneway_dropped_datagrams_total"
        reasons = ("table_fragment", "table", "data", "status")
        service.until(
            "every forgery counted",
            lambda: all(service.counter(total, f'reason="{r}"') >= 1 for r in reasons),
        )
        service.send(set_dir)
        service.until("the real set", (spool / "set-1" / "manifest.json").is_file)
        assert service.counter(total, 'reason="table"') == 4
        code, out, err = service.stop()
    assert code == 0, err
    assert f"landed set-1 in {spool / 'set-1'}" in err and out == ""  # a service: its log
    assert "unexpected" not in err and "dropped a datagram (table)" in err


def send_all(port: int, datagrams: list[bytes]) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        for datagram in datagrams:
            sock.sendto(datagram, ("127.0.0.1", port))


def test_forged_data_that_fills_the_disk_does_not_stop_the_service(
    tmp_path: Path, key_pair: tuple[Path, Path], small_filesystem: Callable[[int], Path]
) -> None:
    """W1, as the trial ran it: a forged table with a 1 GiB file (within the default budget)
    and random DATA for 20 blocks (5.6 MiB) into a 3 MiB spool."""
    set_dir = packed_set(tmp_path, key_pair, [DOCS], name="set-1")
    spool = small_filesystem(3 * 1024 * 1024) / "spool"
    with receiving(["--defaults"], spool, "--trusted-key", str(key_pair[1])) as service:
        send_all(service.port, filler(400, blocks=20, claim=1 << 30)[1])
        removed = "mirror_oneway_removed_sessions_total"
        service.until("the forged session removed", lambda: service.counter(removed) >= 1)
        service.send(set_dir)
        service.until("the real set", (spool / "set-1" / "manifest.json").is_file)
        code, out, err = service.stop()
    assert code == 0, err
    assert f"landed set-1 in {spool / 'set-1'}" in err and out == ""  # a service: its log
    assert "the disk holding the spool is full" in err and "unexpected" not in err
    assert [p.name for p in (spool / ".oneway").iterdir() if len(p.name) == 16] == []


def test_a_forged_table_over_the_configured_spool_budget_is_never_taken(
    tmp_path: Path, key_pair: tuple[Path, Path]
) -> None:
    set_dir = packed_set(tmp_path, key_pair, [DOCS], name="set-1")
    document = transfer_config(tmp_path / "store", key_pair, spool_budget="1MiB")
    config = ["--config", str(write_config(tmp_path / "budget.toml", document))]
    spool = tmp_path / "spool"
    with receiving(config, spool, "--trusted-key", str(key_pair[1])) as service:
        session, forged = filler(410, blocks=2, claim=2 * 1024 * 1024)
        send_all(service.port, forged)
        dropped = "mirror_oneway_dropped_datagrams_total"
        service.until("the table dropped", lambda: service.counter(dropped, 'reason="table"') >= 1)
        service.send(set_dir)  # about 8 KiB: within the budget
        service.until("the real set", (spool / "set-1" / "manifest.json").is_file)
        code, _, err = service.stop()
    assert code == 0, err
    assert "over the spool budget of 1.0 MiB (transfer.spool_budget)" in err
    assert not (spool / ".oneway" / f"{session:016x}").exists()


@pytest.mark.s3
def test_a_refused_set_is_kept_aside_and_the_service_imports_the_next(
    tmp_path: Path,
    key_pair: tuple[Path, Path],
    target_settings: TargetSettings,
    object_store: ObjectStore,
) -> None:
    config = import_config(tmp_path, key_pair, target_settings)
    first = packed_set(tmp_path, key_pair, [DOCS], name="set-a")
    imported = mirror_cli("--config", str(config), "transfer", "import", str(first))
    assert imported.returncode == 0, imported.stderr
    second = packed_set(tmp_path, key_pair, [API], name="set-b")
    spool = tmp_path / "spool"
    with receiving(["--config", str(config)], spool, "--import") as service:
        service.send(first)  # the bucket has it already: exit 5 for `transfer import`
        reason = spool / "refused" / "set-a.reason"
        aside = spool / "refused" / "set-a" / "manifest.json"
        # the reason is written first, the set moved after it: wait for both
        service.until("set-a refused", lambda: reason.is_file() and aside.is_file())
        assert not (spool / "set-a").exists()
        service.send(second)
        imports = "mirror_oneway_imports_total"
        service.until("set-b imported", lambda: service.counter(imports, 'outcome="imported"') == 1)
        assert service.counter(imports, 'outcome="refused"') == 1
        code, out, err = service.stop()
    assert code == 0, err
    assert " exit 5: " in reason.read_text() and "already" in reason.read_text()
    assert "set-a refused by the import, kept aside in" in err
    assert "imported set 2 from test-connected" in out
    keys = [o["Key"] for o in object_store.client.list_objects_v2(
        Bucket=object_store.bucket).get("Contents", [])]  # fmt: skip
    assert any("api.example.com" in key for key in keys), keys


class SwitchedProxy(Proxy):
    """The object store behind a switch: while `away`, every connection is closed at once."""

    def __init__(self, upstream: str) -> None:
        self.away = threading.Event()
        super().__init__(upstream)

    def serve(self, conn: socket.socket) -> None:
        if self.away.is_set():
            conn.close()
            return
        super().serve(conn)


@pytest.mark.s3
def test_a_set_landed_while_the_store_is_away_is_imported_when_it_is_back(
    tmp_path: Path,
    key_pair: tuple[Path, Path],
    target_settings: TargetSettings,
    object_store: ObjectStore,
) -> None:
    with SwitchedProxy(target_settings.endpoint_url or "") as proxy:
        config = import_config(tmp_path, key_pair, target_settings, endpoint_url=proxy.url,
                               deadline="4s", read_timeout="2s")  # fmt: skip
        set_dir = packed_set(tmp_path, key_pair, [DOCS], name="set-1")
        spool = tmp_path / "spool"
        proxy.away.set()
        with receiving(["--config", str(config)], spool, "--import") as service:
            service.send(set_dir)
            imports = "mirror_oneway_imports_total"
            service.until("the import deferred", lambda: service.counter(
                imports, 'outcome="deferred"') >= 1)  # fmt: skip
            assert (spool / ".oneway" / "pending" / "set-1").exists()
            assert not object_store.client.list_objects_v2(Bucket=object_store.bucket).get(
                "KeyCount", 0
            )
            proxy.away.clear()
            service.until("the import", lambda: service.counter(
                imports, 'outcome="imported"') == 1)  # fmt: skip
            code, out, err = service.stop()
    assert code == 0, err
    assert "set-1 landed but cannot be imported now" in err
    assert "imported set 1 from test-connected" in out
    assert not (spool / ".oneway" / "pending" / "set-1").exists()
    assert object_store.client.list_objects_v2(Bucket=object_store.bucket).get("KeyCount", 0) > 0


def credentials_file(path: Path, secret: str) -> Path:
    path.write_text(
        f"[default]\naws_access_key_id = {TEST_CREDENTIALS['AWS_ACCESS_KEY_ID']}\n"
        f"aws_secret_access_key = {secret}\n"
    )
    return path


@pytest.mark.s3
def test_a_set_landed_while_the_credentials_are_refused_is_imported_once_they_are_fixed(
    tmp_path: Path,
    key_pair: tuple[Path, Path],
    target_settings: TargetSettings,
    object_store: ObjectStore,
) -> None:
    """W3: a good set met S3's refusal of the credentials (exit 4) and was moved to refused/
    for good. It stays pending, each try one log line, and the fixed credentials file (read
    at each try, as boto3 does) imports it with no restart and no work by hand."""
    config = import_config(tmp_path, key_pair, target_settings)
    set_dir = packed_set(tmp_path, key_pair, [DOCS], name="set-1")
    spool = tmp_path / "spool"
    secrets = credentials_file(tmp_path / "credentials", "wrong-secret-value")
    env = {"AWS_SHARED_CREDENTIALS_FILE": str(secrets), "HOME": str(tmp_path)}
    with receiving(["--config", str(config)], spool, "--import", env=env,
                   s3_credentials=False) as service:  # fmt: skip
        service.send(set_dir)
        imports = "mirror_oneway_imports_total"
        service.until("the import deferred", lambda: service.counter(
            imports, 'outcome="deferred"') >= 1)  # fmt: skip
        assert (spool / ".oneway" / "pending" / "set-1").exists()
        assert not (spool / "refused").exists() and (spool / "set-1").is_dir()
        credentials_file(secrets, TEST_CREDENTIALS["AWS_SECRET_ACCESS_KEY"])
        service.until("the import", lambda: service.counter(
            imports, 'outcome="imported"') == 1)  # fmt: skip
        deferred = service.counter(imports, 'outcome="deferred"')
        assert service.counter(imports, 'outcome="refused"') == 0
        code, out, err = service.stop()
    assert code == 0, err
    said = [line for line in err.splitlines() if "cannot be imported until this is fixed" in line]
    assert len(said) == deferred and "(exit 4)" in said[0], err
    assert "wrong-secret-value" not in err + out
    assert "imported set 1 from test-connected" in out
    assert not (spool / ".oneway" / "pending" / "set-1").exists()
    assert object_store.client.list_objects_v2(Bucket=object_store.bucket).get("KeyCount", 0) > 0
