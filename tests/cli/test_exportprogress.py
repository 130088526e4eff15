"""The export run's live display (mirror.cli.exportprogress) and the foundation it builds on."""

from __future__ import annotations

import io
import re
import subprocess
import sys

from rich.console import Console

from mirror.cli.exportprogress import ExportProgress
from mirror.export.outcome import RunEvent
from mirror.store.models import RunState

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
MIB = 1024 * 1024


def test_the_display_follows_the_job_then_the_download_in_binary_units() -> None:
    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=True, color_system=None, width=150)
    with ExportProgress("docs.example.com", console) as display:
        display.update(RunEvent("docs.example.com", 1, RunState.STARTED, "se_1", 40.0, 12))
        display.progress.refresh()
        display.update(RunEvent("docs.example.com", 1, RunState.DOWNLOADING, "se_1", None, None))
        for done in (MIB, 2 * MIB, 4 * MIB):
            display.update(
                RunEvent(
                    "docs.example.com", 1, RunState.DOWNLOADING, "se_1", None, None, done, 4 * MIB
                )
            )
        display.update(RunEvent("docs.example.com", 1, RunState.STORED, "se_1"))
    lines = ANSI.sub("", buffer.getvalue()).splitlines()
    assert any("docs.example.com: vendor export running (job se_1)" in line for line in lines)
    assert any("12 pages" in line for line in lines)
    final = [line for line in lines if line.strip()][-2:]
    assert "docs.example.com: stored" in final[0]
    assert "docs.example.com: bundle" in final[1] and "4.0/4.0 MiB" in final[1]
    assert " MB" not in "\n".join(lines)


def test_the_byte_counter_loads_nothing_of_the_connected_side() -> None:
    code = (
        "import sys, mirror.cli.progress; "
        "print(sorted(m for m in sys.modules if m.startswith(('mirror.', 'sqlalchemy'))))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True
    ).stdout
    assert "mirror.cli.progress" in loaded
    for above in ("mirror.export", "mirror.store", "mirror.vendorapi", "sqlalchemy"):
        assert f"'{above}" not in loaded, loaded
