"""An operator's mistakes with `transfer send|receive` on loopback: every one is one line
`mirror: error: ...` with the documented exit code, nothing sent that was not asked for, and
the resend command an incomplete receiver prints is run exactly as printed."""

from __future__ import annotations

import shlex
import socket
import subprocess
from pathlib import Path

import pytest

from tests.fixtures.cli import cli_env, mirror_argv, mirror_cli
from tests.fixtures.udp import free_udp_port, wait_bound
from tests.oneway.conftest import packed_set  # noqa: F401  (the fixture)


def one_error_line(done: subprocess.CompletedProcess[str], code: int) -> str:
    lines = done.stderr.strip().splitlines()
    assert done.returncode == code, (done.returncode, done.stderr)
    assert len(lines) == 1 and lines[0].startswith("mirror: error: "), done.stderr
    assert "unexpected" not in lines[0], lines[0]
    return lines[0]


def send(set_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return mirror_cli("--defaults", "transfer", "send", str(set_dir), *args, timeout=60)


@pytest.mark.parametrize(
    ("args", "code", "said"),
    [
        (["--to", "no-such-host.invalid:7400"], 2, "no-such-host.invalid"),
        (["--mtu", "70000"], 2, "--mtu"),
        (["--rate", "0"], 2, "--rate"),
        (["--only", "manifest.json:5-3"], 2, "manifest.json"),
        (["--only", "manifest.json:99"], 2, "manifest.json"),
        (["--only", "manifest.json:0-99999999999"], 2, "manifest.json"),
    ],
)
def test_a_send_the_operator_got_wrong_is_one_line(
    packed_set: Path,  # noqa: F811
    args: list[str],
    code: int,
    said: str,
) -> None:
    to = ["--to", f"127.0.0.1:{free_udp_port()}"] if "--to" not in args else []
    line = one_error_line(send(packed_set, *to, *args), code)
    assert said in line


def test_a_receiver_that_cannot_bind_says_why_in_one_line(
    tmp_path: Path, key_pair: tuple[Path, Path]
) -> None:
    key = str(key_pair[1])
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as taken:
        taken.bind(("127.0.0.1", 0))
        port = taken.getsockname()[1]
        busy = mirror_cli("--defaults", "transfer", "receive", str(tmp_path / "spool"),
                          "--listen", f"127.0.0.1:{port}", "--once", "--key", key)  # fmt: skip
    assert f"127.0.0.1:{port}" in one_error_line(busy, 75)
    nowhere = mirror_cli("--defaults", "transfer", "receive", str(tmp_path / "spool"),
                         "--listen", "192.0.2.1:7400", "--once", "--key", key)  # fmt: skip
    assert "192.0.2.1:7400" in one_error_line(nowhere, 2)
    with socket.socket() as metrics_taken:
        metrics_taken.bind(("127.0.0.1", 0))
        metrics_taken.listen()
        at = f"127.0.0.1:{metrics_taken.getsockname()[1]}"
        clash = mirror_cli("--defaults", "transfer", "receive", str(tmp_path / "spool"),
                           "--listen", f"127.0.0.1:{free_udp_port()}", "--metrics", at,
                           "--once", "--key", key)  # fmt: skip
    assert f"--metrics {at}" in one_error_line(clash, 75)


def test_the_resend_a_wildcard_receiver_prints_runs_as_printed(
    tmp_path: Path,
    key_pair: tuple[Path, Path],
    packed_set: Path,  # noqa: F811
) -> None:
    """The README's receiver listens on 0.0.0.0: the resend must name the address the
    sender used and the set's own directory, so it runs from anywhere on the connected side."""
    port = free_udp_port()
    spool = tmp_path / "spool"

    def receive() -> subprocess.Popen[str]:
        return subprocess.Popen(
            mirror_argv("--defaults", "transfer", "receive", str(spool), "--listen",
                        f"0.0.0.0:{port}", "--once", "--key", str(key_pair[1])),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cli_env(),
        )  # fmt: skip

    receiver = receive()
    wait_bound(port)
    sent = send(packed_set, "--to", f"127.0.0.1:{port}", "--only", "manifest.json")
    assert sent.returncode == 0, sent.stderr
    _, err = receiver.communicate(timeout=60)
    assert receiver.returncode == 75, err
    printed = err.strip().splitlines()[-1].split("on the connected side run: ", 1)[1].rstrip(")")
    argv = shlex.split(printed)
    assert argv[:4] == ["mirror", "transfer", "send", str(packed_set)]
    assert argv[argv.index("--to") + 1] == f"127.0.0.1:{port}"

    receiver = receive()
    wait_bound(port)
    resent = subprocess.run(mirror_argv("--defaults", *argv[1:]), capture_output=True, text=True,
                            env=cli_env(), cwd=tmp_path, timeout=60, check=False)  # fmt: skip
    assert resent.returncode == 0, resent.stderr
    _, err = receiver.communicate(timeout=60)
    assert receiver.returncode == 0, err
    assert (spool / packed_set.name / "manifest.json").is_file()


@pytest.mark.parametrize("seconds", ["-5", "0", "nan", "inf"])
def test_an_idle_timeout_that_is_no_positive_number_is_a_usage_error(
    tmp_path: Path, key_pair: tuple[Path, Path], seconds: str
) -> None:
    done = mirror_cli("--defaults", "transfer", "receive", str(tmp_path / "spool"),
                      "--listen", f"127.0.0.1:{free_udp_port()}", "--once",
                      "--key", str(key_pair[1]), "--idle-timeout", seconds)  # fmt: skip
    assert "not a positive number of seconds" in one_error_line(done, 2)
    assert not (tmp_path / "spool").exists()
