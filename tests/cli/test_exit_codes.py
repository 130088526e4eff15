"""Every command's error paths, walked: each ends in one `mirror: error:` line with a code its
`--help` lists, and the same mistake ends with the same code whichever command meets it
(docs/architecture.md, "Exit codes"): a missing config file, a bad argument or a setting
the command cannot use 2; a missing input file or directory, or anything else not found,
3; refused credentials 4; a failed verification 5; a full disk or medium 75.

Run against the simulator, SeaweedFS, real key pairs, a real store and a real transfer set;
each command gets a world of its own, and its cases run in the order listed."""

from __future__ import annotations

import functools
import re
import shutil
import subprocess
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from mirror.cli import cli as root
from mirror.cli.contract import CONTRACTS
from mirror.config import TargetSettings, settings_from_dict
from mirror.outbound.pack import pack
from mirror.sim import Simulator
from mirror.store.app import App
from mirror.transferset.keys import generate_keypair
from tests.fixtures.cli import error_lines, mirror_cli, write_config
from tests.fixtures.versions import add_version

DOCS = "docs.codes.test"
MiB = 1024 * 1024

CODES = {
    "missing config": 2,
    "bad argument": 2,
    "setting": 2,
    "missing input": 3,
    "not found": 3,
    "refused": 4,
    "verify": 5,
    "failed": 1,
    "no space": 75,
    "temporary": 75,
}
"""The one code of each kind of mistake, for every command."""

NO_SETTINGS = {"keys generate", "keys show", "sim serve", "demo", "transfer send"}
"""Commands that read no settings file (a missing one cannot stop them)."""


class World:
    """A connected and an air-gapped side in one config file, built as far as a case needs."""

    def __init__(
        self, tmp: Path, sim: Simulator, target: TargetSettings, disks: Callable[[int], Path]
    ) -> None:
        self.tmp = tmp
        self.sim = sim
        self.disks = disks
        self.keys = tmp / "keys"
        self.transfer = generate_keypair(self.keys / "transfer")
        self.receipt = generate_keypair(self.keys / "receipt")
        self.document: dict[str, Any] = {
            "api": {"base_url": sim.url, "project_id": "proj_sim", "retry_timeout": "5s"},
            "store": {"path": str(tmp / "store")},
            "exports": [{"domain": DOCS}],
            "transfer": {
                "signing_key": str(self.transfer.private_path),
                "receipt_keys": [str(self.receipt.public_path)],
            },
            "target": {
                "endpoint_url": target.endpoint_url,
                "bucket": target.bucket,
                "prefix": target.prefix,
                "region": target.region,
                "transfer_keys": [str(self.transfer.public_path)],
                "receipt_keys": [str(self.receipt.public_path)],
            },
            "chart": {"values_path": str(tmp / "values" / "{domain}.yaml")},
            "serve": {"listen": "127.0.0.1:0", "cache_dir": str(tmp / "serve-cache")},
        }
        self.config = write_config(tmp / "config.toml", self.document)
        self.env = {"MIRROR_API_KEY": sim.key}

    def config_with(self, section: str, **changes: Any) -> Path:
        """Another config file: `section` changed (a None value removes the key)."""
        document = {**self.document}
        if section == "exports":
            document["exports"] = changes["value"]
        else:
            merged = {**document[section], **changes}
            document[section] = {k: v for k, v in merged.items() if v is not None}
        name = f"{section}-{'-'.join(sorted(changes))}.toml"
        return write_config(self.tmp / name, document)

    @functools.cached_property
    def blob(self) -> Path:
        """The store with one version of DOCS; the path of its blob."""
        app = App(settings_from_dict(self.document))
        try:
            _, sha256 = add_version(app, DOCS, "2026-11-20", payload_size=3 * MiB)
            app.binding  # noqa: B018 - bound to its index, as an export binds it
            return app.store.blob_path(sha256)
        finally:
            app.close()

    @functools.cached_property
    def set_dir(self) -> Path:
        """Set 1 of the store, packed (as `transfer pack`) into usb/set-1."""
        self.with_store()
        app = App(settings_from_dict(self.document))
        try:
            (self.tmp / "usb").mkdir(exist_ok=True)
            made = pack(app, self.tmp / "usb" / "set-1")
        finally:
            app.close()
        assert made.path is not None
        return made.path

    def with_store(self) -> None:
        self.blob  # noqa: B018 - built on first use

    def with_set(self) -> None:
        self.set_dir  # noqa: B018 - built on first use

    def damage_set(self) -> None:
        """Set 1 where it was packed, one byte of a blob changed."""
        _flip_a_byte(next(p for p in sorted((self.set_dir / "blobs").iterdir()) if p.is_file()))

    def not_a_values_file(self) -> Path:
        path = self.tmp / "values.yaml"
        path.write_text("other: 1\n")
        return path

    def tampered_set(self) -> Path:
        """A copy of set 1 with one byte of a blob changed."""
        copy = self.tmp / "usb" / "tampered"
        shutil.copytree(self.set_dir, copy)
        _flip_a_byte(next(p for p in sorted((copy / "blobs").iterdir()) if p.is_file()))
        return copy

    def damage_store(self) -> None:
        self.blob.chmod(0o644)
        _flip_a_byte(self.blob)

    def lose_index(self) -> None:
        """The store bound to an index whose file is gone."""
        self.with_store()
        (self.tmp / "store" / "mirror.db").unlink()

    def empty_dir(self) -> Path:
        path = self.tmp / "not-a-set"
        path.mkdir(exist_ok=True)
        return path

    def small_disk(self) -> Path:
        return self.disks(2 * MiB)

    def broken_credential_process(self) -> dict[str, str]:
        aws_config = self.tmp / "aws-config"
        aws_config.write_text("[profile broken]\ncredential_process = /bin/false\n")
        return {"AWS_CONFIG_FILE": str(aws_config), "AWS_PROFILE": "broken"}


