from __future__ import annotations

import io
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mirror.logs import (
    JsonFormatter,
    RedactingFormatter,
    TerminalFormatter,
    journal_stream,
    redact,
    register_secret,
    syslog_priority,
)


def _format(formatter: logging.Formatter, message: str, *args: object, **extra: object) -> str:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(formatter)
    logger = logging.getLogger("test-logs")
    logger.handlers[:] = [handler]
    logger.propagate = False
    logger.setLevel(logging.INFO)
    logger.info(message, *args, extra=extra)
    return stream.getvalue()


def test_registered_secret_never_reaches_output() -> None:
    secret = "mint_logs_secret_value_123"
    register_secret(secret)
    assert redact(f"Bearer {secret}") == "Bearer ***"
    text = _format(RedactingFormatter("%(message)s"), "key is %s", secret)
    assert secret not in text and "***" in text
    line = _format(JsonFormatter(), "header %s", f"Bearer {secret}", domain="docs.a.test")
    assert secret not in line
    document = json.loads(line)
    assert document["domain"] == "docs.a.test"
    assert document["level"] == "info"


def test_json_lines_carry_extra_fields() -> None:
    document = json.loads(_format(JsonFormatter(), "export state", run_id=7, state="started"))
    assert document["message"] == "export state"
    assert document["run_id"] == 7 and document["state"] == "started"
    assert "time" in document


def test_short_values_are_not_treated_as_secrets() -> None:
    register_secret("abc")
    assert redact("abc") == "abc"


# --- journald priorities -------------------------------------------------------------------------

_EMIT = """
import logging
from mirror.logs import setup_logging
setup_logging(2, json_lines={json_lines})
log = logging.getLogger("mirror.test")
log.debug("debug line")
log.info("info line", extra={{"domain": "docs.a.test"}})
log.warning("warning line")
log.error("error line")
try:
    raise ValueError("boom")
except ValueError:
    log.exception("failed with a traceback")
"""


def _emit(tmp_path: Path, *, journal: str | None, json_lines: bool = True) -> list[str]:
    """Run a real Python process whose stderr is a file; `journal` is "same", "other" or None."""
    log_path = tmp_path / "stderr.log"
    with open(log_path, "wb") as stderr:
        status = os.fstat(stderr.fileno())
        env = {k: v for k, v in os.environ.items() if k != "JOURNAL_STREAM"}
        if journal == "same":
            env["JOURNAL_STREAM"] = f"{status.st_dev}:{status.st_ino}"
        elif journal == "other":
            env["JOURNAL_STREAM"] = f"{status.st_dev}:{status.st_ino + 1}"
        subprocess.run(
            [sys.executable, "-c", _EMIT.format(json_lines=json_lines)],
            stderr=stderr,
            env=env,
            check=True,
            timeout=60,
        )
    return log_path.read_text().splitlines()


def test_journal_stream_lines_carry_syslog_priorities(tmp_path: Path) -> None:
    lines = _emit(tmp_path, journal="same")
    assert [line[:3] for line in lines] == ["<7>", "<6>", "<4>", "<3>", "<3>"]
    documents = [json.loads(line[3:]) for line in lines]
    assert [d["message"] for d in documents][:4] == [
        "debug line",
        "info line",
        "warning line",
        "error line",
    ]
    assert documents[1]["domain"] == "docs.a.test"
    assert "ValueError: boom" in documents[4]["exception"]


def test_every_line_of_a_multi_line_record_is_prefixed(tmp_path: Path) -> None:
    lines = _emit(tmp_path, journal="same", json_lines=False)
    assert len(lines) > 5  # the traceback spans lines
    assert all(line.startswith(("<7>", "<6>", "<4>", "<3>")) for line in lines)
    assert lines[1] == "<6>INFO mirror.test: info line [domain=docs.a.test]"
    assert lines[-1] == "<3>ValueError: boom"


def test_no_prefix_when_stderr_is_not_the_journal_stream(tmp_path: Path) -> None:
    for journal in (None, "other"):
        lines = _emit(tmp_path, journal=journal)
        assert all(line.startswith("{") for line in lines), lines


def test_journal_stream_detection() -> None:
    with open(os.devnull, "w") as stream:
        status = os.fstat(stream.fileno())
        assert journal_stream(stream, {"JOURNAL_STREAM": f"{status.st_dev}:{status.st_ino}"})
        assert not journal_stream(stream, {"JOURNAL_STREAM": f"{status.st_dev}:0"})
        assert not journal_stream(stream, {"JOURNAL_STREAM": "garbage"})
        assert not journal_stream(stream, {})
    assert not journal_stream(io.StringIO(), {"JOURNAL_STREAM": "1:2"})
    assert [syslog_priority(n) for n in (50, 40, 35, 30, 20, 10, 5)] == [2, 3, 4, 4, 6, 7, 7]


# --- terminal lines ------------------------------------------------------------------------------


def test_terminal_lines_keep_the_fields_that_tell_runs_apart() -> None:
    line = _format(
        TerminalFormatter(),
        "export state",
        domain="docs.a.test",
        run_id=7,
        job_id="se_1",
        state="started",
        replica="host-b",
        bytes_done=10,
    )
    assert line == (
        "INFO test-logs: export state "
        "[domain=docs.a.test run=7 job=se_1 state=started replica=host-b]\n"
    )
    assert _format(TerminalFormatter(), "plain") == "INFO test-logs: plain\n"
    document = json.loads(
        _format(JsonFormatter(), "export state", domain="d", run_id=7, bytes_done=10)
    )
    assert document["bytes_done"] == 10 and document["run_id"] == 7


def test_terminal_lines_redact_secrets_in_fields_too() -> None:
    register_secret("mint_terminal_secret_42")
    line = _format(TerminalFormatter(), "calling", domain="mint_terminal_secret_42")
    assert "mint_terminal_secret_42" not in line and "domain=***" in line


# --- retries ---------------------------------------------------------------------------------

_RETRY_HOOKS = """
import sys
from mirror.logs import setup_logging
{before}
from stamina.instrumentation import get_on_retry_hooks
print(sorted(getattr(h, "__name__", type(h).__name__) for h in get_on_retry_hooks()))
"""


@pytest.mark.parametrize(
    "before",
    [
        "setup_logging(); import mirror.vendorapi.client",  # a command module loaded after
        "import mirror.vendorapi.client; setup_logging()",  # the CLI resolves it first
        "setup_logging()",  # a command that never retries
    ],
)
def test_retries_log_mirrors_line_once_logging_is_set_up(before: str) -> None:
    code = _RETRY_HOOKS.format(before=before.replace("; ", "\n"))
    if "client" not in before:  # stamina is only loaded here, to read its hooks
        code = code.replace(
            "from stamina",
            "assert 'stamina' not in sys.modules\nimport mirror.vendorapi.client\nfrom stamina",
        )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert "log_retry" in result.stdout


def test_a_library_user_without_logging_keeps_staminas_hooks() -> None:
    code = _RETRY_HOOKS.format(before="import mirror.vendorapi.client")
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert "log_retry" not in result.stdout
