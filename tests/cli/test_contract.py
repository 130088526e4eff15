"""The scripting contract: every command's --json document (typed after the command name)
matches its description in docs/json.md, and every command's --help gives an example and
its exit codes. Run against the simulator, the S3 API server and real transfer sets."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import click
import jsonschema
import pytest
from click.testing import CliRunner

from mirror.cli import cli as root
from mirror.cli.contract import (
    CONTRACTS,
    ERROR_DOCUMENT,
    TIMESTAMP_PATTERN,
    all_schemas,
    document_schema,
    render_markdown,
)
from mirror.config import TargetSettings
from mirror.sim import Simulator
from tests.fixtures.cli import REPO, mirror_cli, write_config

DOMAIN = "docs.contract.test"
SNAKE = re.compile(r"^[a-z][a-z0-9_]*$")
LOOKS_LIKE_TIME = re.compile(r"^\d{4}-\d{2}-\d{2}T")


def leaf_commands(command: click.Command, path: str = "") -> dict[str, click.Command]:
    if isinstance(command, click.Group):
        ctx = click.Context(command)
        found: dict[str, click.Command] = {}
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            assert sub is not None
            found.update(leaf_commands(sub, f"{path} {name}".strip()))
        return found
    return {path: command}


def check_conventions(value: Any, where: str = "") -> None:
    """snake_case names everywhere; every timestamp-looking string in the one form."""
    if isinstance(value, dict):
        for key, inner in value.items():
            assert SNAKE.match(key), f"{where}.{key} is not snake_case"
            check_conventions(inner, f"{where}.{key}")
    elif isinstance(value, list):
        for index, inner in enumerate(value):
            check_conventions(inner, f"{where}[{index}]")
    elif isinstance(value, str) and LOOKS_LIKE_TIME.match(value):
        assert re.match(TIMESTAMP_PATTERN, value), f"{where} = {value!r} is not RFC 3339 Z"


class Walker:
    """Runs `mirror COMMAND ARGS --config C --json` and validates what it prints."""

    def __init__(self, config: Path, env: dict[str, str]) -> None:
        self.config = config
        self.env = env
        self.seen: set[str] = set()

    def __call__(self, command: str, *args: str, exit_code: int = 0) -> dict[str, Any]:
        done = mirror_cli(
            *command.split(), *args, "--config", str(self.config), "--json", env=self.env
        )
        assert done.returncode == exit_code, (command, done.stdout, done.stderr)
        return self.validate(command, json.loads(done.stdout))

    def validate(self, command: str, document: dict[str, Any]) -> dict[str, Any]:
        """Checks a document `mirror COMMAND --json` printed against its contract."""
        schema = document_schema(command)
        assert schema is not None
        jsonschema.Draft202012Validator(schema).validate(document)
        check_conventions(document)
        self.seen.add(command)
        return document


@pytest.mark.slow
def test_every_command_json_document_matches_its_description(
    sim: Simulator,
    target_settings: TargetSettings,
    tmp_path: Path,
    built_document: dict[str, Any],
) -> None:
    keys = tmp_path / "keys" / "transfer"
    keys.parent.mkdir()
    config = write_config(
        tmp_path / "config.toml",
        {
            "api": {"base_url": sim.url, "project_id": "proj_sim", "retry_timeout": "5s"},
            "store": {"path": str(tmp_path / "store")},
            "transfer": {"signing_key": f"{keys}.key", "receipt_keys": [f"{keys}.pub"]},
            "target": {
                "endpoint_url": target_settings.endpoint_url,
                "bucket": target_settings.bucket,
                "prefix": target_settings.prefix,
                "region": target_settings.region,
                "transfer_keys": [f"{keys}.pub"],
                "receipt_keys": [f"{keys}.pub"],
            },
            "chart": {"values_path": str(tmp_path / "deploy" / "{domain}.values.yaml")},
            "exports": [{"domain": DOMAIN}],
        },
    )
    walk = Walker(config, {"MIRROR_API_KEY": sim.key, "AWS_EC2_METADATA_DISABLED": "true"})

    walk("keys generate", "--out", str(keys))
    assert walk("keys show", f"{keys}.pub")["kind"] == "public"
    made = walk.validate("bundle-self", built_document)  # the session's artefact, built once
    assert made["wheels"] and made["key_id"]
    assert walk("config check")["valid"] is True
    assert not (tmp_path / "store").exists()
    walk("db upgrade")

    first = walk("export run", DOMAIN)
    started = walk("export start", DOMAIN)
    job = started
    deadline = time.monotonic() + 120
    while job["status"] != "completed" and time.monotonic() < deadline:
        time.sleep(0.2)
        job = walk("export status", started["job_id"])
    assert job["status"] == "completed"
    walk("export bundle", started["job_id"])
    agent_job = sim.add_agent_job("pr", seconds=0)
    walk("agent-job get", agent_job)
    walk("agent-job watch", agent_job, "--interval", "0.1s")

    assert walk("status")["domains"][0]["latest_version"]["version"] == first["version"]
    assert len(walk("store list")["versions"]) == 1
    assert walk("store verify")["ok"] is True
    blob = Path(walk("store list")["versions"][0]["path"])
    blob.chmod(0o644)
    original = blob.read_bytes()
    blob.write_bytes(b"rot")
    rotten = walk("store verify", exit_code=5)
    assert rotten["ok"] is False and rotten["exit_code"] == 5
    blob.write_bytes(original)
    walk("store gc", "--dry-run")

    assert walk("target check")["ok"] is True
    set_dir = tmp_path / "usb" / "set1"
    set_dir.parent.mkdir()
    assert walk("transfer pack", str(set_dir))["nothing"] is False
    walk("transfer verify", str(set_dir))
    imported = walk("transfer import", str(set_dir))
    walk("transfer ack", imported["receipt"])
    evidence = walk("evidence", DOMAIN, first["version"], "--out", str(tmp_path / "evidence"))
    assert "VERIFY.md" in evidence["files"] and evidence["set_sequence"] == 1
    again = walk("transfer resend", "1", str(tmp_path / "usb" / "set1-again"))
    assert again["manifest_sha256"] == imported["manifest_sha256"]
    copy = Path(again["path"])
    copied = {p.relative_to(copy): p.read_bytes() for p in copy.rglob("*") if p.is_file()}
    assert copied == {  # the same bytes, the receipt beside the set left out
        p.relative_to(set_dir): p.read_bytes()
        for p in set_dir.rglob("*")
        if p.is_file() and not p.name.startswith("receipt.json")
    }
    assert Path("SHA256SUMS") in copied
    walk("chart promote", DOMAIN, first["version"])

    second = walk("export run", DOMAIN)
    assert second["version"] != first["version"]
    planned = walk("transfer pack", "--dry-run")
    assert planned["dry_run"] is True and planned["path"] is None
    assert planned["versions"][0]["base_version"] == first["version"]
    walk("transfer pack", str(tmp_path / "usb" / "set2"))
    assert walk("transfer lost", "2")["waiting_again"] == [
        {"domain": DOMAIN, "version": second["version"]}
    ]
    assert walk("sites")["sites"][0]["lost"] == [2]
    pushed = walk("transfer push", "--promote")
    assert pushed["import"]["receipt"] is None
    assert pushed["receipt"]["sequence"] == pushed["import"]["sequence"]

    assert walk("chart rollback", DOMAIN)["current"] == first["version"]
    walk("chart history", DOMAIN)
    assert "values" in walk("chart values", DOMAIN, "--pin", second["version"])
    values_file = tmp_path / "values.yaml"
    walk("chart values", DOMAIN, "--out", str(values_file))
    walk("chart check", str(values_file))
    chained = walk("chart check", str(values_file), "--provenance")
    assert chained["provenance"]["verified"] and chained["record"]["verified"]
    failed = walk("chart check", str(values_file), "--warn", "30d", exit_code=1)
    assert failed["exit_code"] == 1 and "(warning at 30d)" in failed["error"]
    walk("chart refresh")
    kept = walk("chart gc", "--keep", "1", "--dry-run")["domains"][0]["kept"]
    assert {v["version"] for v in kept} == {first["version"], second["version"]}

    sim.faults.damaged_domains["docs.cut.test"] = "truncated"
    cut = mirror_cli(
        "export", "run", "--adhoc", "docs.cut.test", "--config", str(config), env=walk.env
    )
    assert cut.returncode == 5, cut.stderr
    refused = walk("store list")["refused"][0]["version"]
    walk("store accept", "docs.cut.test", refused, "--reason", "the vendor counts redirects")

    with_documents = {key for key, contract in CONTRACTS.items() if contract.document}
    assert walk.seen == with_documents


def test_usage_errors_print_the_error_document_and_one_line() -> None:
    done = mirror_cli("store", "list", "--no-such-option", "--json")
    assert done.returncode == 2
    document = json.loads(done.stdout)
    jsonschema.Draft202012Validator(ERROR_DOCUMENT).validate(document)
    assert done.stderr.splitlines() == [f"mirror: error: {document['error']}"]
    assert (
        "--no-such-option" in document["error"] and "mirror store list --help" in document["error"]
    )


@pytest.mark.parametrize("args", [("frobnicate",), ("store",), ("export", "run")])
def test_usage_errors_end_in_one_error_line_with_exit_2(args: tuple[str, ...]) -> None:
    done = mirror_cli(*args)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1].startswith("mirror: error: ")
    assert "Traceback" not in done.stderr


def test_every_command_has_a_contract_and_its_help_shows_example_and_exit_codes() -> None:
    leaves = leaf_commands(root)
    assert set(leaves) == set(CONTRACTS)
    runner = CliRunner()
    for key in leaves:
        done = runner.invoke(root, [*key.split(), "--help"], terminal_width=200)
        assert done.exit_code == 0, key
        assert CONTRACTS[key].example in done.output, key
        assert "Exit codes: 0 ok" in done.output, key
    assert CONTRACTS["store list"].example in mirror_cli("store", "list", "--help").stdout


def test_docs_json_md_is_generated_from_the_contract() -> None:
    assert (REPO / "docs" / "json.md").read_text() == render_markdown()
    for name in all_schemas():
        assert f'"{name}"' in render_markdown() or name == "mirror.error/1"
    jsonschema.Draft202012Validator.check_schema(ERROR_DOCUMENT)
    for schema in all_schemas().values():
        jsonschema.Draft202012Validator.check_schema(schema)
