"""The rules of tests/README.md that a reader cannot see from one file: every test directory is
a package (two directories may hold files of the same name), helpers that several test files
need live in tests/fixtures/ (no test file imports another), and the command line is started
only by tests/fixtures/cli.py (one environment, secrets checked), whose two ways of running a
command end alike."""

from __future__ import annotations

import ast
import subprocess
import time
from pathlib import Path

import pytest

from tests.fixtures.cli import REPO, mirror_cli, require_no_secrets, write_config

TESTS = REPO / "tests"
# Imports of one test file by another that predate the rule; each is a helper to move into
# tests/fixtures/ (issue 19). The list only shrinks.
KNOWN_TEST_IMPORTS = {
    ("test_agentjobs.py", "test_client"),
    ("test_claim.py", "test_lease"),
    ("test_completeness_pipeline.py", "test_export_pipeline"),
}
# Started otherwise on purpose: the artefact is built with the network shut off, and the demo
# runs on a bare interpreter to show what is missing; this file only names the pair.
OWN_INTERPRETER = {"fixtures/artefact.py", "integration/test_demo.py", "test_test_layout.py"}
RUN_MIRROR = ["-m", "mirror"]


def python_files() -> list[Path]:
    return sorted(p for p in TESTS.rglob("*.py") if "__pycache__" not in p.parts)


def test_every_directory_with_tests_is_a_package() -> None:
    folders = {p.parent for p in TESTS.rglob("test_*.py")} | {TESTS / "fixtures"}
    missing = [f for f in folders if not (f / "__init__.py").exists()]
    assert sorted(str(f.relative_to(REPO)) for f in missing) == []


def test_no_test_file_imports_another() -> None:
    found = set()
    for path in python_files():
        for node in ast.walk(ast.parse(path.read_text())):
            module = node.module if isinstance(node, ast.ImportFrom) else None
            if module and module.startswith("tests.") and module.rsplit(".", 1)[1][:5] == "test_":
                found.add((path.name, module.rsplit(".", 1)[1]))
    assert found - KNOWN_TEST_IMPORTS == set()
    assert KNOWN_TEST_IMPORTS - found == set(), "moved to tests/fixtures/: shorten the list"


def runs_the_package(node: ast.AST) -> bool:
    """A list or tuple literal holding "-m", "mirror" one after the other."""
    if not isinstance(node, ast.List | ast.Tuple):
        return False
    values = [e.value if isinstance(e, ast.Constant) else None for e in node.elts]
    return any(values[i : i + 2] == RUN_MIRROR for i in range(len(values)))


def test_only_the_cli_fixture_starts_the_command_line() -> None:
    starters = {
        str(path.relative_to(TESTS))
        for path in python_files()
        if any(runs_the_package(node) for node in ast.walk(ast.parse(path.read_text())))
    }
    assert starters - OWN_INTERPRETER == {"fixtures/cli.py"}


def test_a_secret_in_the_output_fails_naming_only_its_variable() -> None:
    env = {"MIRROR_API_KEY": "mint_0123456789", "AWS_SECRET_ACCESS_KEY": "s3-secret-value"}
    with pytest.raises(AssertionError) as leaked:
        require_no_secrets(env, "ok\n", "mirror: error: key mint_0123456789 refused\n")
    assert "MIRROR_API_KEY" in str(leaked.value) and "mint_0123456789" not in str(leaked.value)
    require_no_secrets(env, "mirror: error: the key was refused (HTTP 401)\n")


CLI_CASES = {
    "version": (["--version"], {}),
    "usage error": (["--json", "store", "list", "--no-such-option"], {}),
    "env and cwd": (["--json", "config", "check"], {"MIRROR_CONFIG": "config.toml"}),
    "no config": (["store", "list"], {"MIRROR_CONFIG": "absent.toml"}),
    "redacted secret": (
        ["--json", "config", "check"],
        {"MIRROR_CONFIG": "config.toml", "MIRROR_API_KEY": "mint_fixture_secret_value"},
    ),
}


@pytest.mark.parametrize("case", sorted(CLI_CASES))
def test_a_forked_command_ends_as_a_started_one(
    case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """mirror_cli forks its commands from a server with the libraries imported; a command must
    end the same as one started from scratch (exit code, stdout, stderr), environment and
    working directory included."""
    args, env = CLI_CASES[case]
    write_config(tmp_path / "config.toml", {"store": {"path": "store"}})
    ends = {}
    for way in ("exec", "fork"):
        monkeypatch.setenv("MIRROR_TEST_CLI", way)
        done = mirror_cli(*args, env=env, cwd=tmp_path)
        ends[way] = (done.returncode, done.stdout, done.stderr)
    assert ends["fork"] == ends["exec"]
    assert ends["fork"][0] == {"version": 0, "usage error": 2, "no config": 2}.get(case, 0)


@pytest.mark.parametrize("way", ["exec", "fork"])
def test_a_command_past_its_timeout_is_killed_and_named(
    way: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MIRROR_TEST_CLI", way)
    started = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired):
        mirror_cli("sim", "serve", "--port", "0", timeout=3)
    assert time.monotonic() - started < 60  # killed: `sim serve` alone never ends
