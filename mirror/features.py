"""What this installation can do: the features that need a library some platforms lack.

Every dependency ships as a binary wheel (the offline installer carries no compiler). Where
PyPI has no wheel of a library for a platform, pyproject.toml's marker leaves the library out
there, the installation works without it, and the feature that needs it is missing on that
host. Today that is one: the one-way link's erasure code, raptorq, whose wheels are x86_64
Linux only, so an aarch64 host carries sets on media instead.

Promises:
- `available(feature)` imports the library: True only if it loads on this host.
- `require(feature)` is the one check a command makes before any work: a missing feature is
  a ConfigError (exit 2), one line naming the commands, the library, this machine and what
  to do instead.
- `report()` is one line per feature with yes or no (and why): what install.sh prints after
  installing (`python -m mirror.features`), so the operator learns it then, not mid-transfer.
"""

from __future__ import annotations

import importlib
import platform
from dataclasses import dataclass

from mirror.errors import ConfigError


@dataclass(frozen=True)
class Feature:
    name: str
    commands: tuple[str, ...]
    library: str
    """The module the feature imports (the distribution of the same name)."""
    machines: tuple[str, ...]
    """The machines PyPI has the library's wheel for: pyproject.toml's marker says the same
    (a test holds them together)."""
    instead: str


ONEWAY = Feature(
    name="one-way link",
    commands=("transfer send", "transfer receive"),
    library="raptorq",
    machines=("x86_64",),
    instead="carry sets on media instead (transfer pack, transfer import), "
    "or run the link's two ends on x86_64 hosts",
)
FEATURES = (ONEWAY,)


def available(feature: Feature) -> bool:
    try:
        importlib.import_module(feature.library)
    except ImportError:
        return False
    return True


def missing(feature: Feature, machine: str) -> tuple[str, str]:
    """(why `feature` is missing on `machine`, what to do): no wheel for the machine, or a
    library that should be there and is not."""
    if machine not in feature.machines:
        why = f"{feature.library} has no wheel for {machine or 'this machine'} (PyPI has one "
        return why + f"for {', '.join(feature.machines)} Linux only)", feature.instead
    return f"{feature.library} is not installed", "install.sh of the offline installer brings it"


def require(feature: Feature) -> None:
    """ConfigError (exit 2) unless `feature` works on this host."""
    if not available(feature):
        why, remedy = missing(feature, platform.machine())
        verb = "need" if len(feature.commands) > 1 else "needs"
        raise ConfigError(
            f"{' and '.join(feature.commands)} {verb} the {feature.name}, which this "
            f"installation lacks: {why}",
            hint=remedy,
        )


def report() -> list[str]:
    machine = platform.machine()
    lines = [f"features on this host ({machine or 'unknown machine'}):"]
    for feature in FEATURES:
        said = "yes" if available(feature) else "no: {}; {}".format(*missing(feature, machine))
        lines.append(f"  {feature.name} ({', '.join(feature.commands)}): {said}")
    return lines


if __name__ == "__main__":
    print("\n".join(report()))