def _flip_a_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


Args = tuple[str, ...] | Callable[[World], list[str]]
NO_API_KEY = {"MIRROR_API_KEY": ""}
Env = Mapping[str, str] | Callable[[World], Mapping[str, str]]


@dataclass(frozen=True)
class Case:
    """One way a command goes wrong: its kind (CODES), arguments, and what the line says."""

    kind: str
    args: Args
    says: str
    config: Callable[[World], Path | None] = lambda world: world.config
    env: Env = field(default_factory=dict)
    s3_credentials: bool = True
    prepare: Callable[[World], None] = lambda world: None


# The shapes several commands' cases share. `args` is the command line, or a function of
# the world that makes it (`at`).


def missing_config(*args: str, says: str = "does not exist") -> Case:
    return Case("missing config", args, says, config=lambda world: world.tmp / "absent.toml")


def wrong_s3_secret(*args: str, at: Callable[[World], list[str]] | None = None) -> Case:
    env = {"AWS_SECRET_ACCESS_KEY": "wrong-for-codes"}
    return Case("refused", at or args, "S3 refused", env=env)


def no_bucket(*args: str, at: Callable[[World], list[str]] | None = None) -> Case:
    return Case(
        "not found",
        at or args,
        "does not exist",
        config=lambda world: world.config_with("target", bucket="no-such-bucket-for-codes"),
    )


def refused_api_key(*args: str) -> Case:
    return Case("refused", args, "", env={"MIRROR_API_KEY": "mint_not_the_simulators_key"})


def setting(args: Args, says: str, section: str, env: Env | None = None, **changes: Any) -> Case:
    """A setting the command cannot use: `section` changed in the config file (a None value
    removes the key; a function of the world makes the value)."""

    def config(world: World) -> Path:
        values = {k: v(world) if callable(v) else v for k, v in changes.items()}
        return world.config_with(section, **values)

    return Case("setting", args, says, config=config, env=env or {})


def unset_signing_key(*args: str, at: Callable[[World], list[str]] | None = None) -> Case:
    return setting(at or args, "transfer.signing_key is not set", "transfer", signing_key=None)


def unset_bucket(*args: str, at: Callable[[World], list[str]] | None = None) -> Case:
    return setting(at or args, "target.bucket is not set", "target", bucket=None)


def no_trusted_keys(at: Callable[[World], list[str]]) -> Case:
    return setting(at, "no trusted public keys", "target", transfer_keys=[])


def store_on_a_file(*args: str) -> Case:
    return setting(args, "is not a directory", "store", path=lambda w: str(w.config))


