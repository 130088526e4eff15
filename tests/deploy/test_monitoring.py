"""deploy/monitoring/: the checked-in rules, PrometheusRule, promtool tests and dashboards are
what deploy/monitoring/mixin.py renders (`make monitoring`); `promtool check rules` accepts
the rules and `promtool test rules` passes a case that fires and one that does not for every
alert; every alert's summary names the command to run first, a real `mirror` command; the
ServiceMonitor selects the Service that deploy/kubernetes/serve ships.
tests/integration/test_monitoring_pipeline.py asks a real Prometheus every query."""

from __future__ import annotations

import logging
import re
import shutil
import subprocess
from pathlib import Path

import click
import pytest
import yaml
from click.testing import CliRunner

from mirror.cli import cli
from mirror.logs import JsonFormatter
from tests.fixtures.cli import REPO
from tests.fixtures.monitoring import MONITORING, mixin


def promtool() -> str:
    found = shutil.which("promtool")
    assert found, "promtool is missing: scripts/with-test-servers installs Debian's prometheus"
    return found


def test_the_checked_in_files_are_the_rendering() -> None:
    stale = [
        name
        for name, text in mixin.rendered().items()
        if not (MONITORING / name).is_file() or (MONITORING / name).read_text() != text
    ]
    assert stale == [], f"run `make monitoring`: {stale} differ from deploy/monitoring/mixin.py"


def test_the_prometheusrule_holds_the_same_rules() -> None:
    rules = yaml.safe_load((MONITORING / "rules.yaml").read_text())
    manifest = yaml.safe_load((MONITORING / "prometheusrule.yaml").read_text())
    assert manifest["kind"] == "PrometheusRule" and manifest["spec"] == rules


def run_promtool(where: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [promtool(), *args], cwd=where, capture_output=True, text=True, timeout=300, check=False
    )


@pytest.mark.parametrize(
    "args", [("check", "rules", "rules.yaml"), ("test", "rules", "tests.yaml")], ids=" ".join
)
def test_promtool_accepts_the_rules_and_passes_their_tests(args: tuple[str, ...]) -> None:
    done = run_promtool(MONITORING, *args)
    assert done.returncode == 0, done.stdout + done.stderr


def test_each_alert_has_a_case_that_fires_and_one_that_does_not() -> None:
    tests = yaml.safe_load((MONITORING / "tests.yaml").read_text())["tests"]
    seen = [
        (case["alertname"], bool(case["exp_alerts"]))
        for test in tests
        for case in test["alert_rule_test"]
    ]
    names = [alert.name for alert in mixin.ALERTS]
    assert sorted(seen) == sorted([(n, True) for n in names] + [(n, False) for n in names])


def test_the_tests_fail_when_the_cases_are_swapped(tmp_path: Path) -> None:
    """A case that could not fail proves nothing: with each alert's firing and quiet series
    swapped, every one of its cases fails."""
    document = mixin.rule_tests()
    half = len(document["tests"]) // 2
    for fires, quiet in zip(document["tests"][:half], document["tests"][half:], strict=True):
        fires["input_series"], quiet["input_series"] = quiet["input_series"], fires["input_series"]
    shutil.copy(MONITORING / "rules.yaml", tmp_path / "rules.yaml")
    (tmp_path / "tests.yaml").write_text(yaml.safe_dump(document))
    tested = run_promtool(tmp_path, "test", "rules", "tests.yaml")
    failed = {
        line.split("alertname: ")[1].split(",")[0]
        for line in f"{tested.stdout}\n{tested.stderr}".splitlines()
        if "alertname: " in line
    }
    assert tested.returncode != 0
    assert failed == {alert.name for alert in mixin.ALERTS}


@pytest.mark.parametrize("alert", mixin.ALERTS, ids=lambda alert: alert.name)
def test_each_summary_names_a_real_command(alert: object) -> None:
    command = alert.command  # type: ignore[attr-defined]
    words = command.replace("{{ $labels.domain }}", "docs.example.com").split()
    assert words[0] == "mirror"
    found: click.Command | None = cli
    context = click.Context(cli)
    for word in words[1:]:
        if not isinstance(found, click.Group):
            break
        found = found.get_command(context, word)
    assert found is not None and not isinstance(found, click.Group), command
    done = CliRunner().invoke(cli, [*words[1:], "--help"])
    assert done.exit_code == 0, done.output
    assert f"first run: {command}" in alert.rule()["annotations"]["summary"]  # type: ignore[attr-defined]


def test_the_servicemonitor_selects_the_shipped_service() -> None:
    monitors = list(yaml.safe_load_all((MONITORING / "servicemonitor.yaml").read_text()))
    service = yaml.safe_load(
        (REPO / "deploy" / "kubernetes" / "serve" / "service.yaml").read_text()
    )
    serve = next(m for m in monitors if m["metadata"]["name"] == "mirror-serve")
    wanted = serve["spec"]["selector"]["matchLabels"]
    assert wanted.items() <= service["metadata"]["labels"].items()
    ports = {port["name"] for port in service["spec"]["ports"]}
    assert {e["port"] for e in serve["spec"]["endpoints"]} <= ports


def test_the_readme_asks_each_alerts_first_question() -> None:
    """README.md's Monitoring table has a row for every alert, naming the same first command
    as its summary, and no row for an alert that does not exist."""
    readme = (REPO / "README.md").read_text()
    section = readme.split("## Monitoring", 1)[1].split("\n## ", 1)[0]
    rows = [line.split("|")[1:3] for line in section.splitlines() if line.startswith("| Mirror")]
    named = {
        name.strip(): re.sub(r" D( |$)", r" {{ $labels.domain }}\1", command.strip().strip("`"))
        for names, command in rows
        for name in names.split(",")
    }
    assert named == {alert.name: alert.command for alert in mixin.ALERTS}


def test_the_readme_log_queries_run_on_a_json_line(tmp_path: Path) -> None:
    """Each jq program of README.md's Monitoring table compiles and runs on a line the JSON
    log format writes (mirror.logs), and picks it when it should."""
    record = logging.makeLogRecord(
        {
            "name": "mirror.serve.access",
            "levelno": logging.ERROR,
            "levelname": "ERROR",
            "msg": "values rendered",
            "domain": "D",
            "site": "S",
            "status": 200,
            "version": "v",
        }
    )
    line = JsonFormatter().format(record) + "\n"
    readme = (REPO / "README.md").read_text()
    section = readme.split("## Monitoring", 1)[1].split("\n## ", 1)[0]
    programs = [p.replace("\\|", "|") for p in re.findall(r"jq -c '(.*?)'`", section)]
    assert len(programs) == 11
    jq = shutil.which("jq")
    assert jq, "jq is missing (Debian's jq package)"
    picked = 0
    for program in programs:
        done = subprocess.run(
            [jq, "-c", program], input=line, capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, f"{program}: {done.stderr}"
        picked += bool(done.stdout.strip())
    assert picked >= 7


def test_the_receiver_scrape_job_asks_the_address_its_unit_serves() -> None:
    """scrape-receiver.yaml's target is where systemd/mirror-oneway-receive.service's
    `--metrics` listens."""
    unit = (REPO / "systemd" / "mirror-oneway-receive.service").read_text()
    address = re.search(r"^Environment=MIRROR_ONEWAY_METRICS=(\S+)$", unit, re.M)
    assert address and "--metrics ${MIRROR_ONEWAY_METRICS}" in unit
    jobs = yaml.safe_load((MONITORING / "scrape-receiver.yaml").read_text())
    assert [target for job in jobs for c in job["static_configs"] for target in c["targets"]] == [
        address.group(1)
    ]
