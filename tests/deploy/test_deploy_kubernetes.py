"""deploy/kubernetes/: what `kubectl kustomize` renders (as shipped, with `mirror serve`, and
with the presigned component instead) validates against the Kubernetes schemas (offline, with
kubernetes-validate); every pod runs as non-root on a read-only root file system with limits;
the image is named by the kustomize setting; and what the pods run is real: the config in the
ConfigMap loads, its public key reads, the container args parse as the real command line
parses them, `mirror serve`'s Deployment, Service, budget and settings agree. Re-applying is
safe: no Secret is rendered (the README's `kubectl create secret` block makes them, and is
run here) and nothing runs at apply (the import is a suspended CronJob).
tests/faults/test_deploy_faults.py holds the hostile checks (environment names, tokens,
network, credentials, room for rebuilds); tests/deploy/test_deploy_checkov.py runs checkov."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import click
import kubernetes_validate
import pytest
import yaml

from mirror.cli import cli
from mirror.cli.contract import EXIT_MEANINGS
from mirror.config import ServeSettings, settings_from_dict
from mirror.errors import EXIT_TEMPORARY
from mirror.transferset.keys import load_public_key, load_signing_key
from mirror.units import parse_size
from tests.fixtures.cli import REPO
from tests.fixtures.manifests import (
    DEPLOY,
    PRESIGNED,
    SHIPPED,
    job_from_cronjob,
    kustomization,
    pod_specs,
    rendered,
    secrets_the_readme_makes,
)

KUBERNETES_VERSION = "1.30"
PAGE = "deploy/kubernetes/README.md"
GIB = 1 << 30


def named(kind: str, name: str, components: tuple[str, ...] = SHIPPED) -> dict[str, Any]:
    return next(
        r for r in rendered(components) if r["kind"] == kind and r["metadata"]["name"] == name
    )


def quantity(text: str) -> int:
    match = re.fullmatch(r"(\d+)(Ki|Mi|Gi|Ti)?", str(text))
    assert match, f"not a quantity this test reads: {text}"
    units = {None: 1, "Ki": 1 << 10, "Mi": 1 << 20, "Gi": GIB, "Ti": 1 << 40}
    return int(match.group(1)) * units[match.group(2)]


def config_document() -> dict[str, Any]:
    config_map = named("ConfigMap", "mirror-config")
    return tomllib.loads(config_map["data"]["config.toml"])


def test_every_file_in_the_directories_is_listed_in_its_kustomization() -> None:
    for directory in (DEPLOY, DEPLOY / "serve", DEPLOY / "presigned"):
        listed = set(kustomization(directory)["resources"])
        present = {p.name for p in directory.glob("[!.]*.yaml")} - {"kustomization.yaml"}
        assert listed == present, directory
    assert kustomization()["components"] == ["serve"]
    assert kustomization(DEPLOY / "presigned")["kind"] == "Component"


@pytest.mark.parametrize("version", [KUBERNETES_VERSION, kubernetes_validate.latest_version()])
@pytest.mark.parametrize("components", [SHIPPED, PRESIGNED], ids=["serve", "presigned"])
def test_manifests_validate_against_the_kubernetes_schemas(
    version: str, components: tuple[str, ...]
) -> None:
    kinds = set()
    for resource in rendered(components):
        kubernetes_validate.validate(resource, version, strict=True)
        kinds.add(resource["kind"])
    # the Job an operator makes from the import's template is a valid Job too
    template = named("CronJob", "mirror-transfer-import", components)
    kubernetes_validate.validate(job_from_cronjob(template, "import-7"), version, strict=True)
    assert {"CronJob", "ConfigMap", "NetworkPolicy", "PersistentVolumeClaim"} <= kinds
    if components == SHIPPED:
        assert {"Deployment", "Service", "PodDisruptionBudget"} <= kinds
    else:
        assert not {"Deployment", "Service", "PodDisruptionBudget"} & kinds


def test_an_invalid_manifest_is_caught() -> None:
    deployment = named("Deployment", "mirror-serve")
    deployment["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"] = "1 CPU"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, KUBERNETES_VERSION, strict=True)


def test_a_reapply_overwrites_no_secret_and_starts_nothing() -> None:
    """The placeholder Secrets once in the kustomization put `CHANGE-ME` back over the real
    keys at every `apply -k`; the import Job in it ran at the first apply, with no set on
    its volume, and failed."""
    for components in (SHIPPED, PRESIGNED):
        kinds = {r["kind"] for r in rendered(components)}
        assert not kinds & {"Secret", "Job", "Pod"}, components
    template = named("CronJob", "mirror-transfer-import")
    assert template["spec"]["suspend"] is True
    refresh = named("CronJob", "mirror-chart-refresh", PRESIGNED)
    assert refresh["spec"].get("suspend", False) is False  # that one does run hourly
    assert "CHANGE-ME" not in "".join(p.read_text() for p in DEPLOY.rglob("*.yaml"))


def test_the_import_is_run_from_its_template_as_the_readme_says() -> None:
    page = (REPO / PAGE).read_text()
    (create,) = re.findall(r"kubectl -n (\S+) create job --from=cronjob/(\S+) (\S+)", page)
    template = named("CronJob", create[1])
    assert template["metadata"]["namespace"] == create[0]
    job = job_from_cronjob(template, create[2])["spec"]
    (container,) = job["template"]["spec"]["containers"]
    assert "--skip-imported" in container["args"] and "--promote" in container["args"]
    rules = job["podFailurePolicy"]["rules"]
    (fail,) = [rule for rule in rules if rule["action"] == "FailJob"]
    assert fail["onExitCodes"]["operator"] == "In"
    assert fail["onExitCodes"]["containerName"] == container["name"]
    refused = {code for code in EXIT_MEANINGS if code not in (0, EXIT_TEMPORARY)}
    assert set(fail["onExitCodes"]["values"]) == refused  # 75 alone is retried
    assert job["backoffLimit"] >= 1 and job["template"]["spec"]["restartPolicy"] == "Never"


def test_pods_are_non_root_read_only_limited_and_use_the_image_setting() -> None:
    specs = pod_specs()
    assert {name for name, _ in specs} == {
        "mirror-chart-refresh",
        "mirror-transfer-import",
        "mirror-serve",
    }
    (image,) = kustomization()["images"]
    for name, spec in specs:
        assert spec["securityContext"]["runAsNonRoot"] is True, name
        assert spec["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault", name
        assert spec["automountServiceAccountToken"] is False, name
        assert spec["enableServiceLinks"] is False, name
        scratch = sum(
            quantity(v["emptyDir"]["sizeLimit"]) for v in spec["volumes"] if "emptyDir" in v
        )
        for container in spec["containers"]:
            context = container["securityContext"]
            assert context["readOnlyRootFilesystem"] is True, name
            assert context["allowPrivilegeEscalation"] is False, name
            assert context["capabilities"]["drop"] == ["ALL"], name
            limits = container["resources"]["limits"]
            assert {"cpu", "memory", "ephemeral-storage"} <= set(limits), name
            # an emptyDir counts against the pod's ephemeral storage: all of them must fit
            assert scratch < quantity(limits["ephemeral-storage"]), name
            assert container["image"] == f"{image['newName']}:{image['newTag']}", name


def test_the_configmap_config_loads_and_its_public_key_reads(tmp_path: Path) -> None:
    config_map = named("ConfigMap", "mirror-config")
    settings = settings_from_dict(config_document())
    assert [str(p) for p in settings.target.transfer_keys] == ["/etc/mirror/config/transfer.pub"]
    assert settings.target.url_mode == "serve"
    assert settings.chart.values_path.startswith("/values/")
    public = tmp_path / "transfer.pub"
    public.write_text(config_map["data"]["transfer.pub"])
    assert len(load_public_key(public).key_id) == 16


def test_mirror_serve_deployment_service_budget_and_settings_agree() -> None:
    serve = config_document()["serve"]
    deployment = named("Deployment", "mirror-serve")
    service = named("Service", "mirror-serve")
    budget = named("PodDisruptionBudget", "mirror-serve")
    pod = deployment["spec"]["template"]
    labels = pod["metadata"]["labels"]
    (container,) = pod["spec"]["containers"]
    (port,) = container["ports"]
    assert deployment["spec"]["replicas"] == 2
    assert deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    assert int(serve["listen"].rsplit(":", 1)[1]) == port["containerPort"]
    for probe, path in [("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")]:
        assert container[probe]["httpGet"] == {"path": path, "port": port["name"]}, probe
    assert container["startupProbe"]["httpGet"]["path"] == "/healthz"
    assert re.search(r"a promote or a rollback keeps it ready", (REPO / PAGE).read_text()), (
        f"{PAGE} does not say that a fill after a promote keeps the pods in the Service"
    )
    (exposed,) = service["spec"]["ports"]
    assert exposed["port"] == 8080 and exposed["targetPort"] == port["name"]
    assert service["spec"]["selector"].items() <= labels.items()
    namespace = service["metadata"]["namespace"]
    assert serve["public_url"] == f"http://{service['metadata']['name']}.{namespace}.svc:8080"
    assert budget["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert 1 <= budget["spec"]["minAvailable"] < deployment["spec"]["replicas"]
    assert deployment["spec"]["selector"]["matchLabels"].items() <= labels.items()
    mount = next(m for m in container["volumeMounts"] if m["mountPath"] == serve["cache_dir"])
    volume = next(v for v in pod["spec"]["volumes"] if v["name"] == mount["name"])
    room = quantity(volume["emptyDir"]["sizeLimit"])
    stated = re.search(
        r"\*\*`cache_max` is (\d+) GiB\s+in a (\d+)Gi volume: room for one bundle of up to "
        r"(\d+) GiB being filled beyond it\*\*",
        (REPO / PAGE).read_text(),
    )
    assert stated, f"{PAGE} does not say how the cache is sized"
    cache_max, volume_gib, bundle = (int(g) * GIB for g in stated.groups())
    assert parse_size(serve["cache_max"]) == cache_max and room == volume_gib
    assert cache_max + bundle <= room


def test_the_prometheus_the_monitoring_readme_names_may_scrape_mirror_serve() -> None:
    """deploy/monitoring/README.md's Prometheus (its namespace and pod label) is admitted by
    mirror-serve's rendered NetworkPolicy on the port its ServiceMonitor scrapes; where
    NetworkPolicies are enforced, following that README otherwise gives a down target and
    empty panels (trial3637 G9)."""
    readme = (REPO / "deploy" / "monitoring" / "README.md").read_text()
    assert "deploy/kubernetes/serve/networkpolicy.yaml" in readme
    said = re.search(r"namespace `([a-z0-9-]+)` with the pod label\s+`([^:`]+): ([^`]+)`", readme)
    assert said, "deploy/monitoring/README.md does not say which Prometheus the policy admits"
    namespace, key, value = said.groups()
    monitors = yaml.safe_load_all(
        (REPO / "deploy" / "monitoring" / "servicemonitor.yaml").read_text()
    )
    monitor = next(m for m in monitors if m["metadata"]["name"] == "mirror-serve")
    (endpoint,) = monitor["spec"]["endpoints"]
    service = named("Service", "mirror-serve")
    (exposed,) = (p for p in service["spec"]["ports"] if p["name"] == endpoint["port"])
    (container,) = named("Deployment", "mirror-serve")["spec"]["template"]["spec"]["containers"]
    (port,) = (p for p in container["ports"] if p["name"] == exposed["targetPort"])
    admitted = [
        rule
        for rule in named("NetworkPolicy", "mirror-serve")["spec"]["ingress"]
        for peer in rule["from"]
        if peer["namespaceSelector"]["matchLabels"] == {"kubernetes.io/metadata.name": namespace}
        and peer["podSelector"]["matchLabels"] == {key: value}
    ]
    assert [r["ports"] for r in admitted] == [[{"protocol": "TCP", "port": port["containerPort"]}]]


def test_mirror_serve_has_time_to_leave_the_service_and_drain_before_it_is_killed() -> None:
    """preStop waits while the endpoints drop the pod; then SIGTERM drains for
    serve.drain_timeout; the grace period covers both, or the kubelet's SIGKILL cuts the
    downloads the drain was letting finish."""
    serve = ServeSettings.model_validate(config_document()["serve"])
    pod = named("Deployment", "mirror-serve")["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    command = container["lifecycle"]["preStop"]["exec"]["command"]
    assert command[0] == "/bin/sleep" and 3 <= int(command[1]) <= 15
    grace = pod["terminationGracePeriodSeconds"]
    assert int(command[1]) + serve.drain_timeout + 5 <= grace


def test_the_readmes_secrets_are_the_ones_the_pods_mount(tmp_path: Path) -> None:
    """The README's block, run (kubectl with --dry-run=client, the real `mirror keys
    generate`): it makes every Secret a pod mounts, in the namespace the kustomization
    uses, holding the file the pod reads (and leaves no key in the checkout: the fixture)."""
    secrets, applied = secrets_the_readme_makes(tmp_path)
    namespace = named("ConfigMap", "mirror-config")["metadata"]["namespace"]
    assert applied["kind"] == "Namespace" and applied["metadata"]["name"] == namespace
    made = {s["metadata"]["name"]: s["data"] for s in secrets}
    assert {s["metadata"]["namespace"] for s in secrets} == {namespace}
    mounted: dict[str, set[str]] = {}
    for name, spec in pod_specs():
        (container,) = spec["containers"]
        for volume in spec["volumes"]:
            if "secret" in volume:
                mount = next(m for m in container["volumeMounts"] if m["name"] == volume["name"])
                assert mount["readOnly"] is True, name
                mounted.setdefault(volume["secret"]["secretName"], set()).add(name)
    assert set(made) == set(mounted)
    assert set(made["mirror-receipt-key"]) == {"receipt.key"}
    assert set(made["mirror-s3"]) == set(made["mirror-s3-readonly"]) == {"credentials"}
    assert mounted["mirror-s3-readonly"] == {"mirror-serve"}  # serve never gets write keys
    assert {s for s, pods in mounted.items() if "mirror-serve" in pods} == {"mirror-s3-readonly"}
    key = tmp_path / "receipt.key"
    key.write_bytes(made["mirror-receipt-key"]["receipt.key"])
    assert len(load_signing_key(key).key_id) == 16


def parse_for_real(args: list[str]) -> list[click.Context]:
    """Parse a command line as click does before it runs it (each group, then the command:
    every option and argument converted, an unknown one refused), invoking nothing."""
    contexts: list[click.Context] = []
    command: click.Command = cli
    name, rest, parent = "mirror", list(args), None
    while True:
        context = command.make_context(name, rest, parent=parent)
        contexts.append(context)
        if not isinstance(command, click.Group):
            return contexts
        # what the group leaves for its subcommand, read as Group.invoke reads it
        rest = [*context._protected_args, *context.args]
        found, command, rest = command.resolve_command(context, rest)
        assert found is not None and command is not None
        name, parent = found, context


def test_the_container_args_parse_as_the_real_command_line() -> None:
    """The pods' args, not `args + --help`: a misspelt option or a missing argument fails."""
    parsed = {}
    for name, spec in pod_specs():
        (container,) = spec["containers"]
        contexts = parse_for_real(container["args"])
        parsed[name] = (contexts[-1].command_path, contexts[-1].params)
    assert parsed["mirror-transfer-import"][0] == "mirror transfer import"
    params = parsed["mirror-transfer-import"][1]
    assert params["set_dir"] == Path("/transfer/set") and params["promote"] is True
    assert params["skip_imported"] is True
    assert parsed["mirror-chart-refresh"][0] == "mirror chart refresh"
    assert parsed["mirror-serve"][0] == "mirror serve"


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (["transfer", "import", "/transfer/set", "--promtoe"], click.NoSuchOption),
        (["transfer", "import"], click.MissingParameter),
        (["chart", "refresh", "--keep", "1"], click.NoSuchOption),
        (["chart", "refersh"], click.UsageError),
    ],
)
def test_wrong_container_args_are_caught(args: list[str], error: type[Exception]) -> None:
    with pytest.raises(error):
        parse_for_real(args)
