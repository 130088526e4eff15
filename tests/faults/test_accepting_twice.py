"""Issue 38 class 8: a careless operator accepts the same refused site twice.

Two refused bundles of one site (the vendor exported the same truncated site twice), both
accepted with `mirror store accept`: the README says the same site makes no new version, so
the second acceptance names the version the first one made, and the index holds one. The
simulator stamps each export a second later, so the two bundles hold the same tree in bytes
that may differ; identical bytes (one bundle row, two refusals) are the same case a fortiori.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mirror.sim import SimConfig, Simulator
from mirror.store.models import Bundle, SiteCheck, Version
from tests.fixtures.exporting import cli, config_for, index, table

DOMAIN = "docs.twice.test"


@pytest.fixture
def sim_config(sim_config: SimConfig) -> SimConfig:
    sim_config.changes_per_export = 0  # every export of the domain: the same bytes
    return sim_config


def _tree(config: Path, sha256: str) -> str:
    app = index(config)
    try:
        with app.db.session() as session:
            bundle = session.get(Bundle, sha256)
            assert bundle is not None
            return bundle.tree_sha256
    finally:
        app.close()


@pytest.mark.fault(
    "38.8 two refused bundles of one site, both accepted",
    "one version; the second acceptance names it (new: false), exit 0",
)
def test_accepting_the_same_site_twice_makes_one_version(
    sim: Simulator, tmp_path: Path, fault_got: list[str]
) -> None:
    config = config_for(tmp_path, sim)
    sim.faults.damaged_domains[DOMAIN] = "truncated"
    for _ in range(2):
        refused = cli(config, sim.key, "export", "run", "--adhoc", DOMAIN)
        assert refused.returncode == 5, refused.stderr
    aside = json.loads(cli(config, sim.key, "--json", "store", "list").stdout)["refused"]
    assert len(aside) == 2
    assert len({_tree(config, entry["sha256"]) for entry in aside}) == 1

    answers = []
    for refused_label in sorted(entry["version"] for entry in aside):
        done = cli(
            config, sim.key, "--json", "store", "accept", DOMAIN, refused_label, "--reason", "ok"
        )
        assert done.returncode == 0, done.stderr
        answers.append(json.loads(done.stdout))
    fault_got.append(", ".join(f"{a['version']} new={a.get('new')}" for a in answers))
    assert answers[0]["version"] == answers[1]["version"]
    assert [a.get("new") for a in answers] == [True, False]
    listed = json.loads(cli(config, sim.key, "--json", "store", "list").stdout)
    assert listed["refused"] == [] and len(listed["versions"]) == 1
    app = index(config)
    try:
        versions = table(app, Version)
        checks = table(app, SiteCheck)
    finally:
        app.close()
    assert [v.label for v in versions] == [answers[0]["version"]]
    assert sorted(c.status for c in checks) == ["accepted", "accepted"]
    assert {c.label for c in checks} == {answers[0]["version"]}
