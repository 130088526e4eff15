"""The platforms the offline installer is built for, and whether a wheelhouse installs on each.

The artefact is built on one machine for others (manylinux x86_64 and aarch64, CPython
3.11 and 3.12). pip decides environment markers (`platform_machine == 'x86_64'`) for the
machine it runs on, even with `--platform`, so a dependency that exists for one target only
(raptorq: x86_64) is decided here, per target, with `packaging`'s own marker evaluation.

Promises:
- `Target.environment()` is the PEP 508 environment of a Linux CPython host of that
  architecture and version; `Target.tags()` the wheel tags such a host installs (manylinux
  glibc 2.28 down to manylinux2014, abi3 and pure wheels included).
- `unresolved(wheels, root, target)` names every requirement that no wheel in `wheels` fits
  (tags and version), from `root`'s (the mirror wheel's) down through the chosen wheels'
  own, each requirement's marker decided for the target: a wheelhouse that would fail
  `pip install --no-index` on that host fails here, on the machine that builds it.
"""

from __future__ import annotations

import zipfile
from dataclasses import dataclass
from email.parser import HeaderParser
from pathlib import Path

from packaging.requirements import Requirement
from packaging.tags import Tag, compatible_tags, cpython_tags
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version

from mirror.errors import ConfigError

ARCHITECTURES = ("x86_64", "aarch64")
PYTHONS = ("3.11", "3.12")
GLIBC_MINOR = 28  # manylinux_2_28: glibc 2.28 and newer (Debian 10+, RHEL 8+, Ubuntu 20.04+)


def manylinux_tags(architecture: str, glibc_minor: int = GLIBC_MINOR) -> list[str]:
    """Every manylinux tag a glibc 2.`glibc_minor` host accepts: pip's `--platform` takes
    each tag literally, so naming only the newest would miss wheels built for older glibc."""
    tags = [f"manylinux_2_{minor}_{architecture}" for minor in range(glibc_minor, 16, -1)]
    return [*tags, f"manylinux2014_{architecture}"]


@dataclass(frozen=True)
class Target:
    """One platform the artefact installs on: a manylinux architecture and a CPython."""

    architecture: str
    python: str

    @property
    def name(self) -> str:
        return f"cp{self.python.replace('.', '')}-manylinux_2_{GLIBC_MINOR}_{self.architecture}"

    def environment(self) -> dict[str, str]:
        """The PEP 508 marker variables of such a host."""
        return {
            "implementation_name": "cpython",
            "implementation_version": f"{self.python}.0",
            "os_name": "posix",
            "platform_machine": self.architecture,
            "platform_python_implementation": "CPython",
            "platform_release": "",
            "platform_system": "Linux",
            "platform_version": "",
            "python_full_version": f"{self.python}.0",
            "python_version": self.python,
            "sys_platform": "linux",
        }

    def tags(self) -> set[Tag]:
        version = tuple(int(part) for part in self.python.split("."))
        platforms = manylinux_tags(self.architecture)
        return {
            *cpython_tags(version, platforms=platforms),
            *compatible_tags(version, f"cp{self.python.replace('.', '')}", platforms),
        }


def targets(architectures: tuple[str, ...], pythons: tuple[str, ...]) -> list[Target]:
    return [Target(architecture, python) for architecture in architectures for python in pythons]


def requires_dist(wheel: Path) -> list[str]:
    """The `Requires-Dist` lines of a wheel's METADATA."""
    with zipfile.ZipFile(wheel) as archive:
        names = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        if len(names) != 1 or names[0].count("/") != 1:
            raise ConfigError(f"{wheel.name} is not a wheel: no one top-level METADATA")
        text = archive.read(names[0]).decode("utf-8")
    return HeaderParser().parsestr(text).get_all("Requires-Dist") or []


def unresolved(wheels: list[Path], root: Path, target: Target) -> list[str]:
    """What `pip install --no-index` of `root` from `wheels` would miss on `target` (module
    docstring): one line per requirement no wheel fits, naming who needs it."""
    supported = target.tags()
    available: dict[str, list[tuple[Version, Path]]] = {}
    for wheel in wheels:
        name, version, _build, tags = parse_wheel_filename(wheel.name)
        if tags & supported:
            available.setdefault(name, []).append((version, wheel))
    environment = target.environment()
    problems: set[str] = set()
    done: set[tuple[Path, frozenset[str]]] = set()
    todo = [(root, frozenset[str]())]
    while todo:
        wheel, extras = todo.pop()
        for line in requires_dist(wheel):
            requirement = Requirement(line)
            marker = requirement.marker
            if marker is not None and not any(
                marker.evaluate({**environment, "extra": extra}) for extra in extras or {""}
            ):
                continue
            fits = [
                (version, path)
                for version, path in available.get(canonicalize_name(requirement.name), [])
                if requirement.specifier.contains(version, prereleases=True)
            ]
            if not fits:
                problems.add(f"{requirement} (needed by {wheel.name}) for {target.name}")
                continue
            chosen = (max(fits)[1], frozenset(requirement.extras))
            if chosen not in done:
                done.add(chosen)
                todo.append(chosen)
    return sorted(problems)
