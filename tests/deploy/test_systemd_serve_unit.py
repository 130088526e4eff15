"""systemd/mirror-serve.service: `mirror serve` on a host without Kubernetes runs the real
command line with the read-only S3 identity, caches in the cache directory the unit owns
(serve.cache_dir's default), scores as well as the other units and verifies."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from mirror.cli import cli
from mirror.config import settings_from_dict
from tests.fixtures.cli import REPO

UNIT = REPO / "systemd" / "mirror-serve.service"
ANALYZE = shutil.which("systemd-analyze")
needs_analyze = pytest.mark.skipif(ANALYZE is None, reason="systemd-analyze not installed")


def settings() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for line in UNIT.read_text().splitlines():
        if line and not line.startswith(("#", "[")) and "=" in line:
            key, value = line.split("=", 1)
            found.setdefault(key, []).append(value)
    return found


def test_the_unit_runs_mirror_serve_with_the_read_only_identity() -> None:
    found = settings()
    assert found["ExecStart"] == ["/usr/local/bin/mirror serve"]
    assert found["DynamicUser"] == ["yes"] and found["RestartPreventExitStatus"] == ["2"]
    assert found["Restart"] == ["on-failure"]
    assert found["ExecReload"] == ["/bin/kill -HUP $MAINPID"]  # SIGHUP: read the bucket now
    environment = dict(v.split("=", 1) for v in found["Environment"])
    assert environment["MIRROR_CONFIG"] == "/etc/mirror/config.toml"
    assert environment["AWS_EC2_METADATA_DISABLED"] == "true"
    (credential,) = found["LoadCredential"]
    name, source = credential.split(":", 1)
    assert environment["AWS_SHARED_CREDENTIALS_FILE"] == f"%d/{name}"
    assert "readonly" in source  # never the import's read/write keys
    # the cache directory the unit makes (and lets the dynamic user write) is the default
    (cache,) = found["CacheDirectory"]
    assert Path("/var/cache") / cache == settings_from_dict({}).serve.cache_dir
    assert "StateDirectory" not in found and "ReadWritePaths" not in found
    families = set(found["RestrictAddressFamilies"][0].split())
    assert {"AF_INET", "AF_INET6"} <= families  # listens, and reaches the object store
    done = CliRunner().invoke(cli, ["serve", "--help"])
    assert done.exit_code == 0, done.output


def service_lines(unit: Path) -> list[str]:
    """The setting lines of a unit's [Service] section."""
    section = unit.read_text().split("[Service]", 1)[1].split("\n[", 1)[0]
    return [line for line in section.splitlines() if line and not line.startswith("#")]


def test_the_hardening_is_the_other_units() -> None:
    """Every [Service] line of mirror.service is here, but its own readiness, timing, state
    and credential lines."""
    own = {"Type", "NotifyAccess", "ExecStart", "ExecReload", "WatchdogSec", "TimeoutStartSec"}
    own |= {"TimeoutStopSec", "StateDirectory", "StateDirectoryMode", "LoadCredential"}
    own |= {"Environment"}
    ours = service_lines(UNIT)
    theirs = service_lines(REPO / "systemd" / "mirror.service")
    assert len(theirs) > 40
    for line in theirs:
        if line.split("=", 1)[0] not in own:
            assert line in ours, line


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
    """verify insists that ExecStart exists: a copy runs an existing binary instead."""
    assert ANALYZE is not None
    copy = tmp_path / UNIT.name
    existing = shutil.which("true") or "/bin/true"
    copy.write_text(UNIT.read_text().replace("/usr/local/bin/mirror", existing))
    result = subprocess.run(
        [ANALYZE, "verify", str(copy)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0 and result.stderr.strip() == "", result.stderr
