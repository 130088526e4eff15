"""systemd/mirror.service: hardening score and a clean `systemd-analyze verify`.

`verify` checks that ExecStart's binary exists, and /usr/local/bin/mirror is not
installed on a development machine, so the unit is verified through a copy (same
name, same content) whose ExecStart points at an existing binary.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.fixtures.cli import REPO

UNIT = REPO / "systemd" / "mirror.service"
ANALYZE = shutil.which("systemd-analyze")
MAX_EXPOSURE = 1.5

needs_analyze = pytest.mark.skipif(ANALYZE is None, reason="systemd-analyze not installed")


def unit_settings() -> dict[str, list[str]]:
    settings: dict[str, list[str]] = {}
    for line in UNIT.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith(("#", ";", "[")) and "=" in line:
            key, value = line.split("=", 1)
            settings.setdefault(key.strip(), []).append(value.strip())
    return settings


def test_unit_has_the_required_settings() -> None:
    settings = unit_settings()
    assert settings["Type"] == ["notify"]
    assert settings["ExecStart"] == ["/usr/local/bin/mirror daemon"]
    assert settings["RestartPreventExitStatus"] == ["2"]
    assert settings["StateDirectory"] == ["mirror"]
    assert settings["ConfigurationDirectory"] == ["mirror"]
    assert settings["LoadCredential"] == ["admin-api-key:/etc/mirror/admin-api-key"]
    assert settings["Restart"] == ["on-failure"]
    assert settings["DynamicUser"] == ["yes"]
    assert "WatchdogSec" in settings
    assert "TimeoutStopSec" in settings
    families = settings["RestrictAddressFamilies"][0].split()
    assert {"AF_INET", "AF_INET6", "AF_UNIX"} <= set(families)
    assert "IPAddressDeny" not in settings
    assert "PrivateNetwork" not in settings


@needs_analyze
def test_security_exposure_is_at_most_1_5() -> None:
    assert ANALYZE is not None
    result = subprocess.run(
        [ANALYZE, "security", "--offline=yes", "--no-pager", str(UNIT)],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    match = re.search(r"Overall exposure level for \S+: (\d+(?:\.\d+)?)", result.stdout)
    assert match, result.stdout + result.stderr
    assert float(match.group(1)) <= MAX_EXPOSURE, result.stdout


@needs_analyze
def test_verify_is_clean(tmp_path: Path) -> None:
    assert ANALYZE is not None
    copy = tmp_path / UNIT.name
    text = UNIT.read_text()
    assert "ExecStart=/usr/local/bin/mirror daemon" in text
    existing = shutil.which("true") or "/bin/true"
    copy.write_text(text.replace("ExecStart=/usr/local/bin/mirror daemon", f"ExecStart={existing}"))
    result = subprocess.run(
        [ANALYZE, "verify", str(copy)],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stderr.strip() == "", result.stderr
