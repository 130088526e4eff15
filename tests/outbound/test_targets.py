"""The installer's targets: each one gets the lock's pins whose markers hold for it, and a
wheelhouse is checked to install mirror on each target alone (mirror/outbound/targets.py).

pip decides markers for the machine it runs on, which is why a lock pinning raptorq for
x86_64 only made `make dist` look for an aarch64 raptorq: these cases are decided for the
target, with wheels made here (real wheel files, only their METADATA matters)."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from mirror.errors import ConfigError
from mirror.outbound.lock import read_lock
from mirror.outbound.targets import ARCHITECTURES, PYTHONS, Target, targets, unresolved
from tests.fixtures.cli import REPO

ALL = targets(ARCHITECTURES, PYTHONS)


def make_wheel(folder: Path, filename: str, *requires: str) -> Path:
    """A wheel file whose METADATA names the project, version and `requires`."""
    name, version = filename.split("-")[:2]
    info = f"{name}-{version}.dist-info"
    metadata = [f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}"]
    metadata += [f"Requires-Dist: {line}" for line in requires]
    path = folder / filename
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(f"{info}/METADATA", "\n".join(metadata) + "\n")
        archive.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\n")
        archive.writestr(f"{info}/RECORD", "")
    return path


@pytest.fixture
def house(tmp_path: Path) -> Path:
    """mirror needs alpha everywhere and beta on x86_64 only; alpha needs gamma on aarch64
    only, and psycopg's `binary` extra (as the real mirror does)."""
    make_wheel(
        tmp_path,
        "mirror-0.1.0-py3-none-any.whl",
        "alpha>=1",
        "beta>=2.0; sys_platform == 'linux' and platform_machine == 'x86_64'",
        "psycopg[binary]>=3.1",
    )
    make_wheel(tmp_path, "alpha-1.5-py3-none-any.whl", "gamma; platform_machine == 'aarch64'")
    make_wheel(tmp_path, "beta-2.0.0-cp37-abi3-manylinux_2_17_x86_64.manylinux2014_x86_64.whl")
    make_wheel(tmp_path, "gamma-3.0-cp311-cp311-manylinux_2_28_aarch64.whl")
    make_wheel(tmp_path, "gamma-3.0-cp312-cp312-manylinux_2_28_aarch64.whl")
    make_wheel(
        tmp_path,
        "psycopg-3.3.9-py3-none-any.whl",
        'psycopg-binary==3.3.9; implementation_name != "pypy" and extra == "binary"',
        'tzdata; sys_platform == "win32"',
    )
    for python in ("311", "312"):
        for machine in ARCHITECTURES:
            name = f"psycopg_binary-3.3.9-cp{python}-cp{python}-manylinux_2_27_{machine}.whl"
            make_wheel(tmp_path, name)
    return tmp_path


def check(house: Path, target: Target) -> list[str]:
    return unresolved(sorted(house.glob("*.whl")), house / "mirror-0.1.0-py3-none-any.whl", target)


def test_a_dependency_of_one_architecture_is_needed_there_only(house: Path) -> None:
    assert {target.name: check(house, target) for target in ALL} == {t.name: [] for t in ALL}


def test_a_dependency_missing_for_one_architecture_is_named_for_that_one(house: Path) -> None:
    for gamma in house.glob("gamma-*"):
        gamma.unlink()
    found = {target.name: check(house, target) for target in ALL}
    for target in ALL:
        if target.architecture == "aarch64":
            assert found[target.name] == [
                f'gamma; platform_machine == "aarch64" (needed by alpha-1.5-py3-none-any.whl) '
                f"for {target.name}"
            ]
        else:
            assert found[target.name] == []


def test_a_wheel_for_another_python_or_a_newer_glibc_does_not_fit(house: Path) -> None:
    (house / "gamma-3.0-cp312-cp312-manylinux_2_28_aarch64.whl").rename(
        house / "gamma-3.0-cp312-cp312-manylinux_2_34_aarch64.whl"
    )
    (house / "beta-2.0.0-cp37-abi3-manylinux_2_17_x86_64.manylinux2014_x86_64.whl").rename(
        house / "beta-1.0-cp37-abi3-manylinux_2_17_x86_64.whl"
    )
    assert check(house, Target("aarch64", "3.11")) == []
    (gamma,) = check(house, Target("aarch64", "3.12"))
    assert gamma.startswith("gamma;") and gamma.endswith("for cp312-manylinux_2_28_aarch64")
    (beta,) = check(house, Target("x86_64", "3.11"))  # beta 1.0 is there, but >=2.0 is needed
    assert beta.startswith("beta>=2.0;") and "needed by mirror-0.1.0" in beta


def test_an_extra_brings_its_requirements(house: Path) -> None:
    for binary in house.glob("psycopg_binary-*cp311*x86_64*"):
        binary.unlink()
    (missing,) = check(house, Target("x86_64", "3.11"))
    assert missing.startswith("psycopg-binary==3.3.9;") and "needed by psycopg-3.3.9" in missing


def test_a_file_that_is_not_a_wheel_is_named(house: Path) -> None:
    broken = house / "delta-1.0-py3-none-any.whl"
    with zipfile.ZipFile(broken, "w") as archive:
        archive.writestr("delta/__init__.py", "")
    make_wheel(house, "mirror-0.1.0-py3-none-any.whl", "delta")
    with pytest.raises(ConfigError, match=r"delta-1\.0-py3-none-any\.whl is not a wheel"):
        check(house, Target("x86_64", "3.11"))


def test_the_lock_gives_raptorq_to_x86_64_only_and_everything_else_to_every_target() -> None:
    pins = [pin for pinned in read_lock(REPO / "requirements.lock").values() for pin in pinned]
    chosen = {t.name: {p.name for p in pins if p.applies(t.environment())} for t in ALL}
    everywhere = set.intersection(*chosen.values())
    assert "raptorq" not in everywhere and "cryptography" in everywhere
    for target in ALL:
        extra = chosen[target.name] - everywhere
        assert extra == ({"raptorq"} if target.architecture == "x86_64" else set()), target
    assert "tzdata" not in set.union(*chosen.values())  # Windows only
