from __future__ import annotations

import pytest

from mirror.units import format_duration, format_size, parse_duration, parse_size


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("30s", 30),
        ("10m", 600),
        ("6h", 21600),
        ("7d", 604800),
        ("1h30m", 5400),
        ("250ms", 0.25),
        ("45", 45),
        (12, 12),
        (1.5, 1.5),
    ],
)
def test_parse_duration(text: str | int | float, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "abc", "10x", "h", "-5", "5 s x", True])
def test_parse_duration_refuses(text: object) -> None:
    with pytest.raises(ValueError):
        parse_duration(text)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("512MiB", 512 * 1024**2),
        ("4GiB", 4 * 1024**3),
        ("100MB", 10**8),
        ("1.5KiB", 1536),
        ("0", 0),
        (7, 7),
        ("2 GiB", 2 * 1024**3),
    ],
)
def test_parse_size(text: str | int, size: int) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["", "lots", "5 parsecs", "-1"])
def test_parse_size_refuses(text: str) -> None:
    with pytest.raises(ValueError):
        parse_size(text)


def test_formatting() -> None:
    assert format_size(512) == "512 B"
    assert format_size(3 * 1024**3 // 2) == "1.5 GiB"
    assert format_duration(45) == "45s"
    assert format_duration(5400) == "1h30m"
    assert format_duration(7 * 86400) == "7d"
    assert format_duration(42) == "42s"
    assert format_duration(90) == "1m30s"
    assert format_duration(7800) == "2h10m"
    assert format_duration(3 * 86400 + 7200) == "3d2h"
    assert format_duration(86400 + 60) == "1d"  # two largest units, adjacent
    assert format_duration(6 * 86400 + 86399) == "6d23h"
    assert format_duration(-5) == "0s"
