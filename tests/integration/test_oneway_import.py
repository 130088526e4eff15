"""`transfer receive --once --import` over loopback UDP into the real S3 server: the set sent
by `transfer send` lands, verifies and is published by the ordinary import, receipt and all.
(Loopback needs no root; the faithful one-way rig is tests/oneway/test_link.py.)"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from mirror.airgap.s3.objectstore import ObjectStore
from mirror.config import TargetSettings
from tests.fixtures.cli import mirror_cli, start_mirror
from tests.fixtures.s3 import import_config
from tests.fixtures.udp import free_udp_port, wait_bound
from tests.oneway.conftest import packed_set  # noqa: F401  (the fixture)

pytestmark = pytest.mark.s3


def test_receive_import_publishes_the_set_it_landed(
    tmp_path: Path,
    key_pair: tuple[Path, Path],
    packed_set: Path,  # noqa: F811
    target_settings: TargetSettings,
    object_store: ObjectStore,
) -> None:
    config = import_config(tmp_path, key_pair, target_settings)
    spool = tmp_path / "spool"
    port = free_udp_port()
    to = f"127.0.0.1:{port}"
    receiver = start_mirror(
        "--config", str(config), "transfer", "receive", str(spool), "--listen", to,
        "--once", "--import", "--idle-timeout", "30",
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    wait_bound(port)  # a datagram sent before the receiver binds is lost
    sent = mirror_cli("--config", str(config), "transfer", "send", str(packed_set),
                      "--to", to, "--rate", "4MiB", "--passes", "2")  # fmt: skip
    assert sent.returncode == 0, sent.stderr
    out, err = receiver.communicate(timeout=120)
    assert receiver.returncode == 0, (out, err)
    assert f"landed set-1 in {spool / 'set-1'}" in out
    assert "imported set 1 from test-connected" in out
    assert (spool / "set-1" / "receipt.json").is_file()
    assert object_store.client.list_objects_v2(Bucket=object_store.bucket).get("KeyCount", 0) > 0
