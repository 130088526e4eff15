"""The one-way link where its erasure code is missing, as an aarch64 host has it: PyPI has
raptorq's wheel for x86_64 only, so the installer leaves it out there (pyproject's marker).

Here the offline artefact is installed by its own install.sh (the run's one install,
tests/fixtures/artefact.py), which says the link is there; a copy of the installed venv then
has raptorq removed: what the operator of such a host meets.
The installer says so, and `transfer send` / `transfer receive` are each one line, exit 2,
before the set is read or the port bound."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.fixtures.artefact import Installed, copied_venv, offline_env
from tests.fixtures.cli import write_config
from tests.fixtures.udp import free_udp_port
from tests.oneway.conftest import packed_set  # noqa: F401  (the fixture)

LACKS = (
    "mirror: error: transfer send and transfer receive need the one-way link, which this "
    "installation lacks: raptorq is not installed (install.sh of the offline installer brings it)"
)


def run(
    argv: list[str], cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=600, check=False
    )


def test_without_raptorq_the_installer_says_so_and_send_and_receive_are_one_line(
    installed: Installed,
    packed_set: Path,  # noqa: F811
    key_pair: tuple[Path, Path],
    tmp_path: Path,
) -> None:
    assert "  one-way link (transfer send, transfer receive): yes" in installed.said.splitlines()
    venv = tmp_path / "venv"  # a copy of the run's installed venv, raptorq then removed
    python = str(copied_venv(installed, venv))
    mirror = str(venv / "bin" / "mirror")
    removed = run([python, "-m", "pip", "uninstall", "-y", "raptorq"])
    assert removed.returncode == 0, removed.stderr
    env = {**offline_env(), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}

    report = run([python, "-m", "mirror.features"], env=env)
    assert report.returncode == 0, report.stderr
    assert report.stdout.splitlines()[1] == (
        "  one-way link (transfer send, transfer receive): no: raptorq is not installed; "
        "install.sh of the offline installer brings it"
    )

    to = ["--to", "127.0.0.1:9"]
    sent = run([mirror, "--defaults", "transfer", "send", str(packed_set), *to], env=env)
    assert (sent.returncode, sent.stderr.splitlines(), sent.stdout) == (2, [LACKS], "")

    trusting = {"target": {"transfer_keys": [str(key_pair[1])]}}
    config = write_config(tmp_path / "config.toml", trusting)
    spool = tmp_path / "spool"
    listen = ["--listen", f"127.0.0.1:{free_udp_port()}", "--once"]
    receive = [mirror, "--config", str(config), "transfer", "receive", str(spool), *listen]
    received = run(receive, env=env)
    assert (received.returncode, received.stderr.splitlines()) == (2, [LACKS])
    assert not spool.exists()
