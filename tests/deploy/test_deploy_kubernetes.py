"""deploy/kubernetes/: every manifest validates against the Kubernetes schemas (offline, with
kubernetes-validate), every pod runs as non-root on a read-only root file system with
limits, the image is named by the kustomize setting, and what the pods run is real: the
config in the ConfigMap loads, its public key reads, the container args parse as the real
command line parses them. tests/faults/test_deploy_faults.py holds the hostile checks
(environment names, tokens, network, credentials, room for rebuilds)."""

from __future__ import annotations

import tomllib
from pathlib import Path

import click
import kubernetes_validate
import pytest

from mirror.cli import cli
from mirror.config import settings_from_dict
from mirror.transferset.keys import load_public_key
from tests.fixtures.manifests import DEPLOY, kustomization, pod_specs, resources

KUBERNETES_VERSION = "1.30"


def test_every_file_in_the_directory_is_listed_in_the_kustomization() -> None:
    listed = set(kustomization()["resources"])
    present = {p.name for p in DEPLOY.glob("*.yaml")} - {"kustomization.yaml"}
    assert listed == present


@pytest.mark.parametrize("version", [KUBERNETES_VERSION, kubernetes_validate.latest_version()])
def test_manifests_validate_against_the_kubernetes_schemas(version: str) -> None:
    kinds = set()
    for resource in resources():
        kubernetes_validate.validate(resource, version, strict=True)
        kinds.add(resource["kind"])
    assert {"CronJob", "Job", "ConfigMap", "Secret"} <= kinds


def test_an_invalid_manifest_is_caught() -> None:
    job = next(r for r in resources() if r["kind"] == "Job")
    job["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"] = "1 CPU"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(job, KUBERNETES_VERSION, strict=True)


def test_pods_are_non_root_read_only_limited_and_use_the_image_setting() -> None:
    specs = pod_specs()
    assert {name for name, _ in specs} == {"mirror-chart-refresh", "mirror-transfer-import"}
    images = {entry["name"] for entry in kustomization()["images"]}
    for name, spec in specs:
        assert spec["securityContext"]["runAsNonRoot"] is True, name
        for container in spec["containers"]:
            context = container["securityContext"]
            assert context["readOnlyRootFilesystem"] is True, name
            assert context["allowPrivilegeEscalation"] is False, name
            assert context["capabilities"]["drop"] == ["ALL"], name
            assert {"cpu", "memory"} <= set(container["resources"]["limits"]), name
            assert container["image"] in images, name


def test_the_configmap_config_loads_and_its_public_key_reads(tmp_path: Path) -> None:
    config_map = next(r for r in resources() if r["kind"] == "ConfigMap")
    document = tomllib.loads(config_map["data"]["config.toml"])
    settings = settings_from_dict(document)
    assert [str(p) for p in settings.target.transfer_keys] == ["/etc/mirror/config/transfer.pub"]
    assert settings.chart.values_path.startswith("/values/")
    public = tmp_path / "transfer.pub"
    public.write_text(config_map["data"]["transfer.pub"])
    assert len(load_public_key(public).key_id) == 16


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
    assert parsed["mirror-chart-refresh"][0] == "mirror chart refresh"


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
