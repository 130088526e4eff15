"""Features that need a library some platforms have no wheel for (mirror/features.py): the
list agrees with pyproject.toml's markers, and a missing one is one line, exit 2.

The installed tool without raptorq (what an aarch64 host gets) is run in
tests/oneway/test_without_fec.py."""

from __future__ import annotations

import platform
import tomllib

import pytest
from packaging.requirements import Requirement

from mirror import features
from mirror.errors import ConfigError
from mirror.outbound.targets import ARCHITECTURES, PYTHONS, targets
from tests.fixtures.cli import REPO


@pytest.mark.parametrize("feature", features.FEATURES, ids=lambda f: f.name)
def test_the_machines_named_are_the_ones_pyproject_installs_the_library_on(
    feature: features.Feature,
) -> None:
    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    (requirement,) = [r for r in map(Requirement, declared) if r.name == feature.library]
    assert requirement.marker is not None, f"{feature.library} is installed everywhere"
    for target in targets(ARCHITECTURES, PYTHONS):
        installed = requirement.marker.evaluate(target.environment())
        assert installed == (target.architecture in feature.machines), target


def test_the_one_way_link_works_where_its_wheel_exists() -> None:
    assert features.available(features.ONEWAY) == (platform.machine() in ("x86_64",))
    if features.available(features.ONEWAY):
        features.require(features.ONEWAY)
        assert features.report()[1].endswith("one-way link (transfer send, transfer receive): yes")


def test_on_aarch64_the_reason_is_the_missing_wheel_and_the_remedy_is_the_media() -> None:
    why, remedy = features.missing(features.ONEWAY, "aarch64")
    assert why == "raptorq has no wheel for aarch64 (PyPI has one for x86_64 Linux only)"
    assert remedy.startswith("carry sets on media instead (transfer pack, transfer import)")
    why, remedy = features.missing(features.ONEWAY, "x86_64")
    assert (why, remedy) == (
        "raptorq is not installed",
        "install.sh of the offline installer brings it",
    )


def test_a_library_that_does_not_load_is_a_missing_feature_in_one_line() -> None:
    absent = features.Feature(
        "test feature", ("transfer frob",), "mirror_no_such_library", ("x86_64",), "do without"
    )
    assert not features.available(absent)
    with pytest.raises(ConfigError) as raised:
        features.require(absent)
    assert raised.value.exit_code == 2
    assert "\n" not in str(raised.value)
    assert str(raised.value).startswith("transfer frob needs the test feature, which this ")
