"""`make demo` runs `mirror demo`: the whole pipeline must work on embedded defaults."""

from __future__ import annotations

import re
from pathlib import Path

from mirror.demo import DOMAINS, run_demo


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
    assert re.search(r"static-export/docs\.acme\.test/[0-9.-]+/bundle\.tar\.gz +3\.0 MiB", output)
    assert "static-export/docs.acme.test/index.json" in output
    values = (tmp_path / "demo" / "values.yaml").read_text()
    assert "staticExport:" in values and "bundleUrl:" in values and "enabled: true" in values
    assert f"$ cat {tmp_path / 'demo' / 'values.yaml'}" in output
    key = (tmp_path / "demo" / "admin-api-key").read_text()
    assert key not in output
    assert list((tmp_path / "demo" / "store" / "tmp").iterdir()) == []
