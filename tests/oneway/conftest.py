"""A real signed transfer set for the one-way tests: packed by `pack` from a real store."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from mirror.outbound.pack import pack
from mirror.store.app import App
from tests.fixtures.versions import add_version

MiB = 1024 * 1024


@pytest.fixture
def packed_set(transfer_app: App, tmp_path: Path) -> Path:
    """A set of about 3 MiB in 1 MiB parts (several blocks per part, a short last one)."""
    add_version(transfer_app, "docs.example.com", "2026-11-20", payload_size=3 * MiB)
    add_version(transfer_app, "api.example.com", "2026-11-21", payload_size=3000)
    out = tmp_path / "sets" / "set-1"
    out.parent.mkdir()
    pack(transfer_app, out, max_size=MiB)
    return out


@pytest.fixture
def spool(tmp_path: Path) -> Path:
    return tmp_path / "spool"


def same_tree(a: Path, b: Path) -> bool:
    names: Any = lambda root: sorted(p.relative_to(root) for p in root.rglob("*") if p.is_file())  # noqa: E731
    return names(a) == names(b) and all(
        (a / n).read_bytes() == (b / n).read_bytes() for n in names(a)
    )


def badly_signed_copy(packed: Path, dest: Path) -> Path:
    """A copy of `packed` with one character of its signature changed: the genuine set's
    manifest (so its session), refused when its signature is checked."""
    shutil.copytree(packed, dest)
    signature = dest / "manifest.json.sig"
    text = signature.read_text()
    at = text.rfind('"') - 5
    signature.write_text(text[:at] + ("A" if text[at] != "A" else "B") + text[at + 1 :])
    return dest
