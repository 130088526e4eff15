"""The CLI's one error mapping: exit codes, one-line messages, JSON errors."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import click
import pytest

from mirror.cli import COMMANDS, cli, hoist_global_options, main
from tests.fixtures.cli import mirror_cli, start_mirror, write_config


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
        "schema": "mirror.error/1",
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


def test_no_config_file_anywhere_is_exit_2_naming_the_places(tmp_path: Path) -> None:
    if Path("/etc/mirror/config.toml").exists():
        pytest.skip("this host has /etc/mirror/config.toml")
    result = mirror_cli("status")
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        "mirror: error: no config file found (looked at --config: not given, "
        "$MIRROR_CONFIG: not set, /etc/mirror/config.toml: absent) (write one from "
        "config.example.toml, or pass --defaults to try the embedded defaults)"
    ]
    allowed = mirror_cli("--defaults", "config", "check", "--json")
    assert allowed.returncode == 0, allowed.stderr
    assert json.loads(allowed.stdout)["source"] == "(embedded defaults)"


def test_read_only_commands_never_create_the_store(tmp_path: Path) -> None:
    store = tmp_path / "state" / "store"
    config = write_config(tmp_path / "c.toml", {"store": {"path": str(store)}})
    for command, code in (
        (("status",), 3),
        (("store", "list"), 3),
        (("store", "verify"), 3),
        (("config", "check"), 0),
    ):
        result = mirror_cli(*command, "--config", str(config))
        assert result.returncode == code, (command, result.stderr)
        if code:
            assert result.stderr.startswith("mirror: error: no store yet: ")
        assert not (tmp_path / "state").exists(), command


def test_read_only_commands_never_create_a_postgresql_index(
    tmp_path: Path, postgres_database: str
) -> None:
    """On PostgreSQL too: `status` and `store list` of an empty database said "nothing yet"
    with exit 0 after creating every table; now exit 3 like SQLite, and no table is made."""
    import sqlalchemy

    store = tmp_path / "store"
    settings = {"store": {"path": str(store), "database": postgres_database}}
    config = write_config(tmp_path / "c.toml", settings)
    for command in (("status",), ("store", "list"), ("store", "verify")):
        result = mirror_cli(*command, "--config", str(config))
        assert result.returncode == 3, (command, result.stderr)
        assert result.stderr.startswith("mirror: error: no store yet: "), result.stderr
    engine = sqlalchemy.create_engine(postgres_database)
    with engine.connect() as connection:
        assert sqlalchemy.inspect(connection).get_table_names() == []
    engine.dispose()
    assert not store.exists()


def test_export_run_of_an_unconfigured_domain_asks_for_adhoc(tmp_path: Path) -> None:
    config = write_config(
        tmp_path / "c.toml",
        {"store": {"path": str(tmp_path / "store")}, "exports": [{"domain": "a.example.com"}]},
    )
    result = mirror_cli("export", "run", "b.example.com", "--config", str(config))
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"mirror: error: b.example.com is not an [[exports]] domain in {config} "
        "(add it there, or pass --adhoc to export it once anyway)"
    ]


def test_daemon_without_domains_refuses_to_start(tmp_path: Path) -> None:
    config = write_config(tmp_path / "c.toml", {"store": {"path": str(tmp_path / "store")}})
    result = mirror_cli("daemon", "--config", str(config), "--json")
    assert result.returncode == 2
    assert json.loads(result.stdout)["error"].startswith(
        f"no domains to export: no [[exports]] in {config}"
    )
    assert not (tmp_path / "store").exists()


def test_global_options_move_before_the_command() -> None:
    assert hoist_global_options(["store", "list", "--json", "-vv", "--config", "c.toml"]) == [
        "--json",
        "-vv",
        "--config",
        "c.toml",
        "store",
        "list",
    ]
    assert hoist_global_options(["export", "run", "d", "--config=x", "--", "--json"]) == [
        "--config=x",
        "export",
        "run",
        "d",
        "--",
        "--json",
    ]


def test_a_global_option_missing_its_value_after_the_command_says_so() -> None:
    result = mirror_cli("store", "list", "--config")
    assert result.returncode == 2
    assert result.stderr.splitlines() == [result.stderr.strip()]
    assert "'--config' requires an argument" in result.stderr


@pytest.fixture
def broken_command() -> Iterator[str]:
    """A real command that fails in a way nobody planned for."""

    @click.command("broken-for-test")
    def broken() -> None:
        raise RuntimeError("the unplanned happened")

    cli.add_command(broken)
    yield "broken-for-test"
    cli.commands.pop("broken-for-test")


@pytest.mark.parametrize("verbose", [False, True])
def test_unexpected_errors_are_one_line_and_exit_1(
    broken_command: str, verbose: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main([broken_command, "--json", *(["-v"] if verbose else [])])
    assert exited.value.code == 1
    out, err = capsys.readouterr()
    assert json.loads(out)["error"].startswith("unexpected RuntimeError: the unplanned happened")
    assert (
        err.strip()
        .splitlines()[-1]
        .startswith("mirror: error: unexpected RuntimeError: the unplanned happened")
    )
    assert ("Traceback" in err) is verbose


def test_keys_show_of_a_missing_or_foreign_file(tmp_path: Path) -> None:
    missing = mirror_cli("keys", "show", str(tmp_path / "transfer.pub"))
    assert missing.returncode == 3
    assert missing.stderr.splitlines() == [
        f"mirror: error: key file {tmp_path / 'transfer.pub'} does not exist"
    ]
    (tmp_path / "notes.txt").write_text("not a key\n")
    foreign = mirror_cli("keys", "show", str(tmp_path / "notes.txt"))
    assert foreign.returncode == 2
    assert "signing key" not in foreign.stderr
    assert "neither an Ed25519 public key nor an Ed25519 private key" in foreign.stderr


MODULES_AFTER = """
import json, sys
from mirror.cli import main
try:
    main(sys.argv[2:])
