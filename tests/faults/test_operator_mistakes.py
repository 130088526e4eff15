"""Issue 18 classes 3 and 4: an operator's mistakes and a full or damaged medium end in one
line with the documented exit code, never "unexpected" (exit 1).

Real command lines in subprocesses, a real S3 server, a real store, real tmpfs file systems
for the full medium."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from mirror.config import TargetSettings, settings_from_dict
from mirror.errors import TemporaryFailure
from mirror.outbound.pack import pack
from mirror.store.app import App
from mirror.store.models import Transfer
from mirror.transferset.format import MANIFEST, parse_manifest
from mirror.units import format_size
from tests.fixtures.cli import mirror_cli, write_config
from tests.fixtures.s3 import transfer_config
from tests.fixtures.versions import add_sim_version, add_version

DOCS = "docs.example.com"
MiB = 1024 * 1024


def one_error_line(stderr: str) -> str:
    lines = [line for line in stderr.strip().splitlines() if line.startswith("mirror: error:")]
    assert len(lines) == 1, stderr
    return lines[0]


# ---- class 3: errors that escaped as "unexpected" -----------------------------------------------

DOMAIN_COMMANDS: list[list[str]] = [
    ["chart", "values", "{d}"],
    ["chart", "promote", "{d}", "2026-11-20"],
    ["chart", "rollback", "{d}"],
    ["chart", "history", "{d}"],
    ["chart", "refresh", "--domain", "{d}"],
    ["chart", "gc", "--keep", "1", "--domain", "{d}"],
    ["export", "run", "{d}", "--adhoc"],
    ["export", "start", "{d}"],
    ["store", "list", "--domain", "{d}"],
    ["transfer", "pack", "--dry-run", "--domain", "{d}"],
    ["transfer", "push", "--domain", "{d}"],
]


@pytest.mark.fault(
    "18.3 domain argument `../x` to every command that takes one", "exit 2, one line, each"
)
def test_a_domain_that_is_not_a_hostname_is_a_usage_error_for_every_command(
    tmp_path: Path, fault_got: list[str]
) -> None:
    config = write_config(
        tmp_path / "c.toml",
        {
            "store": {"path": str(tmp_path / "store")},
            "target": {"endpoint_url": "http://127.0.0.1:9", "bucket": "b"},
        },
    )
    wrong: list[str] = []
    tried = [(command, "../x") for command in DOMAIN_COMMANDS]
    tried += [(DOMAIN_COMMANDS[0], domain) for domain in ("docs/../../etc", "two words", "")]
    for command, domain in tried:
        argv = [part.replace("{d}", domain) for part in command]
        result = mirror_cli("--config", str(config), *argv)
        line = one_error_line(result.stderr)
        if result.returncode != 2 or "must be a hostname like docs.example.com" not in line:
            wrong.append(f"{' '.join(argv)}: exit {result.returncode}: {line}")
    fault_got.append(f"{len(wrong)} of {len(tried)} wrong")
    assert wrong == []
    assert not (tmp_path / "store").exists()  # refused before anything was made


@pytest.mark.parametrize(
    "key",
    [
        pytest.param(
            key,
            id=key,
            marks=pytest.mark.fault(
                f"18.3 target.{key} without a scheme (`minio:9000`)", "exit 2 at load"
            ),
        )
        for key in ("endpoint_url", "presign_endpoint_url", "public_base_url")
    ],
)
def test_a_target_url_without_a_scheme_is_refused_when_the_settings_are_loaded(
    key: str, tmp_path: Path, fault_got: list[str]
) -> None:
    target = {"endpoint_url": "http://127.0.0.1:9", "bucket": "b", key: "minio:9000"}
    config = write_config(tmp_path / "c.toml", {"target": target})
    result = mirror_cli("--config", str(config), "chart", "history", DOCS)
    line = one_error_line(result.stderr)
    fault_got.append(f"exit {result.returncode}")
    assert result.returncode == 2
    assert f"target.{key}: must be an http(s) URL" in line and "'minio:9000'" in line


def _credential_source(tmp_path: Path, case: str) -> dict[str, str]:
    """The environment of an operator whose S3 credential source is set up wrong (run without
    the test's own S3 credentials)."""
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    env = {"HOME": str(home)}
    if case == "profile":
        env["AWS_PROFILE"] = "no-such-profile"
    elif case == "partial":
        credentials = home / "credentials"
        credentials.write_text("[default]\naws_access_key_id = AKIAEXAMPLE\n")
        env["AWS_SHARED_CREDENTIALS_FILE"] = str(credentials)
    else:
        config = home / "config"
        config.write_text("[profile broken]\ncredential_process = /bin/false\n")
        env.update(AWS_CONFIG_FILE=str(config), AWS_PROFILE="broken")
    return env


def _source_case(case: str, code: int, said: str, what: str) -> Any:
    fault = pytest.mark.fault(f"18.3 S3 credentials: {what}", f"exit {code}, one line naming it")
    return pytest.param(case, code, said, id=what, marks=fault)


@pytest.mark.parametrize(
    ("case", "code", "said"),
    [
        _source_case(
            "profile",
            2,
            "the AWS profile 'no-such-profile' (from $AWS_PROFILE",
            "$AWS_PROFILE names no profile",
        ),
        _source_case(
            "partial",
            2,
            "incomplete S3 credentials in shared-credentials-file",
            "half a key pair in the credentials file",
        ),
        _source_case(
            "process",
            4,
            "could not be obtained from custom-process",
            "credential_process fails",
        ),
    ],
)
def test_a_credential_source_set_up_wrong_is_one_line_naming_it(
    case: str, code: int, said: str, tmp_path: Path, fault_got: list[str]
) -> None:
    config = write_config(
        tmp_path / "c.toml", {"target": {"endpoint_url": "http://127.0.0.1:9", "bucket": "b"}}
    )
    env = _credential_source(tmp_path, case)
    for argv in (["chart", "history", DOCS], ["chart", "gc", "--keep", "1"]):
        result = mirror_cli("--config", str(config), *argv, env=env, s3_credentials=False)
        line = one_error_line(result.stderr)
        fault_got.append(f"{argv[0]} {argv[1]}: exit {result.returncode}")
        assert result.returncode == code, line
        assert said in line and "unexpected" not in line
        assert "AKIAEXAMPLE" not in result.stderr


# ---- class 4: wrong exit codes or names --------------------------------------------------------


@pytest.mark.fault(
    "18.4 the medium fills up half-way through transfer pack (real 8 MiB tmpfs)",
    "exit 75 naming where, free and needed; nothing left or recorded",
)
def test_a_medium_that_fills_up_half_way_is_exit_75_naming_where_free_and_needed(
    transfer_app: App,
    small_filesystem: Callable[[int], Path],
    fault_got: list[str],
) -> None:
    """The free-space check passed (the space was there), then another writer took it while
    the set was being written: the kernel's ENOSPC from a real file system."""
    medium = small_filesystem(8 * MiB)
    add_version(transfer_app, DOCS, "2026-11-20", payload_size=5 * MiB)
    filled: list[bool] = []

    def another_writer_fills_the_medium(_count: int) -> None:
        if not filled:
            filled.append(True)
            with open(medium / "someone-else", "wb") as other:
                while True:
                    try:
                        other.write(b"\0" * 65536)
                        other.flush()
                    except OSError:
                        return

    with pytest.raises(TemporaryFailure) as refused:
        pack(
            transfer_app,
            medium / "set-0001",
            max_size=MiB,
            free_space=lambda _path: 1 << 40,
            on_progress=another_writer_fills_the_medium,
        )
    error = refused.value
    fault_got.append(f"exit {error.exit_code}: {error}"[:100])
    assert error.exit_code == 75
    assert f"the disk holding {medium} filled up while the set was written" in error.message
    assert " is free" in error.message and "the set needs" in error.message
    assert sorted(p.name for p in medium.iterdir()) == ["someone-else"]
    with transfer_app.db.session() as session:
        assert session.execute(select(Transfer)).first() is None


@pytest.mark.fault(
    "18.4 transfer pack onto a medium too small for the set (real 2 MiB tmpfs)",
    "exit 75 naming where, free and needed",
)
def test_a_medium_too_small_is_exit_75_from_the_command_line(
    tmp_path: Path,
    key_pair: tuple[Path, Path],
    small_filesystem: Callable[[int], Path],
    fault_got: list[str],
) -> None:
    medium = small_filesystem(2 * MiB)
    document = transfer_config(tmp_path / "store", key_pair)
    (tmp_path / "store").mkdir()
    app = App(settings_from_dict(document))
    try:
        add_version(app, DOCS, "2026-11-20", payload_size=3 * MiB)
    finally:
        app.close()
    config = write_config(tmp_path / "c.toml", document)
    result = mirror_cli("--config", str(config), "transfer", "pack", str(medium / "set-0001"))
    line = one_error_line(result.stderr)
    fault_got.append(f"exit {result.returncode}")
    assert result.returncode == 75, line
    assert f"not enough free space in {medium}" in line
    assert f"{format_size(2 * MiB)} is free" in line and "the set needs" in line
    assert list(medium.iterdir()) == []


@pytest.mark.s3
@pytest.mark.fault(
    "18.4 a delta part damaged on the medium",
    "exit 5 naming the part whose sha256 fails, not an unreadable tar.gz",
)
def test_a_damaged_delta_part_is_named_by_its_hash(
    tmp_path: Path,
    key_pair: tuple[Path, Path],
    target_settings: TargetSettings,
    fault_got: list[str],
) -> None:
    store_dir = tmp_path / "store"
    store_dir.mkdir()
    document = transfer_config(store_dir, key_pair)
    connected = write_config(tmp_path / "connected.toml", document)
    airgap = write_config(
        tmp_path / "airgap.toml", transfer_config(tmp_path / "x", key_pair, target=target_settings)
    )
    site: dict[str, Any] = {"pages": 60, "page_size": 8192}
    for label, number in (("2026-11-20", 0), ("2026-11-21", 1)):
        app = App(settings_from_dict(document))
        try:
            add_sim_version(app, DOCS, label, export_number=number, **site)
        finally:
            app.close()
        set_dir = tmp_path / f"set-{number}"
        packed = mirror_cli("--config", str(connected), "transfer", "pack", str(set_dir))
        assert packed.returncode == 0, packed.stderr
        if number == 0:
            first = mirror_cli("--config", str(airgap), "transfer", "import", str(set_dir))
            assert first.returncode == 0, first.stderr
    (item,) = parse_manifest((set_dir / MANIFEST).read_bytes()).items
    assert item.delta is not None
    part = set_dir / item.parts[0].name
    data = bytearray(part.read_bytes())
    for offset in range(64, len(data), max(1, len(data) // 8)):
        data[offset] ^= 0xFF  # the medium damaged it: the gzip stream no longer decodes
    os.chmod(part, 0o644)
    part.write_bytes(bytes(data))

    result = mirror_cli("--config", str(airgap), "--json", "transfer", "import", str(set_dir))
    line = one_error_line(result.stderr)
    fault_got.append(f"exit {result.returncode}: {line[15:95]}")
    assert result.returncode == 5
    assert f"{item.parts[0].name} hashes to" in line
    assert "tar.gz" not in line.replace(item.parts[0].name, "")
    assert json.loads(result.stdout)["exit_code"] == 5


@pytest.mark.s3
@pytest.mark.fault(
    "18.4 chart history of a domain that is not in the bucket", "exit 3 like chart values"
)
def test_chart_history_of_an_unknown_domain_is_not_found(
    tmp_path: Path,
    key_pair: tuple[Path, Path],
    target_settings: TargetSettings,
    fault_got: list[str],
) -> None:
    config = write_config(
        tmp_path / "c.toml", transfer_config(tmp_path / "x", key_pair, target=target_settings)
    )
    codes = {}
    for command in ("values", "history"):
        result = mirror_cli("--config", str(config), "chart", command, "nowhere.example.com")
        line = one_error_line(result.stderr)
        codes[command] = result.returncode
        assert "nowhere.example.com has no versions in the bucket" in line
    fault_got.append(f"values exit {codes['values']}, history exit {codes['history']}")
    assert codes == {"values": 3, "history": 3}
