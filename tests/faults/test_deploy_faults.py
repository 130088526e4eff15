"""The Kubernetes manifests, read as an attacker and an operator would (issue 18, class 6).

A misspelt environment variable is silently ignored (the EC2 metadata lookup it should
disable stays on); a mounted service-account token is a credential nobody needs; without a
NetworkPolicy a compromised pod reaches anything, and mirror-serve, the one pod that
listens, must let in the vendor's pods and no one else; S3 credentials in environment
variables show in the pod spec and every process's environment, and mirror-serve needs none
that write; and an import Job whose only
scratch space is a 128 Mi /tmp cannot rebuild a delta of any real site.
"""

from __future__ import annotations

import os
import re
import tomllib
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import botocore
import botocore.session
import pytest

from tests.fixtures.cli import REPO
from tests.fixtures.manifests import (
    DEPLOY,
    pod_labels,
    pod_specs,
    resources,
    secrets_the_readme_makes,
)

MIRROR_SOURCE = REPO / "mirror"
BOTOCORE_SOURCE = Path(botocore.__file__).parent
# Read by the process itself rather than by a name in mirror's or botocore's source:
# HOME is where `~` (~/.aws/config, the tool's own files) expands to.
PROCESS_ENVIRONMENT = {"HOME"}
GIB = 1 << 30


