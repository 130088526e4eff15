"""The fault table: every test marked `fault` is one row of what `make faults` prints.

Mark a test `@pytest.mark.fault("8.1 resumed download, object changed", "restart from zero")`
(case, expected). The `fault_got` fixture lets the test say what it saw (one short
line, e.g. "exit 0, sha256 = new object's"); otherwise the row shows the outcome.
The table prints after the run: case, expected, got, PASS/FAIL.
"""

from __future__ import annotations

import re
from collections.abc import Generator
from dataclasses import dataclass, field

import pytest

GOT_KEY = pytest.StashKey[list[str]]()


@dataclass
class FaultRow:
    case: str
    expected: str
    got: str = ""
    outcome: str = "FAIL"


@dataclass
class FaultTable:
    rows: dict[str, FaultRow] = field(default_factory=dict)


TABLE = FaultTable()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "fault(case, expected): one row of the fault table that make faults prints"
    )


@pytest.fixture
def fault_got(request: pytest.FixtureRequest) -> list[str]:
    """Append one short line describing what the test observed."""
    got: list[str] = []
    request.node.stash[GOT_KEY] = got
    return got


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, None]:
    outcome = yield
    report = outcome.get_result()
    marker = item.get_closest_marker("fault")
    if marker is None:
        return
    case, expected = [*marker.args, "", ""][:2]
    row = TABLE.rows.setdefault(item.nodeid, FaultRow(str(case), str(expected)))
    if report.when == "call" or (report.when == "setup" and not report.passed):
        got = "; ".join(item.stash.get(GOT_KEY, []))
        if report.skipped:
            row.outcome = "SKIP"
            row.got = got or "skipped"
        elif report.passed:
            row.outcome = "PASS"
            row.got = got or "as expected"
        else:
            row.outcome = "FAIL"
            crash = getattr(report.longrepr, "reprcrash", None)
            message = str(getattr(crash, "message", "")).splitlines()
            row.got = got or (message[0][:80] if message else "failed")
    elif report.when == "teardown" and report.failed:
        row.outcome = "FAIL"
        row.got = (row.got + "; " if row.got else "") + "teardown failed"


def _natural(text: str) -> list[tuple[int, str]]:
    """Sort key that puts 8.4 before 8.10."""
    return [(int(t), "") if t.isdigit() else (-1, t) for t in re.split(r"(\d+)", text)]


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not TABLE.rows:
        return
    rows = sorted(TABLE.rows.values(), key=lambda r: _natural(r.case))
    headers = ("case", "expected", "got", "result")
    table = [(r.case, r.expected, r.got, r.outcome) for r in rows]
    caps = (60, 60, 100, 6)
    widths = [
        min(cap, max(len(h), *(len(t[i]) for t in table)))
        for i, (h, cap) in enumerate(zip(headers, caps, strict=True))
    ]

    def line(cells: tuple[str, ...]) -> str:
        return "| " + " | ".join(c[:w].ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"

    terminalreporter.section("fault table")
    terminalreporter.write_line(line(headers))
    terminalreporter.write_line("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for cells in table:
        terminalreporter.write_line(line(cells))
    failed = sum(1 for r in rows if r.outcome == "FAIL")
    terminalreporter.write_line(f"{len(rows) - failed} of {len(rows)} fault cases as expected")