except SystemExit as exc:
    code = exc.code
with open(sys.argv[1], "w") as out:
    json.dump({"exit": code, "modules": sorted(sys.modules)}, out)
"""
HEAVY_FOR_EVERYONE = ("httpx", "boto3", "botocore", "rich", "cryptography", "yaml", "alembic")


def modules_after(tmp_path: Path, *args: str) -> tuple[int, set[str]]:
    """Exit code and every module loaded by `mirror ARGS`, run in a fresh interpreter."""
    report = tmp_path / "modules.json"
    subprocess.run(
        [sys.executable, "-c", MODULES_AFTER, str(report), *args],
        capture_output=True,
        check=False,
        timeout=120,
        env={k: v for k, v in os.environ.items() if not k.startswith("MIRROR_")},
    )
    document = json.loads(report.read_text())
    return document["exit"], {name.split(".")[0] for name in document["modules"]} | set(
        document["modules"]
    )


def test_help_imports_no_command_and_no_library_beyond_click(tmp_path: Path) -> None:
    code, modules = modules_after(tmp_path, "--help")
    assert code == 0
    unwanted = {*HEAVY_FOR_EVERYONE, "sqlalchemy", "pydantic", "stamina", "mirror.config"}
    assert modules & unwanted == set()
    assert not any(
        name.startswith(("mirror.vendorapi", "mirror.store", "mirror.export")) for name in modules
    )


def test_status_imports_only_the_index_and_settings(tmp_path: Path) -> None:
    config = write_config(
        tmp_path / "c.toml",
        {"store": {"path": str(tmp_path / "store")}, "exports": [{"domain": "docs.example.com"}]},
    )
    assert mirror_cli("--config", str(config), "db", "upgrade").returncode == 0
    code, modules = modules_after(tmp_path, "--config", str(config), "status")
    assert code == 0
    assert {"sqlalchemy", "pydantic", "mirror.export.status"} <= modules  # it did run
    assert modules & {*HEAVY_FOR_EVERYONE, "prometheus_client"} == set()
    # a SQLite index needs neither PostgreSQL's dialect (its drivers), Alembic, nor the
    # retry machinery (stamina, tenacity) of the commands that talk to the vendor
    unused = ("sqlalchemy.dialects.postgresql", "alembic", "stamina", "tenacity")
    assert not any(name.startswith(unused) for name in modules)
    assert not any(
        name.startswith(
            ("mirror.vendorapi", "mirror.airgap", "mirror.transferset", "mirror.outbound")
        )
        for name in modules
    )


def test_help_summaries_match_the_commands_they_stand_for() -> None:
    lazy_help = mirror_cli("--help").stdout
    context = click.Context(cli)
    for name, (_, summary) in COMMANDS.items():
        command = cli.get_command(context, name)
        assert command is not None and (command.help or "").split("\n\n")[0] == summary, name
    loaded_help = cli.get_help(context)  # every command loaded: click's own rendering
    assert lazy_help.split("Commands:")[1].rstrip() == loaded_help.split("Commands:")[1].rstrip()


@pytest.mark.parametrize("as_json", [False, True])
def test_a_reader_that_stops_reading_ends_the_command_as_it_ends_cat(
    tmp_path: Path, as_json: bool
) -> None:
    """`mirror status | head -1`: the rest of the output has no reader. It exited 1 with
    nothing said (click's own EPIPE path); now it ends as `cat` or `yes` end, killed by
    SIGPIPE (the shell says 141), nothing on stderr. The output is far larger than a pipe's
    buffer, so the write after `head` is gone always meets the closed pipe."""
    domains = [{"domain": f"d{n:04d}.example.com"} for n in range(2000)]
    config = write_config(tmp_path / "c.toml", {"store": {"path": str(tmp_path / "s")}})
    config.write_text(
        config.read_text() + "".join(f'[[exports]]\ndomain = "{d["domain"]}"\n' for d in domains)
    )
    assert mirror_cli("--config", str(config), "db", "upgrade").returncode == 0
    argv = ["--config", str(config), "status", *(["--json"] if as_json else [])]
    process = start_mirror(*argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert process.stdout is not None and process.stderr is not None
    first = process.stdout.readline()
    process.stdout.close()
    code = process.wait(timeout=120)
    stderr = process.stderr.read().decode()
    process.stderr.close()
    assert first.strip() in (b"{", b"") or first.startswith(b"DOMAIN")
    assert code == -signal.SIGPIPE, stderr
    assert stderr == ""


@pytest.fixture
def pipe_breaking_command() -> Iterator[str]:
    """A command whose write to a socket meets a peer that went away (not stdout)."""

    @click.command("pipe-for-test")
    def breaks() -> None:
        raise BrokenPipeError(32, "Broken pipe")

    cli.add_command(breaks)
    yield "pipe-for-test"
    cli.commands.pop("pipe-for-test")


def test_a_broken_pipe_that_is_not_stdout_is_an_error_line(
    pipe_breaking_command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Click ended any EPIPE as a silent exit 1: a socket's too, an upload cut off unsaid."""
    with pytest.raises(SystemExit) as exited:
        main([pipe_breaking_command])
    assert exited.value.code == 1
    _, err = capsys.readouterr()
    assert (
        err.strip()
        .splitlines()[-1]
        .startswith("mirror: error: unexpected BrokenPipeError: [Errno 32] Broken pipe")
    )


def test_keys_generate_says_where_each_half_of_each_kind_of_key_belongs(tmp_path: Path) -> None:
    """A receipt key belongs on the air-gapped side (it said: keep it on the connected side)."""
    receipt = mirror_cli("keys", "generate", "--out", str(tmp_path / "receipt"))
    assert receipt.returncode == 0, receipt.stderr
    assert "keep it on the air-gapped side" in receipt.stdout
    assert "copy it to the connected side: transfer.receipt_keys" in receipt.stdout
    assert "connected side, set" not in receipt.stdout
    named = mirror_cli("keys", "generate", "--out", str(tmp_path / "site-a"), "--for", "receipt")
    assert "keep it on the air-gapped side" in named.stdout
    transfer = mirror_cli("keys", "generate", "--out", str(tmp_path / "transfer"))
    assert "keep it on the connected side, set transfer.signing_key" in transfer.stdout
    assert "copy it to the air-gapped side: target.transfer_keys" in transfer.stdout


@pytest.mark.parametrize(
    ("command", "option", "says"),
    [
        ("transfer verify", "--trusted-key", "A public key whose transfer sets are accepted"),
        ("transfer import", "--trusted-key", "A public key whose transfer sets are accepted"),
        ("transfer receive", "--trusted-key", "A public key whose transfer sets are accepted"),
        ("bundle-self", "--signing-key", "The private key that signs the installer"),
        ("sim serve", "--api-key", "The admin API key the simulator accepts"),
    ],
)
def test_each_key_option_says_which_key_and_key_still_works(
    command: str, option: str, says: str
) -> None:
    """`--key` meant four keys; each option now names its own, the old name hidden."""
    shown = mirror_cli(*command.split(), "--help")
    text = " ".join(shown.stdout.split())
    assert f"{option} " in text and says in text
    assert not re.search(r"^\s+--key\b", shown.stdout, re.MULTILINE)
    alias = next(p for p in cli_command(command).params if "--key" in p.opts)
    assert alias.hidden and alias.name == next(
        p.name for p in cli_command(command).params if option in p.opts
    )


def cli_command(path: str) -> click.Command:
    command: click.Command = cli
    ctx = click.Context(cli)
    for name in path.split():
        assert isinstance(command, click.Group)
        found = command.get_command(ctx, name)
        assert found is not None
        command = found
    return command


def test_help_texts_say_what_operators_need_once() -> None:
    bundle = mirror_cli("bundle-self", "--help").stdout
    assert bundle.count("Example:") == 1
    sim = mirror_cli("sim", "serve", "--help").stdout
    assert "SimConfig" not in sim
    for option in ("--queue-seconds", "--run-seconds", "--pages", "--link-ttl", "--project-id"):
        line = next(line for line in sim.splitlines() if line.strip().startswith(option))
        assert len(line.split()) > 2, f"{option} has no help: {line!r}"
