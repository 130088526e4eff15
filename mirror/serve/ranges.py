"""Conditional and range requests on one bundle, as RFC 9110 says (pure: headers in, a plan out).

Order of evaluation (RFC 9110 section 13.2.2): `If-None-Match` first (a match is 304 for
GET and HEAD), then `Range`, only for GET (section 14.2: HEAD and other methods ignore
it), only in `bytes` units, and only when `If-Range` (if sent) holds an entity tag that
STRONGLY matches ours (a date or a weak tag never matches: the service sends no
Last-Modified, and its tags are strong). One range is served as 206 with Content-Range; a
list of several is answered whole (200, which the RFC allows); a range that starts at or
past the end is 416 with `Content-Range: bytes */SIZE`; a malformed Range is ignored.

A position is read with a bound: digits are ASCII only, and a number of more than
`MAX_DIGITS` digits (leading zeros aside) is taken as "past any end" without converting it
(Python refuses to convert more than 4 300 digits, and no bundle is that large). So a
first position that large is 416, a last position that large means the end (206), and a
suffix that large means the whole bundle (206), as the RFC reads for any number too large.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

_RANGE = re.compile(r"^\s*([0-9]*)\s*-\s*([0-9]*)\s*$", re.ASCII)
MAX_DIGITS = 18
BEYOND = 10**MAX_DIGITS
"""Any position of more than MAX_DIGITS digits: past the end of every bundle."""
_TAG = re.compile(r'\s*((?:W/)?"[^"]*")\s*(?:,|$)')


@dataclass(frozen=True)
class Plan:
    """What to answer: the status, the bytes `[start, start + length)` of the bundle to send
    (none for 304 and 416), and the Content-Range header when there is one."""

    status: int
    start: int = 0
    length: int = 0
    content_range: str | None = None


def plan(method: str, headers: Mapping[str, str], etag: str, size: int) -> Plan:
    """The answer to `method` with these request `headers` (names lower-case) for a bundle
    of `size` bytes whose strong entity tag is `etag` (quoted)."""
    if_none_match = headers.get("if-none-match")
    if if_none_match is not None and _weakly_named(if_none_match, etag):
        return Plan(304)
    whole = Plan(200, 0, size)
    wanted = headers.get("range")
    if method != "GET" or wanted is None:
        return whole
    if_range = headers.get("if-range")
    if if_range is not None and if_range.strip() != etag:
        return whole
    return _ranged(wanted, size) or whole


def _weakly_named(header: str, etag: str) -> bool:
    """Whether an If-None-Match list names `etag` (weak comparison: W/ is ignored)."""
    if header.strip() == "*":
        return True
    return etag in [tag.removeprefix("W/") for tag in _TAG.findall(header)]


def _ranged(header: str, size: int) -> Plan | None:
    """The plan of one byte range, 416 for an unsatisfiable one, None to answer whole."""
    unit, _, spec = header.partition("=")
    if unit.strip().lower() != "bytes" or not spec or "," in spec:
        return None
    match = _RANGE.match(spec)
    if match is None or not (match.group(1) or match.group(2)):
        return None
    first, last = match.group(1), match.group(2)
    if not first:  # a suffix: the last N bytes
        count = min(_position(last), size)
        if count == 0:
            return _unsatisfiable(size)
        return _part(size - count, size - 1, size)
    start = _position(first)
    end = min(_position(last), size - 1) if last else size - 1
    if last and _position(last) < start:
        return None  # invalid: ignored (RFC 9110 section 14.1.1)
    if start >= size:
        return _unsatisfiable(size)
    return _part(start, end, size)


def _position(digits: str) -> int:
    """A run of ASCII digits as a number, BEYOND when it has more than MAX_DIGITS."""
    digits = digits.lstrip("0") or "0"
    return BEYOND if len(digits) > MAX_DIGITS else int(digits)


def _part(start: int, end: int, size: int) -> Plan:
    return Plan(206, start, end - start + 1, f"bytes {start}-{end}/{size}")


def _unsatisfiable(size: int) -> Plan:
    return Plan(416, content_range=f"bytes */{size}")
