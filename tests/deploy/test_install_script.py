"""deploy/install.sh's own refusals, before it reads anything of the artefact."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.fixtures.cli import REPO


def test_a_key_file_that_is_not_there_is_one_line_not_openssls_noise(tmp_path: Path) -> None:
    """It printed openssl's `Could not open file or uri ... No such file or directory` and
    its decoder errors, then its own line; now its own line only, exit 2 (a usage error)."""
    missing = tmp_path / "transfer.pub"
    for options in (["--check-only"], []):
        done = subprocess.run(
            ["sh", str(REPO / "deploy" / "install.sh"), *options, "--key", str(missing)],
            capture_output=True,
            text=True,
            check=False,
            cwd=tmp_path,
            timeout=60,
        )
        assert done.returncode == 2, done.stderr
        assert done.stderr.splitlines() == [
            f"install.sh: --key {missing}: no such readable file (the connected side's "
            "transfer.pub)"
        ]
        assert done.stdout == ""
