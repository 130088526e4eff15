"""Logging set-up: JSON lines when not on a terminal, journald priorities, secret redaction.

Promises:
- one rule says when a process writes nothing but log records (`logs_only`): a service
  (`daemon`, `serve`, `transfer receive` without `--once`) whose stderr is not a terminal,
  any command whose stderr is journald's stream, and any command run with
  `MIRROR_LOG_FORMAT=json` (the Kubernetes Jobs). Then every line it writes, on stdout or
  stderr, is one JSON object: what it would print for a person is a log record on the
  same stream (mirror.cli.common; stdout's through `STDOUT_LOGGER`), and so is its fatal
  error, with its `exit_code` (mirror.cli.fail); at INFO unless `-q`, which never drops a
  service's address (the first stdout line a script waits for, as on a terminal) and
  drops the rest. `--json` still prints its document on stdout, as asked;
- a value registered with `register_secret` never reaches a log record's output,
  whatever message or argument carries it;
- under systemd (stderr is the stream named by `$JOURNAL_STREAM`) every line starts with
  its syslog priority `<N>` (sd-daemon(3)), so `journalctl -p warning` filters;
- on a terminal a line keeps the fields that tell runs apart (domain, version, run,
  job, state, replica) in a short `[domain=... run=...]` tail; JSON lines keep every field;
- once logging is set up, every retry scheduled through stamina is one readable warning
  naming what is retried, the attempt and the wait (`install_retry_log`); stamina is not
  imported for it: the hook goes in when the one module that retries through stamina is
  imported, so commands that never retry load neither stamina nor tenacity.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from stamina.instrumentation import RetryDetails

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


TERMINAL_FIELDS = (
    ("domain", "domain"),
    ("version", "version"),
    ("run_id", "run"),
    ("job_id", "job"),
    ("state", "state"),
    ("replica", "replica"),
)


class TerminalFormatter(RedactingFormatter):
    """`LEVEL logger: message [domain=... run=... job=... state=...]` for a person to read."""

    def __init__(self) -> None:
        super().__init__("%(levelname)s %(name)s: %(message)s")

    def formatMessage(self, record: logging.LogRecord) -> str:
        text = super().formatMessage(record)
        fields = [
            f"{label}={record.__dict__[key]}"
            for key, label in TERMINAL_FIELDS
            if record.__dict__.get(key) not in (None, "")
        ]
        return f"{text} [{' '.join(fields)}]" if fields else text


SYSLOG_PRIORITY = {
    logging.CRITICAL: 2,
    logging.ERROR: 3,
    logging.WARNING: 4,
    logging.INFO: 6,
    logging.DEBUG: 7,
}


def syslog_priority(levelno: int) -> int:
    """The syslog priority (crit 2 ... debug 7) of a logging level; a level between two
    takes the milder one."""
    for level in sorted(SYSLOG_PRIORITY, reverse=True):
        if levelno >= level:
            return SYSLOG_PRIORITY[level]
    return 7


class JournalFormatter(logging.Formatter):
    """Another formatter's text with `<N>` (the syslog priority) before every line."""

    def __init__(self, inner: logging.Formatter) -> None:
        super().__init__()
        self.inner = inner

    def format(self, record: logging.LogRecord) -> str:
        prefix = f"<{syslog_priority(record.levelno)}>"
        return "\n".join(prefix + line for line in self.inner.format(record).splitlines())


def journal_stream(stream: TextIO, environ: Mapping[str, str] | None = None) -> bool:
    """Whether `stream` is connected to journald: `$JOURNAL_STREAM` names its device:inode.

    The variable is inherited by children whose stderr may go elsewhere, so the
    descriptor itself is compared, as sd-daemon(3) and systemd.exec(5) advise.
    """
    value = (os.environ if environ is None else environ).get("JOURNAL_STREAM", "")
    device, _, inode = value.partition(":")
    if not (device.isdigit() and inode.isdigit()):
        return False
    try:
        status = os.fstat(stream.fileno())
    except (OSError, ValueError, AttributeError):
        return False
    return (status.st_dev, status.st_ino) == (int(device), int(inode))


LOG_FORMAT_ENV = "MIRROR_LOG_FORMAT"
"""`json`: every line a JSON log record, whatever the command (module docstring)."""


def logs_only(
    service: bool, stream: TextIO | None = None, environ: Mapping[str, str] | None = None
) -> bool:
    """Whether every line the process writes is a JSON log record (module docstring): a
    service off a terminal, a command whose stderr is the journal, or `MIRROR_LOG_FORMAT=json`."""
    environ = os.environ if environ is None else environ
    stream = sys.stderr if stream is None else stream
    if environ.get(LOG_FORMAT_ENV, "").strip().lower() == "json":
        return True
    if journal_stream(stream, environ):
        return True
    return service and not _isatty(stream)


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


_logs_only = False


def writing_logs_only() -> bool:
    """What `setup_logging` decided by `logs_only` for this process (False before it)."""
    return _logs_only


