"""Transfer progress for a person at a terminal: bytes of a known total, in MiB.

Real packs of real bundles; the import runs against a real S3 server (SeaweedFS); the command
line runs in a real pseudo-terminal (progress is drawn only for one)."""

from __future__ import annotations

import io
import re
from pathlib import Path
from typing import Any

from rich.console import Console

from mirror.airgap.importer import import_set
from mirror.cli.progress import ByteProgress
from mirror.outbound.pack import pack
from mirror.store.app import App
from mirror.transferset.reader import set_bytes
from tests.fixtures.cli import on_a_terminal, write_config
from tests.fixtures.s3 import transfer_config
from tests.fixtures.versions import add_version

MIB = 1024 * 1024
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def _console(buffer: io.StringIO) -> Console:
    return Console(file=buffer, force_terminal=True, color_system=None, width=150)


def _mib(size: int) -> str:
    return f"{size / MIB:.1f}/{size / MIB:.1f} MiB"


def _stored(app: App) -> int:
    add_version(app, "docs.example.com", "2026-11-20", payload_size=2 * MIB)
    add_version(app, "api.example.com", "2026-11-21", payload_size=MIB)
    return app.store.used_bytes()


def test_pack_counts_mib_of_the_whole_set(transfer_app: App, tmp_path: Path) -> None:
    total = _stored(transfer_app)
    buffer = io.StringIO()
    with ByteProgress(_console(buffer), transient=False) as progress:
        packing = progress.phase("packing")
        result = pack(
            transfer_app, tmp_path / "set", on_progress=packing, on_total=packing.set_total
        )
    assert result.total_bytes == total
    shown = ANSI.sub("", buffer.getvalue())
    assert _mib(total) in shown.splitlines()[-1]
    assert " MB" not in shown and "?" not in shown.splitlines()[-1]


def test_import_counts_each_byte_of_the_set_once(
    transfer_app: App, tmp_path: Path, object_store: Any, key_pair: tuple[Path, Path]
) -> None:
    """The import reads the set once (the tool is verified, the parts are checked and
    uploaded in the same pass), so one counter reaches the set's size exactly."""
    from mirror.transferset.keys import load_trusted_keys

    _stored(transfer_app)
    pack(transfer_app, tmp_path / "set")
    total = set_bytes(tmp_path / "set")
    assert total is not None and total > 3 * MIB
    buffer = io.StringIO()
    seen: list[int] = []
    with ByteProgress(_console(buffer), transient=False) as progress:
        importing = progress.phase("importing", total)

        def count(size: int) -> None:
            seen.append(size)
            importing(size)

        import_set(
            object_store,
            tmp_path / "set",
            load_trusted_keys([key_pair[1]]),
            on_progress=count,
            on_verify_progress=count,
        )
    assert sum(seen) == total
    last = ANSI.sub("", buffer.getvalue()).splitlines()[-1]
    assert last.startswith("importing") and _mib(total) in last


def test_the_command_line_draws_mib_totals_on_a_terminal(
    transfer_app: App, tmp_path: Path, key_pair: tuple[Path, Path]
) -> None:
    total = _stored(transfer_app)
    store_dir = Path(transfer_app.settings.store.path)
    config = write_config(tmp_path / "c.toml", transfer_config(store_dir, key_pair))
    code, _, drawn = on_a_terminal("--config", str(config), "transfer", "pack", "out", cwd=tmp_path)
    assert code == 0, drawn
    shown = ANSI.sub("", drawn)
    assert "packing" in shown
    assert _mib(total) in shown
    assert " MB" not in shown
