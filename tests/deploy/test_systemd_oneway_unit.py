"""systemd/mirror-oneway-receive.service: the receiver's unit runs the real command line,
keeps its spool in its state directory, scores as well as the daemon's unit and verifies."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from mirror.cli import cli

UNIT = Path(__file__).resolve().parents[2] / "systemd" / "mirror-oneway-receive.service"
ANALYZE = shutil.which("systemd-analyze")
needs_analyze = pytest.mark.skipif(ANALYZE is None, reason="systemd-analyze not installed")


def settings() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for line in UNIT.read_text().splitlines():
        if line and not line.startswith(("#", "[")) and "=" in line:
            key, value = line.split("=", 1)
            found.setdefault(key, []).append(value)
    return found


def exec_argv() -> list[str]:
    values = dict(v.split("=", 1) for v in settings()["Environment"])
    line = settings()["ExecStart"][0]
    return re.sub(r"\$\{(\w+)\}", lambda m: values[m.group(1)], line).split()


def test_the_unit_runs_transfer_receive_into_its_state_directory() -> None:
    found = settings()
    argv = exec_argv()
    assert argv[:3] == ["/usr/local/bin/mirror", "transfer", "receive"]
    assert argv[3].startswith(f"/var/lib/{found['StateDirectory'][0]}/")
    assert "--once" not in argv  # a service: every set, until stopped
    assert found["DynamicUser"] == ["yes"] and found["RestartPreventExitStatus"] == ["2"]
    # the options parse: the same command with --help exits 0
    done = CliRunner().invoke(cli, [*argv[1:], "--help"])
    assert done.exit_code == 0, done.output


@needs_analyze
def test_security_exposure_is_at_most_1_5() -> None:
    assert ANALYZE is not None
    result = subprocess.run(
        [ANALYZE, "security", "--offline=yes", "--no-pager", str(UNIT)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    match = re.search(r"Overall exposure level for \S+: (\d+(?:\.\d+)?)", result.stdout)
    assert match, result.stdout + result.stderr
    assert float(match.group(1)) <= 1.5, result.stdout


@needs_analyze
def test_verify_is_clean(tmp_path: Path) -> None:
    assert ANALYZE is not None
    copy = tmp_path / UNIT.name
    existing = shutil.which("true") or "/bin/true"
    copy.write_text(UNIT.read_text().replace("/usr/local/bin/mirror", existing))
    result = subprocess.run(
        [ANALYZE, "verify", str(copy)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0 and result.stderr.strip() == "", result.stderr
