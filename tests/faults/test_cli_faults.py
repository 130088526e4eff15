"""Issue 8 class 4: what used to end in a traceback ends in one `mirror: error:` line,
the JSON error document under --json, and the documented exit code."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mirror.transferset.format import MANIFEST, SIGNATURE
from mirror.transferset.keys import generate_keypair, load_signing_key
from tests.fixtures.cli import mirror_cli, write_config


def one_error_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mirror: error: "), stderr
    return lines[0]


@pytest.mark.fault("8.4 config file holds non-UTF-8 bytes", "one line, exit 2")
def test_config_file_that_is_not_utf8(tmp_path: Path, fault_got: list[str]) -> None:
    config = tmp_path / "config.toml"
    config.write_bytes(b'[store]\npath = "/tmp/\xff\xfe"\n')
    result = mirror_cli("config", "check", "--config", str(config), "--json")
    line = one_error_line(result.stderr)
    fault_got.append(f"exit {result.returncode}: {line}")
    assert result.returncode == 2
    assert (
        line
        == f"mirror: error: config file {config} is not UTF-8 text (byte 21); TOML files are UTF-8"
    )
    assert json.loads(result.stdout)["exit_code"] == 2


@pytest.mark.fault("8.4 api.key_file holds non-UTF-8 bytes", "one line, exit 2, no key bytes")
def test_key_file_that_is_not_utf8(tmp_path: Path, fault_got: list[str]) -> None:
    key_file = tmp_path / "admin-api-key"
    key_file.write_bytes(b"mint_\xffsecret\n")
    config = write_config(
        tmp_path / "c.toml",
        {
            "api": {"base_url": "http://127.0.0.1:9", "key_file": str(key_file)},
            "store": {"path": str(tmp_path / "store")},
        },
    )
    result = mirror_cli("export", "status", "se_0123456789abcdef", "--config", str(config))
    line = one_error_line(result.stderr)
    fault_got.append(f"exit {result.returncode}: {line}")
    assert result.returncode == 2
    assert "is not UTF-8 text" in line and "secret" not in line


@pytest.mark.fault(
    "8.4 signed transfer manifest nested 200000 deep", "one line, exit 5 (not RecursionError)"
)
def test_deeply_nested_signed_manifest(tmp_path: Path, fault_got: list[str]) -> None:
    made = generate_keypair(tmp_path / "transfer")
    set_dir = tmp_path / "set"
    set_dir.mkdir()
    manifest = b"[" * 200_000 + b"]" * 200_000
    (set_dir / MANIFEST).write_bytes(manifest)
    signing = load_signing_key(made.private_path)
    (set_dir / SIGNATURE).write_bytes(signing.signature_document(manifest))
    result = mirror_cli(
        "transfer", "verify", str(set_dir), "--key", str(made.public_path), "--defaults"
    )
    line = one_error_line(result.stderr)
    fault_got.append(f"exit {result.returncode}: {line}")
    assert result.returncode == 5
    assert line == "mirror: error: manifest.json: nested too deeply to be a mirror document"
