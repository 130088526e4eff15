from __future__ import annotations

import io
import json
import logging

from mirror.logs import JsonFormatter, RedactingFormatter, redact, register_secret


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
