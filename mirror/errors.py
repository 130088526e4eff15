"""One error hierarchy for the whole tool.

Every class carries the exit code from the design's contract, so the CLI maps
errors to exit codes in one place. Messages are one line, written for an
operator, and never contain a secret.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_NOT_FOUND = 3
EXIT_AUTH = 4
EXIT_INTEGRITY = 5
EXIT_TEMPORARY = 75


class MirrorError(Exception):
    """Base class: an operation failed (exit 1)."""

    exit_code = EXIT_FAILED
    document: dict[str, object] | None = None
    """With --json, the CLI prints this (the command's own document) instead of the bare
    error document, with `error` and `exit_code` added."""

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message if not self.hint else f"{self.message} ({self.hint})"


class OperationFailed(MirrorError):
    """The operation ran and failed, e.g. the vendor's export job failed."""


class ConfigError(MirrorError):
    """Usage or configuration error (exit 2)."""

    exit_code = EXIT_USAGE


class NotFound(MirrorError):
    """A job, domain, version or file does not exist (exit 3)."""

    exit_code = EXIT_NOT_FOUND


class AuthError(MirrorError):
    """Credentials refused (exit 4)."""

    exit_code = EXIT_AUTH


class IntegrityError(MirrorError):
    """Hash, signature, size, replay or unsafe-archive failure (exit 5)."""

    exit_code = EXIT_INTEGRITY


class TemporaryFailure(MirrorError):
    """Worth retrying later (exit 75). `retry_after` is seconds, when known."""

    exit_code = EXIT_TEMPORARY

    def __init__(
        self, message: str, *, hint: str | None = None, retry_after: float | None = None
    ) -> None:
        super().__init__(message, hint=hint)
        self.retry_after = retry_after


class Interrupted(TemporaryFailure):
    """Work stopped on request (SIGTERM); its state was saved and it will resume."""
