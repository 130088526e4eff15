"""HTTP Range handling for downloads, as S3 does it (one range; others ignored)."""

from __future__ import annotations

import re
from dataclasses import dataclass

_RANGE = re.compile(r"\s*bytes\s*=\s*(\d*)\s*-\s*(\d*)\s*")


@dataclass(frozen=True)
class ByteRange:
    start: int
    end: int  # inclusive

    @property
    def length(self) -> int:
        return self.end - self.start + 1

    def content_range(self, size: int) -> str:
        return f"bytes {self.start}-{self.end}/{size}"


UNSATISFIABLE = ByteRange(-1, -2)


def parse_range(header: str | None, size: int) -> ByteRange | None:
    """The one range to serve, None to serve the whole body, or UNSATISFIABLE (416).

    Malformed headers and multi-range requests are ignored (whole body), per RFC 9110.
    """
    if header is None:
        return None
    match = _RANGE.fullmatch(header)
    if match is None:
        return None
    first, last = match.group(1), match.group(2)
    if not first and not last:
        return None
    if not first:
        suffix = int(last)
        if suffix == 0 or size == 0:
            return UNSATISFIABLE
        return ByteRange(max(size - suffix, 0), size - 1)
    start = int(first)
    if last and int(last) < start:
        return None
    if start >= size:
        return UNSATISFIABLE
    end = min(int(last), size - 1) if last else size - 1
    return ByteRange(start, end)
