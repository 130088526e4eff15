"""`transfer receive` on a spool that fills up or cannot be written: one line with the
documented exit code (75 for a full disk, 2 for a spool that is read-only), never a
traceback reported as "unexpected"."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

from tests.fixtures.cli import cli_env, mirror_argv, mirror_cli
from tests.fixtures.udp import free_udp_port, wait_bound
from tests.oneway.conftest import packed_set  # noqa: F401  (the fixture)


def test_a_spool_that_fills_up_is_exit_75_in_one_line(
    small_filesystem: Callable[[int], Path],
    key_pair: tuple[Path, Path],
    packed_set: Path,  # noqa: F811  (about 3 MiB)
) -> None:
    spool = small_filesystem(256 * 1024) / "spool"
    port = free_udp_port()
    receiver = subprocess.Popen(
        mirror_argv("--defaults", "transfer", "receive", str(spool), "--listen",
                    f"127.0.0.1:{port}", "--once", "--idle-timeout", "5",
                    "--key", str(key_pair[1])),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cli_env(),
    )  # fmt: skip
    wait_bound(port)
    sent = mirror_cli("--defaults", "transfer", "send", str(packed_set),
                      "--to", f"127.0.0.1:{port}", "--rate", "8MiB")  # fmt: skip
    assert sent.returncode == 0, sent.stderr
    _, err = receiver.communicate(timeout=60)
    lines = err.strip().splitlines()
    assert receiver.returncode == 75, err
    assert len(lines) == 1 and lines[0].startswith("mirror: error: no space left"), err
    assert "store.path" not in err and "free space there and run the same command" in err


def test_a_read_only_spool_is_exit_2_in_one_line(
    small_filesystem: Callable[[int], Path], key_pair: tuple[Path, Path]
) -> None:
    point = small_filesystem(64 * 1024)
    subprocess.run(["mount", "-o", "remount,ro", str(point)], check=True)
    done = mirror_cli("--defaults", "transfer", "receive", str(point / "spool"), "--listen",
                      f"127.0.0.1:{free_udp_port()}", "--once",
                      "--key", str(key_pair[1]))  # fmt: skip
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2, done.stderr
    assert len(lines) == 1 and "cannot write" in lines[0] and "unexpected" not in lines[0]
