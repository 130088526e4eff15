"""Durations (`30s`, `10m`, `6h`, `7d`) and sizes (`512MiB`) of the settings."""

from __future__ import annotations

import re

_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_SIZE_UNITS = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1000,
    "kib": 1024,
    "m": 1000**2,
    "mb": 1000**2,
    "mib": 1024**2,
    "g": 1000**3,
    "gb": 1000**3,
    "gib": 1024**3,
    "t": 1000**4,
    "tb": 1000**4,
    "tib": 1024**4,
}
_PART = re.compile(r"(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|w)")


def parse_duration(value: str | int | float) -> float:
    """Seconds in `value`: a number of seconds, or `30s`, `10m`, `6h`, `7d`, `1h30m`."""
    if isinstance(value, bool):
        raise ValueError(f"not a duration: {value!r}")
    if isinstance(value, int | float):
        if value < 0:
            raise ValueError(f"duration must not be negative: {value!r}")
        return float(value)
    text = value.strip().lower()
    if re.fullmatch(r"\d+(?:\.\d+)?", text):
        return float(text)
    pos = 0
    total = 0.0
    for match in _PART.finditer(text):
        if match.start() != pos:
            break
        total += float(match.group(1)) * _DURATION_UNITS[match.group(2)]
        pos = match.end()
    if pos != len(text) or not text:
        raise ValueError(f"not a duration: {value!r} (use 30s, 10m, 6h, 7d)")
    return total


def parse_size(value: str | int) -> int:
    """Bytes in `value`: a number of bytes, or `512MiB`, `4GiB`, `100MB`."""
    if isinstance(value, bool):
        raise ValueError(f"not a size: {value!r}")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"size must not be negative: {value!r}")
        return value
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", value)
    if not match or match.group(2).lower() not in _SIZE_UNITS:
        raise ValueError(f"not a size: {value!r} (use 512MiB, 4GiB)")
    return int(float(match.group(1)) * _SIZE_UNITS[match.group(2).lower()])


def format_size(size: int) -> str:
    """A short human size: `1.5 GiB`, `512 B`."""
    amount = float(size)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if amount < 1024 or unit == "TiB":
            return f"{int(amount)} {unit}" if unit == "B" else f"{amount:.1f} {unit}"
        amount /= 1024
    raise AssertionError("unreachable")


def format_duration(seconds: float) -> str:
    """A short human duration in its two largest units: `45s`, `1m30s`, `2h10m`, `6h`, `3d2h`.

    Negative durations show as `0s`: callers say "ago" or "left" themselves.
    """
    left = max(0, round(seconds))
    if left < 60:
        return f"{left}s"
    units = (("d", 86400), ("h", 3600), ("m", 60), ("s", 1))
    for index, (unit, size) in enumerate(units):
        if left >= size:
            count, rest = divmod(left, size)
            small, small_size = units[index + 1]
            extra = rest // small_size
            return f"{count}{unit}{extra}{small}" if extra else f"{count}{unit}"
    raise AssertionError("unreachable")
