"""Preflight (mirror/preflight.py): `config check --for PURPOSE` refuses exactly what the
commands of that purpose refuse at their start, with the same line and code, and the daemon
refuses to start on settings it cannot use instead of retrying for ever."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, get_args

import jsonschema
import pytest

from mirror.cli.contract import document_schema
from mirror.cli.preflight import CHECKS, PURPOSES, Purpose
from mirror.transferset.keys import generate_keypair
from tests.fixtures.cli import REPO, error_lines, mirror_cli, write_config

DOCS = "docs.preflight.test"


def error_line(stderr: str) -> str:
    """The one line of stderr (a service off a terminal: its JSON error record, read back)."""
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    (line,) = error_lines(stderr)
    assert line.startswith("mirror: error: "), stderr
    return line


def test_every_purpose_has_its_checks() -> None:
    assert set(get_args(Purpose)) == set(PURPOSES) == set(CHECKS)


def test_the_example_config_without_its_admin_key_is_refused_as_the_daemon_refuses_it(
    tmp_path: Path,
) -> None:
    """The trial: config.example.toml, every key in place but the admin API key. `config
    check` said `valid`, and the daemon reported ready and retried every 300 s for ever."""
    etc = tmp_path / "etc"
    text = (REPO / "config.example.toml").read_text()
    text = text.replace("/etc/mirror", str(etc)).replace("/var/lib/mirror", str(tmp_path / "s"))
    config = tmp_path / "config.toml"
    config.write_text(text)
    generate_keypair(etc / "transfer")

    checked = mirror_cli("--config", str(config), "config", "check")
    line = error_line(checked.stderr)
    assert checked.returncode == 2
    assert f"{etc / 'admin-api-key'}" in line
    for_daemon = mirror_cli("--config", str(config), "config", "check", "--for", "daemon")
    assert (for_daemon.returncode, error_line(for_daemon.stderr)) == (2, line)
    daemon = mirror_cli("--config", str(config), "daemon", timeout=60)
    assert (daemon.returncode, error_line(daemon.stderr)) == (2, line)
    assert not (tmp_path / "s").exists()  # refused before anything was made

    as_json = mirror_cli("--config", str(config), "--json", "config", "check", "--for", "daemon")
    document = json.loads(as_json.stdout)
    schema = document_schema("config check")
    assert schema is not None
    jsonschema.Draft202012Validator(schema).validate(document)
    assert document["valid"] is False and document["exit_code"] == 2
    assert line == f"mirror: error: {document['error']}"

    (etc / "admin-api-key").write_text("mint_the_admin_key\n")
    fixed = mirror_cli("--config", str(config), "config", "check", "--for", "daemon")
    assert fixed.returncode == 0, fixed.stderr
    assert fixed.stdout.startswith(f"# {config}: valid for daemon")


@pytest.fixture
def base(tmp_path: Path) -> dict[str, Any]:
    """Settings every purpose can use (the bucket is never reached: each case breaks one)."""
    signing = generate_keypair(tmp_path / "keys" / "transfer")
    (tmp_path / "key").write_text("mint_preflight_key\n")
    (tmp_path / "key").chmod(0o600)  # as a key file should be (it also stands for a bad one)
    return {
        "api": {"key_file": str(tmp_path / "key")},
        "store": {"path": str(tmp_path / "store")},
        "exports": [{"domain": DOCS}],
        "transfer": {
            "signing_key": str(signing.private_path),
            "receipt_keys": [str(signing.public_path)],
        },
        "target": {
            "endpoint_url": "http://127.0.0.1:9",
            "bucket": "preflight",
            "transfer_keys": [str(signing.public_path)],
        },
        "chart": {"values_path": str(tmp_path / "{domain}.yaml")},
    }


BROKEN: list[tuple[str, str, dict[str, Any], list[str], str]] = [
    ("daemon", "exports", {"value": []}, ["daemon"], "no domains to export"),
    ("export", "api", {"key_file": None}, ["export", "run", DOCS], "no admin API key"),
    ("export", "store", {"path": "FILE"}, ["export", "run", DOCS], "is not a directory"),
    ("api", "api", {"key_file": "ABSENT"}, ["export", "status", "j1"], "admin API key file"),
    ("db", "store", {"path": "FILE"}, ["db", "upgrade"], "is not a directory"),
    ("pack", "transfer", {"signing_key": None}, ["transfer", "pack", "OUT"], "signing_key"),
    ("pack", "transfer", {"signing_key": "FILE"}, ["bundle-self", "OUT"], "signing key file"),
    ("verify", "target", {"transfer_keys": []}, ["transfer", "verify", "SET"], "no trusted"),
    ("import", "target", {"transfer_keys": ["ABSENT"]}, ["transfer", "import", "SET"], "public"),
    ("import", "target", {"bucket": None}, ["transfer", "import", "SET"], "target.bucket"),
    ("import", "target", {"work_dir": "FILE"}, ["transfer", "import", "SET"], "work_dir"),
    ("ack", "transfer", {"receipt_keys": ["ABSENT"]}, ["transfer", "ack", "R"], "public key"),
    ("push", "target", {"bucket": None}, ["transfer", "push"], "target.bucket"),
    ("chart", "target", {"bucket": None}, ["chart", "values", DOCS], "target.bucket"),
    ("chart", "target", {"ca_bundle": "FILE"}, ["chart", "history", DOCS], "CA file"),
    ("refresh", "chart", {"values_path": None}, ["chart", "refresh"], "values_path"),
    ("refresh", "exports", {"value": []}, ["chart", "refresh"], "no domain to refresh"),
]


@pytest.mark.parametrize(("purpose", "section", "change", "command", "says"), BROKEN)
def test_config_check_refuses_with_the_line_its_commands_print(
    tmp_path: Path,
    base: dict[str, Any],
    purpose: str,
    section: str,
    change: dict[str, Any],
    command: list[str],
    says: str,
) -> None:
    named = {"FILE": str(tmp_path / "key"), "ABSENT": str(tmp_path / "absent")}

    def concrete(value: Any) -> Any:
        if isinstance(value, list):
            return [concrete(v) for v in value]
        return named.get(value, value) if isinstance(value, str) else value

    document = {**base}
    if section == "exports":
        document["exports"] = change["value"]
    else:
        merged = {**base[section], **{k: concrete(v) for k, v in change.items()}}
        document[section] = {k: v for k, v in merged.items() if v is not None}
    config = str(write_config(tmp_path / "broken.toml", document))
    args = [named.get(arg, str(tmp_path / arg) if arg.isupper() else arg) for arg in command]

    checked = mirror_cli("--config", config, "config", "check", "--for", purpose)
    line = error_line(checked.stderr)
    assert checked.returncode == 2 and says in line
    ran = mirror_cli("--config", config, *args, timeout=60)
    assert (ran.returncode, error_line(ran.stderr)) == (2, line)
    assert not (tmp_path / "store").exists()  # refused before anything was made


def test_what_each_purpose_needs_passes_on_usable_settings(
    tmp_path: Path, base: dict[str, Any]
) -> None:
    config = str(write_config(tmp_path / "good.toml", base))
    for purpose in PURPOSES:
        checked = mirror_cli("--config", config, "config", "check", "--for", purpose)
        assert checked.returncode == 0, (purpose, checked.stderr)
        assert checked.stdout.startswith(f"# {config}: valid for {purpose}")