def containers() -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(pod name, pod spec, container) of every container the manifests run."""
    return [(name, spec, c) for name, spec in pod_specs() for c in spec["containers"]]


def source_names(root: Path) -> set[str]:
    """Every quoted UPPER_CASE string literal in the Python files under `root`."""
    names: set[str] = set()
    for path in root.rglob("*.py"):
        names.update(re.findall(r"""["']([A-Z][A-Z0-9_]{2,})["']""", path.read_text()))
    return names


def config_map() -> dict[str, Any]:
    found = next(r for r in resources() if r["kind"] == "ConfigMap")
    document: dict[str, Any] = tomllib.loads(found["data"]["config.toml"])
    return document


def quantity(text: str) -> int:
    match = re.fullmatch(r"(\d+)(Ki|Mi|Gi|Ti)?", text)
    assert match, f"not a quantity this test reads: {text}"
    units = {None: 1, "Ki": 1 << 10, "Mi": 1 << 20, "Gi": GIB, "Ti": 1 << 40}
    return int(match.group(1)) * units[match.group(2)]


@pytest.mark.fault("18.6 env var names in the manifests", "each one mirror or botocore reads")
def test_every_environment_variable_set_is_one_the_code_reads(fault_got: list[str]) -> None:
    readers = {"mirror": source_names(MIRROR_SOURCE), "botocore": source_names(BOTOCORE_SOURCE)}
    assert "AWS_EC2_METADATA_DISABLED" in readers["botocore"]  # the scan finds what it must
    unread = []
    for pod, _, container in containers():
        for variable in container.get("env", []):
            name = variable["name"]
            read_by = [who for who, names in readers.items() if name in names]
            if not read_by and name not in PROCESS_ENVIRONMENT:
                unread.append(f"{pod}: {name}")
    fault_got.append(f"{len(unread)} unread: {', '.join(unread)}" if unread else "all read")
    assert unread == []


@pytest.mark.fault("18.6 service-account token in the pods", "not mounted in any pod")
def test_no_pod_mounts_a_service_account_token(fault_got: list[str]) -> None:
    mounted = [n for n, s in pod_specs() if s.get("automountServiceAccountToken") is not False]
    fault_got.append(f"mounted in {', '.join(mounted)}" if mounted else "mounted in none")
    assert mounted == []


@pytest.mark.fault(
    "18.6 network reach of the pods",
    "egress DNS + S3 port only; ingress none, mirror-serve: the vendor's pods and Prometheus"
    " on 8080 only",
)
def test_network_policies_allow_dns_the_object_store_and_the_vendors_pods_only(
    fault_got: list[str],
) -> None:
    """Policies add up, so each pod's reach is the union of the policies that select it."""
    policies = [r for r in resources() if r["kind"] == "NetworkPolicy"]
    fault_got.append(f"{len(policies)} NetworkPolicies")
    s3_port = urlsplit(config_map()["target"]["endpoint_url"]).port
    deployment = next(r for r in resources() if r["kind"] == "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    (serve_port,) = container["ports"]
    for name, _ in pod_specs():
        ingress, egress = reach(policies, pod_labels(name))
        ports = {(p["protocol"], p["port"]) for rule in egress for p in rule["ports"]}
        assert ports == {("UDP", 53), ("TCP", 53), ("TCP", s3_port)}, name
        assert all(rule.get("to") for rule in egress), name  # each to named peers only
        if name != "mirror-serve":
            assert ingress == [], name
            continue
        vendor, prometheus = ingress  # the vendor's pods fetch, Prometheus scrapes /metrics
        for rule in (vendor, prometheus):
            assert rule["ports"] == [{"protocol": "TCP", "port": serve_port["containerPort"]}]
            (peer,) = rule["from"]  # one peer: that namespace AND that label, never {} (anyone)
            assert peer["namespaceSelector"]["matchLabels"] and peer["podSelector"]["matchLabels"]
            fault_got[-1] += f"; mirror-serve from {peer['podSelector']['matchLabels']}"


def reach(
    policies: list[dict[str, Any]], labels: dict[str, str]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(ingress rules, egress rules) allowed to a pod with `labels`; a direction no policy
    isolates would be open to anything, which fails here."""
    ingress: list[dict[str, Any]] | None = None
    egress: list[dict[str, Any]] | None = None
    for policy in policies:
        spec = policy["spec"]
        assert set(spec["podSelector"]) <= {"matchLabels"}  # no expressions to misread
        if not spec["podSelector"].get("matchLabels", {}).items() <= labels.items():
            continue
        if "Ingress" in spec["policyTypes"]:
            ingress = [*(ingress or []), *spec.get("ingress", [])]
        if "Egress" in spec["policyTypes"]:
            egress = [*(egress or []), *spec.get("egress", [])]
    assert ingress is not None and egress is not None, f"not isolated: {labels}"
    return ingress, egress


@pytest.mark.fault("18.6 S3 credentials in the pods", "a mounted file, not env vars")
def test_s3_credentials_are_a_mounted_file_botocore_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fault_got: list[str]
) -> None:
    """The file each pod reads is the one the README's `kubectl create secret` puts in its
    Secret, and botocore finds the keys in it as the pod's process would; mirror-serve gets
    the read-only identity, the others the import's."""
    secrets, _ = secrets_the_readme_makes(tmp_path)
    made = {s["metadata"]["name"]: s["data"] for s in secrets}
    for pod, spec, container in containers():
        assert "envFrom" not in container, pod
        env = {v["name"]: v.get("value") for v in container.get("env", [])}
        assert not {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"} & env.keys(), pod
        path = Path(env["AWS_SHARED_CREDENTIALS_FILE"])
        mount = next(m for m in container["volumeMounts"] if m["mountPath"] == str(path.parent))
        volume = next(v for v in spec["volumes"] if v["name"] == mount["name"])
        assert mount["readOnly"] is True, pod
        secret = volume["secret"]["secretName"]
        assert secret == ("mirror-s3-readonly" if pod == "mirror-serve" else "mirror-s3"), pod
        assert path.name in made[secret], pod
    for name in [n for n in os.environ if n.startswith("AWS_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    for secret, key_id in [("mirror-s3", "import-key-id"), ("mirror-s3-readonly", "read-key-id")]:
        (tmp_path / secret).write_bytes(made[secret]["credentials"])
        monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / secret))
        credentials = botocore.session.Session().get_credentials()
        assert credentials is not None and credentials.method == "shared-credentials-file"
        assert credentials.access_key == key_id, secret
        fault_got.append(f"{secret}: botocore {credentials.method}")


@pytest.mark.fault("18.6 import Job room to rebuild a delta", "work_dir its own volume, sized")
def test_the_import_job_has_room_to_rebuild_the_sites_the_readme_names(
    fault_got: list[str],
) -> None:
    """The README's rule (2 x the largest site unpacked + 10%) and the Job's volume agree."""
    work_dir = config_map()["target"].get("work_dir")
    fault_got.append(f"target.work_dir = {work_dir}")
    assert work_dir, "target.work_dir is unset: the rebuild would use a 128 Mi /tmp"
    (spec,) = [spec for name, spec in pod_specs() if name == "mirror-transfer-import"]
    (container,) = spec["containers"]
    mount = next(m for m in container["volumeMounts"] if m["mountPath"] == work_dir)
    assert not mount.get("readOnly")
    volume = next(v for v in spec["volumes"] if v["name"] == mount["name"])
    template = volume["ephemeral"]["volumeClaimTemplate"]["spec"]
    size = quantity(template["resources"]["requests"]["storage"])
    readme = (DEPLOY / "README.md").read_text()
    stated = re.search(r"\*\*(\d+)Gi: enough for sites of\s+up to (\d+) GiB unpacked\*\*", readme)
    assert stated, "README.md does not say which sites the Job's volume is sized for"
    assert int(stated.group(1)) * GIB == size
    site = int(stated.group(2)) * GIB
    assert 2 * site * 1.1 <= size, (site, size)
    fault_got[-1] += f", {size // GIB} GiB for sites up to {site // GIB} GiB"
