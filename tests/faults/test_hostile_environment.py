"""A hostile environment around an operator's command (the hostile-operator trial of issues
21 and 22): files an operator or a medium left in the working directory, an index gone.

Each case runs the real part (real processes, real archives); the contract: what
the command does with the bytes never depends on what lies where it runs.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.fixtures.cli import cli_env, mirror_argv, mirror_cli, write_config
from tests.fixtures.versions import add_version, open_app

SITE_BYTES = b"".join(b"<p>page %d of the guide</p>\n" % n * 40 for n in range(2000))


@pytest.mark.fault(
    "the SQLite index deleted or moved from a store that holds blobs",
    "exit 3 naming the missing index and the restore; no new index made; restore works",
)
def test_a_lost_index_is_named_as_lost_and_no_empty_one_replaces_it(
    tmp_path: Path, fault_got: list[str]
) -> None:
    """`no store yet ... run mirror export run` was printed for a store full of blobs whose
    index was gone; run as printed it made a new, empty index that the store then refused
    as another index's ("give each index its own store.path")."""
    store = tmp_path / "store"
    with open_app(store) as app:
        add_version(app, "docs.example.com", "2026-11-20")
    config = write_config(tmp_path / "c.toml", {"store": {"path": str(store)}})
    assert mirror_cli("--config", str(config), "store", "verify").returncode == 0
    index = store / "mirror.db"
    index.rename(tmp_path / "mirror.db.moved")
    for command in (("store", "verify"), ("store", "list"), ("db", "upgrade")):
        result = mirror_cli("--config", str(config), *command)
        assert result.returncode == 3, (command, result.stderr)
        [line] = result.stderr.strip().splitlines()
        assert line.startswith(f"mirror: error: the index {index} is missing"), line
        assert "restore mirror.db from a backup" in line and "export run" not in line
        assert not index.exists()
    fault_got.append(f"exit 3: {line.split(' is missing', 1)[0][-20:]} is missing")
    (tmp_path / "mirror.db.moved").rename(index)  # the remedy: the index restored
    verified = mirror_cli("--config", str(config), "store", "verify")
    assert verified.returncode == 0, verified.stderr


def _make_odd(blobs: Path, names: list[str]) -> dict[str, str]:
    """Blob names made into what no download leaves: a FIFO (opening it waits for a writer),
    a link to /dev/zero (reading it never ends), a link to nothing, an empty directory."""
    made = {}
    for name, kind in zip(names, ("fifo", "zero", "dangling", "directory"), strict=True):
        path = blobs / name[:2] / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.exists():
            path.unlink()
        if kind == "fifo":
            os.mkfifo(path)
        elif kind == "directory":
            path.mkdir()
        else:
            path.symlink_to("/dev/zero" if kind == "zero" else blobs / "nothing")
        made[name] = kind
    return made


@pytest.mark.fault(
    "indexed blobs replaced by a FIFO, a link to /dev/zero, a link to nothing, a directory",
    "verify names each (exit 5) and ends",
)
def test_what_is_not_a_regular_file_under_blobs_is_named_and_never_waited_on(
    tmp_path: Path, fault_got: list[str]
) -> None:
    """`store verify` hashes every name under blobs/ in the background: it printed its
    findings, then waited forever at exit for the thread reading /dev/zero or waiting for
    the FIFO's writer; a link to nothing was an `unexpected FileNotFoundError` (exit 1)."""
    store = tmp_path / "store"
    with open_app(store) as app:
        indexed = [add_version(app, "docs.example.com", f"2026-11-2{n}")[1] for n in range(4)]
    config = write_config(tmp_path / "c.toml", {"store": {"path": str(store)}})
    odd = _make_odd(store / "blobs" / "sha256", indexed)
    verified = mirror_cli("--config", str(config), "store", "verify", timeout=60)
    assert verified.returncode == 5, verified.stderr
    assert verified.stdout.splitlines() == [
        f"missing {sha}: indexed but not on disk"
        if odd[sha] == "dangling"
        else f"corrupt {sha}: not a regular file"
        for sha in sorted(odd)
    ]
    fault_got.append(f"exit {verified.returncode}, {len(odd)} named")