def unreadable_api_key(*args: str) -> Case:
    key_file = {"key_file": lambda w: str(w.tmp / "absent-key")}
    says = "cannot read the admin API key file"
    return setting(args, says, "api", env=NO_API_KEY, **key_file)


def no_exports(*args: str, says: str) -> Case:
    return setting(args, says, "exports", value=[])


def absent(*command: str, name: str = "absent", after: tuple[str, ...] = ()) -> Case:
    """A missing input: `name` under the test's directory, given after `command`."""
    return Case("missing input", lambda w: [*command, str(w.tmp / name), *after], name)


def not_a_set(*command: str, after: tuple[str, ...] = ()) -> Case:
    """An empty directory given as a transfer set."""
    return Case(
        "missing input", lambda w: [*command, str(w.empty_dir()), *after], "is not a transfer set"
    )


def no_store(*args: str) -> Case:
    return Case("not found", args, "no store yet")


def lost_index(*args: str) -> Case:
    return Case("not found", args, "is missing", prepare=World.lose_index)


def import_set_1(world: World) -> list[str]:
    return ["transfer", "import", str(world.set_dir)]


CASES: dict[str, list[Case]] = {
    "config check": [
        missing_config("config", "check"),
        Case("bad argument", ("config", "check", "--for", "nothing"), "--for"),
        unreadable_api_key("config", "check", "--for", "daemon"),
        setting(
            ("config", "check"),
            "public key file",
            "target",
            transfer_keys=lambda w: [str(w.tmp / "absent.pub")],
        ),
        Case(
            "refused",
            ("config", "check", "--for", "chart"),
            "could not be obtained",
            env=World.broken_credential_process,
            s3_credentials=False,
        ),
    ],
    "db upgrade": [
        missing_config("db", "upgrade"),
        store_on_a_file("db", "upgrade"),
        lost_index("db", "upgrade"),
    ],
    "agent-job get": [
        missing_config("agent-job", "get", "job_1"),
        Case(
            "setting",
            ("agent-job", "get", "job_1"),
            "no admin API key configured",
            env=NO_API_KEY,
        ),
        Case("not found", ("agent-job", "get", "job_absent"), "job_absent"),
        refused_api_key("agent-job", "get", "job_1"),
    ],
    "agent-job watch": [
        missing_config("agent-job", "watch", "job_1"),
        Case("bad argument", ("agent-job", "watch", "job_1", "--interval", "soon"), "--interval"),
        Case("not found", ("agent-job", "watch", "job_absent"), "job_absent"),
        Case(
            "failed",
            lambda w: ["agent-job", "watch", w.sim.add_agent_job("failed", seconds=0)],
            "failed",
        ),
        Case(
            "temporary",
            lambda w: [
                *("agent-job", "watch", w.sim.add_agent_job("pr", seconds=3600)),
                *("--interval", "0.1s", "--timeout", "0.5s"),
            ],
            "",
        ),
    ],
    "export run": [
        missing_config("export", "run", DOCS),
        Case("bad argument", ("export", "run", "not a domain"), "must be a hostname"),
        Case("setting", ("export", "run", "docs.other.test"), "--adhoc"),
        Case("setting", ("export", "run", DOCS), "no admin API key configured", env=NO_API_KEY),
        refused_api_key("export", "run", DOCS),
        Case(
            "failed",
            ("export", "run", "--adhoc", "docs.fail.test"),
            "failed",
            prepare=lambda w: w.sim.faults.fail_domains.add("docs.fail.test"),
        ),
        Case(
            "verify",
            ("export", "run", "--adhoc", "docs.cut.test"),
            "",
            prepare=lambda w: w.sim.faults.damaged_domains.update({"docs.cut.test": "truncated"}),
        ),
    ],
    "export start": [
        missing_config("export", "start", DOCS),
        Case("bad argument", ("export", "start", "not a domain"), "must be a hostname"),
        refused_api_key("export", "start", DOCS),
    ],
    "export status": [
        missing_config("export", "status", "job_1"),
        Case("bad argument", ("export", "status"), "JOB_ID"),
        Case("not found", ("export", "status", "job_absent"), "job_absent"),
        refused_api_key("export", "status", "job_1"),
    ],
    "export bundle": [
        missing_config("export", "bundle", "job_1"),
        Case("bad argument", ("export", "bundle"), "JOB_ID"),
        Case("not found", ("export", "bundle", "job_absent"), "job_absent"),
        refused_api_key("export", "bundle", "job_1"),
    ],
    "store list": [
        missing_config("store", "list"),
        Case("bad argument", ("store", "list", "--domain", "not a domain"), "must be a hostname"),
        no_store("store", "list"),
    ],
    "store accept": [
        missing_config("store", "accept", DOCS, "refused-2026-11-20", "--reason", "fine"),
        Case("bad argument", ("store", "accept", DOCS, "refused-2026-11-20"), "--reason"),
        Case(
            "not found",
            ("store", "accept", DOCS, "refused-2026-11-20", "--reason", "fine"),
            "no refused bundle",
        ),
    ],
    "store verify": [
        missing_config("store", "verify"),
        store_on_a_file("store", "verify"),
        no_store("store", "verify"),
        Case("verify", ("store", "verify"), "problem", prepare=World.damage_store),
    ],
    "store gc": [
        missing_config("store", "gc"),
        Case("bad argument", ("store", "gc", "--keep", "0"), "--keep"),
        lost_index("store", "gc"),
    ],
    "status": [
        missing_config("status"),
        Case("bad argument", ("status", "--domain", DOCS), "--domain"),
        no_store("status"),
    ],
    "sites": [
        missing_config("sites"),
        Case("bad argument", ("sites", "--site", "a"), "--site"),
        no_store("sites"),
    ],
    "transfer lost": [
        missing_config("transfer", "lost", "1"),
        Case("bad argument", ("transfer", "lost", "first"), "SET"),
        Case("not found", ("transfer", "lost", "99"), "99", prepare=World.with_store),
    ],
    "transfer resend": [
        missing_config("transfer", "resend", "1", "out"),
        Case("bad argument", ("transfer", "resend", "1"), "OUT"),
        Case(
            "not found",
            lambda w: ["transfer", "resend", "99", str(w.tmp / "again")],
            "99",
            prepare=World.with_store,
        ),
        Case(
            "no space",
            lambda w: ["transfer", "resend", "1", str(w.small_disk() / "again")],
            "not enough free space",
            prepare=World.with_set,
        ),
        Case(
            "verify",
            lambda w: ["transfer", "resend", "1", str(w.tmp / "again")],
            "",
            prepare=World.damage_set,
        ),
    ],
    "keys generate": [
        Case("bad argument", ("keys", "generate"), "--out"),
        Case(
            "bad argument",
            lambda w: ["keys", "generate", "--out", str(w.keys / "transfer")],
            "already exists",
        ),
    ],
    "keys show": [
        absent("keys", "show", name="absent.pub"),
        Case("bad argument", lambda w: ["keys", "show", str(w.config)], "holds neither"),
    ],
    "transfer pack": [
        missing_config("transfer", "pack", "out"),
        Case("bad argument", ("transfer", "pack", "out", "--max-size", "huge"), "--max-size"),
        unset_signing_key(at=lambda w: ["transfer", "pack", str(w.tmp / "out")]),
        Case(
            "not found",
            lambda w: ["transfer", "pack", "--from-set", "99", str(w.tmp / "out")],
            "no transfer set 99",
            prepare=World.with_store,
        ),
        Case(
            "no space",
            lambda w: ["transfer", "pack", str(w.small_disk() / "set")],
            "not enough free space",
            prepare=World.with_store,
        ),
        Case(
            "verify",
            lambda w: ["transfer", "pack", str(w.tmp / "out")],
            "",
            prepare=World.damage_store,
        ),
    ],
    "transfer verify": [
        missing_config("transfer", "verify", "set"),
        absent("transfer", "verify"),
        not_a_set("transfer", "verify"),
        no_trusted_keys(lambda w: ["transfer", "verify", str(w.set_dir)]),
        Case(
            "setting",
            lambda w: ["transfer", "verify", str(w.set_dir), "--trusted-key", "absent.pub"],
            "absent.pub",
        ),
        Case("verify", lambda w: ["transfer", "verify", str(w.tampered_set())], ""),
    ],
    "transfer import": [
        missing_config("transfer", "import", "set"),
        absent("transfer", "import"),
        not_a_set("transfer", "import"),
        unset_bucket(at=import_set_1),
        Case(
            "setting",
            import_set_1,
            "AWS_SHARED_CREDENTIALS_FILE",
            env=lambda w: {"AWS_SHARED_CREDENTIALS_FILE": str(w.tmp / "absent-credentials")},
            s3_credentials=False,
        ),
        no_bucket(at=import_set_1),
        wrong_s3_secret(at=import_set_1),
        Case("verify", lambda w: ["transfer", "import", str(w.tampered_set())], ""),
    ],
    "transfer ack": [
        missing_config("transfer", "ack", "receipt.json"),
        absent("transfer", "ack", name="absent.json"),
        Case(
            "verify",
            lambda w: ["transfer", "ack", str(w.config)],
            "",
            prepare=World.with_store,
        ),
    ],
    "transfer send": [
        absent("transfer", "send", after=("--to", "127.0.0.1:9")),
        not_a_set("transfer", "send", after=("--to", "127.0.0.1:9")),
        Case(
            "bad argument",
            lambda w: ["transfer", "send", str(w.empty_dir()), "--to", "nowhere"],
            "--to",
        ),
    ],
    "transfer receive": [
        missing_config("transfer", "receive", "spool", "--listen", "127.0.0.1:0", "--once"),
        Case("bad argument", ("transfer", "receive", "spool", "--listen", "nowhere"), "--listen"),
        no_trusted_keys(
            lambda w: ["transfer", "receive", str(w.tmp / "spool"), "--listen", "127.0.0.1:0"]
        ),
    ],
    "transfer push": [
        missing_config("transfer", "push"),
        unset_signing_key("transfer", "push"),
        no_bucket("transfer", "push"),
        wrong_s3_secret("transfer", "push"),
    ],
    "target check": [
        missing_config("target", "check"),
        unset_bucket("target", "check"),
    ],
    "chart values": [
        missing_config("chart", "values", DOCS),
        Case("bad argument", ("chart", "values", "not a domain"), "must be a hostname"),
        Case("not found", ("chart", "values", DOCS), DOCS),
        no_bucket("chart", "values", DOCS),
        wrong_s3_secret("chart", "values", DOCS),
    ],
    "chart promote": [
        missing_config("chart", "promote", DOCS, "2026-11-20"),
        Case("bad argument", ("chart", "promote", DOCS), "VERSION"),
        Case("not found", ("chart", "promote", DOCS, "2026-11-20"), "has no versions"),
        wrong_s3_secret("chart", "promote", DOCS, "2026-11-20"),
    ],
    "chart rollback": [
        missing_config("chart", "rollback", DOCS),
        Case("bad argument", ("chart", "rollback", "not a domain"), "must be a hostname"),
        Case("failed", ("chart", "rollback", DOCS), "nothing to roll back to"),
    ],
    "chart history": [
        missing_config("chart", "history", DOCS),
        Case("bad argument", ("chart", "history"), "DOMAIN"),
        no_bucket("chart", "history", DOCS),
    ],
    "chart check": [
        missing_config("chart", "check", "values.yaml"),
        absent("chart", "check", name="absent.yaml"),
        Case(
            "bad argument",
            lambda w: ["chart", "check", str(w.not_a_values_file())],
            "has no staticExport.bundleUrl",
        ),
    ],
    "evidence": [
        missing_config("evidence", DOCS, "2026-11-20", "--out", "evidence"),
        Case("bad argument", ("evidence", DOCS, "2026-11-20"), "--out"),
        Case(
            "setting",
            lambda w: ["evidence", DOCS, "2026-11-20", "--out", str(w.tmp / "evidence")],
            "no target.receipt_keys",
            config=lambda w: w.config_with("target", receipt_keys=None),
        ),
        Case(
            "not found",
            lambda w: ["evidence", DOCS, "2026-11-20", "--out", str(w.tmp / "evidence")],
            "no version 2026-11-20",
        ),
        no_bucket("evidence", DOCS, "2026-11-20", "--out", "evidence"),
        wrong_s3_secret("evidence", DOCS, "2026-11-20", "--out", "evidence"),
    ],
    "serve": [
        missing_config("serve"),
        setting(("serve",), "serve.cache_dir", "serve", cache_dir=lambda w: str(w.config)),
        setting(("serve",), "serve.listen", "serve", listen="127.0.0.1:99999"),
        wrong_s3_secret("serve"),
    ],
    "chart refresh": [
        missing_config("chart", "refresh"),
        setting(("chart", "refresh"), "chart.values_path is not set", "chart", values_path=None),
        no_exports("chart", "refresh", says="no domain to refresh"),
        Case("not found", ("chart", "refresh"), DOCS),
        wrong_s3_secret("chart", "refresh"),
    ],
    "chart gc": [
        missing_config("chart", "gc", "--keep", "1"),
        Case("bad argument", ("chart", "gc", "--keep", "0"), "--keep"),
        wrong_s3_secret("chart", "gc", "--keep", "1"),
    ],
    "daemon": [
        missing_config("daemon"),
        no_exports("daemon", says="no domains to export"),
        unreadable_api_key("daemon"),
    ],
    "bundle-self": [
        missing_config("bundle-self", "dist"),
        Case(
            "setting",
            lambda w: ["bundle-self", "--signing-key", str(w.tmp / "absent.key"), "dist"],
            "absent.key",
        ),
    ],
    "sim serve": [
        Case("bad argument", ("sim", "serve", "--port", "eighty"), "--port"),
        Case(
            "bad argument", lambda w: ["sim", "serve", "--port", str(w.sim.port)], "cannot listen"
        ),
    ],
    "demo": [Case("bad argument", lambda w: ["demo", "--dir", str(w.config)], "--dir")],
}


