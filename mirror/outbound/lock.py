"""The lock file (`requirements.lock`): the exact versions, and the sha256 of every file of
them, that `make test` installs and the offline installer carries.

The lock is written by `uv pip compile --universal --generate-hashes` (`make lock`), in
pip's requirements format: `name==version [; marker] \\` followed by `--hash=sha256:...`
lines. This module reads that format and holds a set of wheels against it.

Promises:
- `read_lock` returns every pin with all its hashes and its environment marker; a line it
  cannot read is a ConfigError naming the file and line (a lock is never half-read).
- `Pin.applies(environment)` decides a pin's marker for a given target, not for the
  running interpreter: pip evaluates a requirement file's markers against the machine it
  runs on, even with `--platform`, so a pin for x86_64 only would be fetched for aarch64 too.
  `requirement_lines` writes the pins chosen for a target without their markers.
- `unlocked_wheels` names every wheel whose project is not pinned, whose version is not the
  pinned one, or (with `check_hashes`) whose sha256 is none of the pinned files' hashes.
  Wheels re-packed from an installation (`bundle-self --local`) keep name and version but
  not the bytes, so those are checked without hashes.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from packaging.markers import InvalidMarker, Marker

from mirror.errors import ConfigError
from mirror.integrity import hash_file

LOCK_NAME = "requirements.lock"
_PIN = re.compile(
    r"^([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?==([^\s;\\]+)\s*(?:;\s*(.*?))?\s*(?=--hash|$)"
)
_HASH = re.compile(r"--hash=sha256:([0-9a-f]{64})")


@dataclass(frozen=True)
class Pin:
    name: str
    version: str
    hashes: frozenset[str]
    marker: str = ""
    """The pin's environment marker (`platform_machine == 'x86_64'`), "" for every target."""

    def applies(self, environment: Mapping[str, str]) -> bool:
        """Whether a target with this PEP 508 `environment` installs the pin."""
        return not self.marker or Marker(self.marker).evaluate(dict(environment))


def canonical_name(name: str) -> str:
    """PEP 503: `Foo_Bar.baz` and `foo-bar-baz` are one project."""
    return re.sub(r"[-_.]+", "-", name).lower()


def read_lock(path: Path) -> dict[str, list[Pin]]:
    """{canonical project name: its pins} (a universal lock may pin two versions of one
    project under different markers)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read the lock file {path}: {exc.strerror or exc}") from exc
    pins: dict[str, list[Pin]] = {}
    for number, entry in _entries(text):
        match = _PIN.match(entry)
        if match is None:
            raise ConfigError(f"{path}:{number}: not a pinned requirement: {entry[:60]}")
        hashes = frozenset(_HASH.findall(entry))
        if not hashes:
            raise ConfigError(f"{path}:{number}: {match.group(1)} is pinned without a hash")
        name = canonical_name(match.group(1))
        marker = (match.group(3) or "").strip()
        if marker:
            try:
                Marker(marker)
            except InvalidMarker:
                raise ConfigError(f"{path}:{number}: {name}: unreadable marker {marker}") from None
        pins.setdefault(name, []).append(Pin(name, match.group(2), hashes, marker))
    return pins


def requirement_lines(pins: Iterable[Pin]) -> str:
    """The pins as a requirements file pip reads with `--require-hashes`, without markers
    (the caller chose the pins for its target: `Pin.applies`)."""
    lines = []
    for pin in sorted(pins, key=lambda p: (p.name, p.version)):
        hashes = " ".join(f"--hash=sha256:{digest}" for digest in sorted(pin.hashes))
        lines.append(f"{pin.name}=={pin.version} {hashes}\n")
    return "".join(lines)


def _entries(text: str) -> list[tuple[int, str]]:
    """(first line number, the requirement with its continuation lines joined)."""
    entries: list[tuple[int, str]] = []
    current: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line and not current:
            continue
        if not current:
            start = number
        current.append(line.removesuffix("\\").strip())
        if not line.endswith("\\"):
            entries.append((start, " ".join(part for part in current if part)))
            current = []
    if current:
        entries.append((start, " ".join(part for part in current if part)))
    return entries


def wheel_project(filename: str) -> tuple[str, str]:
    """(canonical project name, version) of a wheel file name."""
    parts = filename.removesuffix(".whl").split("-")
    if len(parts) < 5:
        raise ConfigError(f"{filename} is not a wheel file name")
    return canonical_name(parts[0]), parts[1]


def unlocked_wheels(
    wheels: list[Path], pins: dict[str, list[Pin]], *, check_hashes: bool = True
) -> list[str]:
    """One line for each wheel the lock does not pin exactly (empty: every wheel is locked)."""
    problems: list[str] = []
    for wheel in sorted(wheels):
        name, version = wheel_project(wheel.name)
        pinned = pins.get(name, [])
        same = [pin for pin in pinned if pin.version == version]
        if not pinned:
            problems.append(f"{wheel.name}: {name} is not in the lock")
        elif not same:
            locked = ", ".join(pin.version for pin in pinned)
            problems.append(f"{wheel.name}: the lock pins {name}=={locked}")
        elif check_hashes and hash_file(wheel).sha256 not in set().union(*(p.hashes for p in same)):
            problems.append(f"{wheel.name}: its sha256 is none of the lock's hashes")
    return problems