@pytest.mark.fault(
    "extra names under blobs: a FIFO, a link to /dev/zero, a link to nothing, a directory",
    "verify lists them as extra; --repair (the remedy) removes them; verify exit 0",
)
def test_verify_repair_removes_odd_extra_blobs_without_waiting_on_them(
    tmp_path: Path, fault_got: list[str]
) -> None:
    """`--repair` re-hashed extra blobs to adopt them: it waited for the FIFO's writer or
    read /dev/zero forever, and a directory was an `unexpected IsADirectoryError`; the same
    step runs when an export or the daemon starts."""
    store = tmp_path / "store"
    with open_app(store) as app:
        add_version(app, "docs.example.com", "2026-11-20")
    config = write_config(tmp_path / "c.toml", {"store": {"path": str(store)}})
    extras = sorted(_make_odd(store / "blobs" / "sha256", [f"{n:x}" * 64 for n in range(10, 14)]))
    found = mirror_cli("--json", "--config", str(config), "store", "verify", timeout=60)
    assert found.returncode == 5, found.stderr
    assert [p["sha256"] for p in json.loads(found.stdout)["problems"]] == extras
    repaired = mirror_cli(
        "--json", "--config", str(config), "store", "verify", "--repair", timeout=60
    )
    assert repaired.returncode == 0, repaired.stdout + repaired.stderr
    assert sorted(json.loads(repaired.stdout)["removed"]) == extras
    assert not [e for e in extras if os.path.lexists(store / "blobs" / "sha256" / e[:2] / e)]
    assert mirror_cli("--config", str(config), "store", "verify").returncode == 0
    fault_got.append(f"--repair removed {len(extras)}; verify exit 0")


WITHOUT_READ_OVERRIDE = [
    "setpriv",
    "--inh-caps=-dac_override,-dac_read_search",
    "--bounding-set=-dac_override,-dac_read_search",
    "--",
]


@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None,
    reason="needs root's capabilities to drop, and util-linux's setpriv",
)
@pytest.mark.fault(
    "an indexed blob the user may not read (mode 000)",
    "verify names it (exit 5), verifies the rest; --repair names the export as the remedy",
)
def test_a_blob_the_user_may_not_read_is_a_finding(tmp_path: Path, fault_got: list[str]) -> None:
    """It ended `store verify` as `unexpected PermissionError` (exit 1) before any finding.
    Run as an operator without root's right to read any file (its capabilities dropped)."""
    store = tmp_path / "store"
    with open_app(store) as app:
        shas = [add_version(app, "docs.example.com", f"2026-11-2{n}")[1] for n in range(3)]
    config = write_config(tmp_path / "c.toml", {"store": {"path": str(store)}})
    unreadable = sorted(shas)[1]
    blob = store / "blobs" / "sha256" / unreadable[:2] / unreadable
    blob.chmod(0)
    command = [*WITHOUT_READ_OVERRIDE, *mirror_argv("--config", str(config))]
    verified = subprocess.run(
        [*command, "store", "verify"], capture_output=True, text=True, env=cli_env(), timeout=60
    )
    assert verified.returncode == 5, verified.stderr
    assert verified.stdout.splitlines() == [
        f"corrupt {unreadable}: cannot be read: Permission denied"
    ]
    assert len(verified.stderr.strip().splitlines()) == 1 and "Traceback" not in verified.stderr
    repaired = subprocess.run(
        [*command, "store", "verify", "--repair"],
        capture_output=True,
        text=True,
        env=cli_env(),
        timeout=60,
    )
    assert repaired.returncode == 5, repaired.stderr
    assert f"not repaired {unreadable}: corrupt and no good copy is here" in repaired.stdout
    fault_got.append(f"exit {verified.returncode}, 1 named, 2 verified; --repair exit 5")