@functools.cache
def listed_codes(command: str) -> set[int]:
    """The exit codes `mirror COMMAND --help` lists ("Exit codes: ..." and "Any command
    also: ...")."""
    done = CliRunner().invoke(root, [*command.split(), "--help"], terminal_width=400)
    assert done.exit_code == 0, done.output
    text = " ".join(done.output.split())
    said = text[text.index("Exit codes:") : text.index("Global options")]
    return {int(code) for code in re.findall(r"\b(\d+) [a-z]", said)}


@pytest.fixture
def world(
    tmp_path: Path,
    sim: Simulator,
    target_settings: TargetSettings,
    small_filesystem: Callable[[int], Path],
) -> Iterator[World]:
    yield World(tmp_path, sim, target_settings, small_filesystem)


def run_case(world: World, case: Case) -> subprocess.CompletedProcess[str]:
    case.prepare(world)
    args = list(case.args) if isinstance(case.args, tuple) else case.args(world)
    config = case.config(world)
    env = case.env(world) if callable(case.env) else case.env
    return mirror_cli(
        *(["--config", str(config)] if config is not None else []),
        *args,
        env={**world.env, **env},
        s3_credentials=case.s3_credentials,
        timeout=90,
        cwd=world.tmp,
    )


@pytest.mark.s3
@pytest.mark.parametrize("command", sorted(CASES))
def test_each_error_path_ends_in_one_line_and_a_code_the_help_lists(
    command: str, world: World
) -> None:
    for case in CASES[command]:
        done = run_case(world, case)
        code = CODES[case.kind]
        lines = error_lines(done.stderr)  # a service off a terminal: a JSON error record
        where = f"{command} ({case.kind}): {done.stderr}"
        assert done.returncode == code, where
        assert lines and lines[-1].startswith("mirror: error: "), where
        assert case.says in lines[-1], where
        assert "Traceback" not in done.stderr, where
        assert code in listed_codes(command), f"{command} --help does not list {code}"


def test_every_command_has_its_error_paths_walked() -> None:
    assert set(CASES) == set(CONTRACTS)
    for command, cases in CASES.items():
        kinds = {case.kind for case in cases}
        if command not in NO_SETTINGS:
            assert "missing config" in kinds, command
        assert kinds & {"bad argument", "setting", "missing input"}, command


def test_help_lists_only_codes_of_the_contract() -> None:
    """The help is rendered from the contract: what it lists, the contract promises."""
    for command, contract in CONTRACTS.items():
        assert listed_codes(command) >= set(contract.exits), command
