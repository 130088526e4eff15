"""What identifies the object behind a bundle link, so bytes of two objects never meet.

A resumed download sends `If-Range` with the first answer's strong ETag (else its
Last-Modified), as RFC 9110 says, and compares every answer's validators and
`Content-Range` total with the first answer's. The first answer's validator is kept in
`<partial>.validator`, written durably before any byte of its object, so a later process
compares too. `ResumeGuard` holds that bookkeeping for one download: any difference is a
`Restart` (start over from zero); a length that contradicts the vendor's is an
`IntegrityError`.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx

from mirror.errors import IntegrityError
from mirror.fsutil import VALIDATOR_SUFFIX, atomic_write_bytes

_CONTENT_RANGE = re.compile(r"^\s*bytes\s+(?:(\d+)-(\d+)|\*)/(\d+|\*)\s*$")


class Restart(Exception):
    """The server sent the whole body again or a range we did not ask for: start over."""


@dataclass(frozen=True)
class Validator:
    """What identifies the object behind a link: strong ETag, Last-Modified, complete length."""

    etag: str | None
    last_modified: str | None
    total: int | None

    @classmethod
    def of(cls, response: httpx.Response, total: int | None) -> Validator:
        return cls(response.headers.get("ETag"), response.headers.get("Last-Modified"), total)

    def if_range(self) -> str | None:
        """The If-Range value: a strong ETag, else the Last-Modified date (RFC 9110 13.1.5)."""
        if self.etag and not self.etag.startswith("W/"):
            return self.etag
        return self.last_modified

    def difference(self, answer: Validator) -> str | None:
        """Why `answer` may come from another object than this one; None when it matches."""
        if (self.etag or answer.etag) and self.etag != answer.etag:
            return f"ETag {self.etag} became {answer.etag}"
        if (self.last_modified or answer.last_modified) and (
            self.last_modified != answer.last_modified
        ):
            return f"Last-Modified {self.last_modified} became {answer.last_modified}"
        if self.total is not None and answer.total is not None and self.total != answer.total:
            return f"the object's length {self.total} became {answer.total}"
        return None


def validator_path(dest: Path) -> Path:
    """Where the validator of a partial file is kept, next to it."""
    return dest.with_name(dest.name + VALIDATOR_SUFFIX)


def load_validator(dest: Path) -> Validator | None:
    """The recorded validator of a partial file; None when absent or unreadable."""
    try:
        data = json.loads(validator_path(dest).read_text())
        return Validator(
            etag=data.get("etag"), last_modified=data.get("last_modified"), total=data.get("total")
        )
    except (OSError, ValueError, AttributeError, TypeError):
        return None


def save_validator(dest: Path, validator: Validator) -> None:
    """Record the validator durably before any byte of its object is written."""
    atomic_write_bytes(validator_path(dest), json.dumps(asdict(validator)).encode())


def parse_content_range(value: str | None) -> tuple[int | None, int | None]:
    """(first byte, complete length) from `bytes A-B/N` or `bytes */N`; None where unknown."""
    match = _CONTENT_RANGE.match(value or "")
    if match is None:
        return None, None
    first = int(match.group(1)) if match.group(1) is not None else None
    total = int(match.group(3)) if match.group(3) != "*" else None
    return first, total


class ResumeGuard:
    """The object one download's bytes belong to: its validator and its expected length.

    `expected` is the vendor's announced length, else the one the server first told;
    `announced` is the vendor's alone, what a restart from zero falls back to.
    """

    def __init__(self, dest: Path, announced: int | None) -> None:
        self.dest = dest
        self.validator: Validator | None = None
        self.expected = announced
        self.announced = announced

    def forget(self) -> None:
        """The partial file was emptied: a length learnt from the server was that object's."""
        self.validator = None
        self.expected = self.announced

    def if_range(self) -> str | None:
        return self.validator.if_range() if self.validator is not None else None

    def check_announced(self, size: int, source: str, job_id: str) -> None:
        if self.expected is None:
            self.expected = size
        elif size != self.expected:
            raise IntegrityError(
                f"bundle of job {job_id}: {source} announces {size} bytes, "
                f"expected {self.expected}; run the export again"
            )

    def announce(self, size: int, job_id: str) -> None:
        """A fresh link announced `size`: it must agree with what is expected."""
        self.check_announced(size, "the fresh link", job_id)
        self.announced = size

    def accept(self, answer: Validator, offset: int, job_id: str) -> None:
        """Check the answer comes from the same object as the bytes so far; record it first."""
        if self.validator is not None and offset > 0:
            difference = self.validator.difference(answer)
            if difference is not None:
                raise Restart(f"the object behind the link changed ({difference})")
        if answer.total is not None and self.expected is not None and answer.total != self.expected:
            if offset > 0:
                raise Restart(
                    f"the server's object has {answer.total} bytes, {self.expected} were announced"
                )
            self.check_announced(answer.total, "the server", job_id)  # from the start: refused
        if answer != self.validator:
            save_validator(self.dest, answer)
            self.validator = answer
        if self.expected is None:
            self.expected = answer.total

    def complete_at(self, total: int | None, offset: int) -> bool:
        """A 416 whose total is what the file already holds (and what was recorded): done."""
        known = self.validator.total if self.validator is not None else None
        return total is not None and total == offset and known in (None, total)
