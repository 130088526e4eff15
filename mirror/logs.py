"""Logging set-up: JSON lines for journald when not on a terminal, and secret redaction.

Promise: a value registered with `register_secret` never reaches a log record's
output, whatever message or argument carries it.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
from datetime import UTC, datetime
from typing import Any

_secrets: set[str] = set()
_secrets_lock = threading.Lock()
REDACTED = "***"


def register_secret(value: str | None) -> None:
    """Remember a secret so that every log line redacts it."""
    if value and len(value) >= 4:
        with _secrets_lock:
            _secrets.add(value)


def redact(text: str) -> str:
    """`text` with every registered secret replaced by ***."""
    with _secrets_lock:
        secrets = sorted(_secrets, key=len, reverse=True)
    for secret in secrets:
        if secret in text:
            text = text.replace(secret, REDACTED)
    return text


_STANDARD_ATTRS = set(logging.makeLogRecord({}).__dict__) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    """One JSON object a line: time, level, logger, event text and any `extra=` fields."""

    def format(self, record: logging.LogRecord) -> str:
        document: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key not in _STANDARD_ATTRS and not key.startswith("_"):
                document[key] = value
        if record.exc_info:
            document["exception"] = self.formatException(record.exc_info)
        return redact(json.dumps(document, default=str))


class RedactingFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return redact(super().format(record))


def setup_logging(verbosity: int = 0, *, json_lines: bool | None = None) -> None:
    """Configure the root logger on stderr; JSON lines when stderr is not a terminal."""
    if json_lines is None:
        json_lines = not sys.stderr.isatty()
    level = logging.WARNING - 10 * verbosity
    handler = logging.StreamHandler(sys.stderr)
    if json_lines:
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(RedactingFormatter("%(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(max(logging.DEBUG, min(logging.ERROR, level)))
    for noisy in ("httpx", "httpcore", "botocore", "boto3", "urllib3", "s3transfer", "werkzeug"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, root.level))
