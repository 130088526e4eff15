"""checkov on deploy/kubernetes/ as `kubectl kustomize` renders it (with `mirror serve`, and
with the presigned component instead), with the settings in deploy/kubernetes/.checkov.yaml:
every Kubernetes check passes but the two that file skips, each with its reason. One run
(checkov takes ~10 s of CPU to start) also scans a copy of the Deployment with the pod
security taken out, which must fail: a scan that finds nothing in that has checked nothing.

checkov lives in a venv of its own ($(VENV)/checkov, `make venv`, from
requirements-checkov.lock): every release pins boto3 exactly, which the tool's lock cannot
share. --skip-download (in the settings) keeps it off the network."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from tests.fixtures.manifests import DEPLOY, PRESIGNED, SHIPPED, rendered, rendered_text

CHECKOV = Path(sys.prefix) / "checkov" / "bin" / "checkov"
SETTINGS = DEPLOY / ".checkov.yaml"
# No update check on PyPI, and anything else that would go out goes to a loopback port
# nothing listens on (checkov's own HTTP client honours the proxy variables).
OFFLINE = {
    "PATH": "/usr/bin:/bin",
    "CKV_SKIP_PACKAGE_UPDATE_CHECK": "true",
    "HTTPS_PROXY": "http://127.0.0.1:9",
    "HTTP_PROXY": "http://127.0.0.1:9",
}


def weakened_deployment() -> str:
    """The rendered Deployment as a careless edit would leave it: privileged, as root, with
    a writable root file system and the service-account token."""
    deployment = next(r for r in rendered() if r["kind"] == "Deployment")
    spec = deployment["spec"]["template"]["spec"]
    del spec["securityContext"], spec["automountServiceAccountToken"]
    (container,) = spec["containers"]
    container["securityContext"] = {"privileged": True, "readOnlyRootFilesystem": False}
    return yaml.safe_dump(deployment)


def scan(files: dict[str, str], scratch: Path) -> list[dict[str, Any]]:
    assert CHECKOV.is_file(), f"{CHECKOV} missing: `make venv` installs it"
    for name, text in files.items():
        (scratch / name).write_text(text)
    done = subprocess.run(
        [str(CHECKOV), "--config-file", str(SETTINGS), "--skip-download", "-o", "json"]
        + [arg for name in files for arg in ("-f", str(scratch / name))],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=scratch,
        env=OFFLINE | {"HOME": str(scratch)},
    )
    assert done.returncode in (0, 1), done.stderr  # 1: some check failed
    report = json.loads(done.stdout)
    reports: list[dict[str, Any]] = report if isinstance(report, list) else [report]
    return reports


def test_checkov_passes_the_manifests_and_catches_a_weakened_pod(tmp_path: Path) -> None:
    files = {
        "serve.yaml": rendered_text(SHIPPED),
        "presigned.yaml": rendered_text(PRESIGNED),
        "weakened.yaml": weakened_deployment(),
    }
    (report,) = scan(files, tmp_path)
    assert report["check_type"] == "kubernetes"
    failed = report["results"]["failed_checks"]
    where = {Path(check["file_path"]).name for check in failed}
    assert where == {"weakened.yaml"}, [
        (c["check_id"], c["check_name"], c["resource"], c["file_path"]) for c in failed
    ]
    caught = {check["check_id"] for check in failed}
    # privileged, root, writable root file system, token: each one a check of its own
    assert {"CKV_K8S_16", "CKV_K8S_23", "CKV_K8S_22", "CKV_K8S_38"} <= caught, caught
    passed = report["results"]["passed_checks"]
    resources = {c["resource"] for c in passed if Path(c["file_path"]).name != "weakened.yaml"}
    for kind, name in [
        ("Deployment", "mirror-serve"),
        ("CronJob", "mirror-transfer-import"),
        ("CronJob", "mirror-chart-refresh"),
    ]:
        assert f"{kind}.docs-mirror.{name}" in resources, (kind, name)


def test_each_skipped_check_says_why() -> None:
    settings = yaml.safe_load(SETTINGS.read_text())
    assert settings["framework"] == ["kubernetes"]
    text = SETTINGS.read_text()
    for check in settings["skip-check"]:
        reason = re.search(rf"# {check} \"[^\"]+\": (.+)", text)
        assert reason and len(reason.group(1)) > 20, check
