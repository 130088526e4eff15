"""The CLI's one error mapping: exit codes, one-line messages, JSON errors."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import mirror_cli, write_config


def test_help_lists_the_contract_commands() -> None:
    result = mirror_cli("--help")
    assert result.returncode == 0
    for command in ("config", "db", "sim", "demo"):
        assert command in result.stdout


def test_unknown_command_is_usage_error() -> None:
    result = mirror_cli("frobnicate")
    assert result.returncode == 2


def test_missing_config_is_exit_2_with_json_error(tmp_path: Path) -> None:
    result = mirror_cli("--json", "--config", str(tmp_path / "none.toml"), "config", "check")
    assert result.returncode == 2
    assert json.loads(result.stdout) == {
        "error": f"config file {tmp_path / 'none.toml'} does not exist",
        "exit_code": 2,
    }
    assert result.stderr.strip().startswith("mirror: error: ")


def test_db_upgrade_creates_the_index(tmp_path: Path) -> None:
    config = write_config(tmp_path / "c.toml", {"store": {"path": str(tmp_path / "store")}})
    result = mirror_cli("--json", "--config", str(config), "db", "upgrade")
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["from"] is None and document["to"]
    assert (tmp_path / "store" / "mirror.db").is_file()
    again = json.loads(mirror_cli("--json", "--config", str(config), "db", "upgrade").stdout)
    assert again["from"] == again["to"] == document["to"]


def test_config_from_environment_variable(tmp_path: Path) -> None:
    config = write_config(tmp_path / "c.toml", {"api": {"export_flow": "sideways"}})
    result = mirror_cli("config", "check", env={"MIRROR_CONFIG": str(config)})
    assert result.returncode == 2
    assert "api.export_flow" in result.stderr