NOISY_LOGGERS = (
    "alembic",
    "httpx",
    "httpcore",
    "botocore",
    "boto3",
    "urllib3",
    "s3transfer",
    "werkzeug",
)


def setup_logging(
    verbosity: int = 0,
    *,
    json_lines: bool | None = None,
    journal: bool | None = None,
    service: bool = False,
) -> None:
    """Configure the root logger on stderr; JSON lines when stderr is not a terminal.

    `journal` (default: detected from `$JOURNAL_STREAM`) prefixes each line with its
    syslog priority. A `service` logs at INFO (unless quiet); so does a process that
    writes nothing but log records (`logs_only`), in JSON (unless `json_lines` says).
    """
    global _logs_only
    _logs_only = logs_only(service)
    if (service or _logs_only) and verbosity >= 0:
        verbosity = max(1, verbosity)
    if json_lines is None:
        json_lines = _logs_only or not sys.stderr.isatty()
    if journal is None:
        journal = journal_stream(sys.stderr)
    level = logging.WARNING - 10 * verbosity
    handler = logging.StreamHandler(sys.stderr)
    formatter: logging.Formatter = JsonFormatter() if json_lines else TerminalFormatter()
    handler.setFormatter(JournalFormatter(formatter) if journal else formatter)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(max(logging.DEBUG, min(logging.ERROR, level)))
    for noisy in NOISY_LOGGERS:
        logging.getLogger(noisy).setLevel(max(logging.WARNING, root.level))
    _stdout_records(logging.INFO if _logs_only else None)
    _want_retry_log()


STDOUT_LOGGER = "mirror.stdout"
"""Records of what a command writes on stdout, where it writes only log records: its
announcement and its report (mirror.cli.common), one JSON line each on stdout, where
they were (a script reading a service's first stdout line still finds its address)."""


def _stdout_records(level: int | None) -> None:
    """`STDOUT_LOGGER` on stdout, in JSON (with the journal's `<N>` where stdout is the
    journal's stream) at `level`; None: no handler of its own (it goes where the root's go).
    Its level is never the root's: what reaches it is what the command would print, and
    `-q` is applied where that is decided (mirror.cli.common: a report is dropped, a
    service's address never is). At the root's, `mirror -q serve` off a terminal said
    nothing on stdout and a script waiting for its address waited for ever."""
    out = logging.getLogger(STDOUT_LOGGER)
    if level is None:
        out.handlers[:], out.propagate = [], True
        return
    handler = logging.StreamHandler(sys.stdout)
    formatter = JsonFormatter()
    handler.setFormatter(JournalFormatter(formatter) if journal_stream(sys.stdout) else formatter)
    out.handlers[:], out.propagate = [handler], False
    out.setLevel(level)


retry_log = logging.getLogger("mirror.retry")


def log_retry(details: RetryDetails) -> None:
    """stamina's on-retry hook: one line naming what is retried, why, and the wait.

    Callers may describe the call in `kwargs` (`what`, `reason`, `attempts`); any other
    stamina-decorated function is named by its qualified name and its exception.
    """
    what = details.kwargs.get("what") or details.name
    cause = details.caused_by
    reason = details.kwargs.get("reason") or (
        f"{type(cause).__name__}: {' '.join(str(cause).split()) or 'no detail'}"
    )
    attempts = details.kwargs.get("attempts")
    retry_log.warning(
        "%s failed: %s; retrying in %.1fs (attempt %d%s)",
        what,
        reason,
        details.wait_for,
        details.retry_num + 1,
        f" of {attempts}" if attempts else "",
        extra={
            "retry_of": details.name,
            "retry_num": details.retry_num,
            "wait_seconds": round(details.wait_for, 3),
            "waited_seconds": round(details.waited_so_far, 3),
        },
    )


_retry_log_wanted = False


def _want_retry_log() -> None:
    global _retry_log_wanted
    _retry_log_wanted = True
    if "stamina" in sys.modules:
        install_retry_log()


def install_wanted_retry_log() -> None:
    """`install_retry_log` if `setup_logging` asked for it (called by the vendor client when
    it is imported; a library user who set up no logging keeps stamina's own hooks)."""
    if _retry_log_wanted:
        install_retry_log()


def install_retry_log() -> None:
    """Replace stamina's raw `stamina.retry_scheduled` log line by `log_retry`, keeping its
    Prometheus counter `stamina_retries_total`."""
    from stamina.instrumentation import PrometheusOnRetryHook, set_on_retry_hooks

    set_on_retry_hooks([PrometheusOnRetryHook, log_retry])


def redacted_url(url: str) -> str:
    """`url` with any password in its user info hidden, for logs, messages and `config check`
    (a presigned link's query is `mirror.links.safe_url`'s job)."""
    if "://" in url and "@" in url:
        scheme, rest = url.split("://", 1)
        credentials, host = rest.rsplit("@", 1)
        user = credentials.split(":", 1)[0]
        return f"{scheme}://{user}:***@{host}"
    return url
