"""Local faults (issue 8, classes 4, 5, 10 and 11): a full disk, hostile JSON and bytes, a bad
key file or store path, damaged blobs and name twins in archives.

Every case runs the real `mirror` command (or the real module) against real parts: the
simulator on loopback, a small tmpfs the test mounts, real archives and real files. The
contract checked each time: one `mirror: error:` line, the documented exit code, no trace.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import threading
import unicodedata
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from mirror.archive import ArchiveLimits, extract_archive, inspect_archive
from mirror.config import settings_from_dict
from mirror.errors import IntegrityError
from mirror.httpserver import QuietHTTPServer
from mirror.integrity import hash_file
from mirror.outbound.pack import pack
from mirror.sim import Simulator
from mirror.store.app import App
from mirror.store.inventory import verify_store
from mirror.store.models import ExportRun, RunState
from mirror.transferset.format import MANIFEST, SIGNATURE
from mirror.transferset.keys import load_signing_key
from tests.fixtures.archives import Entry, write_tar, write_zip
from tests.fixtures.cli import mirror_cli, write_config
from tests.fixtures.versions import add_version, open_app

MiB = 1024 * 1024
FAST_API = {"poll_interval": "0.05s", "max_poll_interval": "0.2s", "max_starts_per_hour": 10_000}
DEEP = 100_000  # far past Python's recursion limit; about 200 KB of JSON


def one_error_line(result: subprocess.CompletedProcess[str]) -> str:
    """The single stderr line of a failed command (asserting there is exactly one)."""
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("mirror: error: "), lines[0]
    return lines[0]


def sim_config(path: Path, sim: Simulator, store: Path, **api: Any) -> Path:
    document = {"api": {"base_url": sim.url, **FAST_API, **api}, "store": {"path": str(store)}}
    return write_config(path, document)


def export(config: Path, sim: Simulator, domain: str, *extra: str) -> Any:
    return mirror_cli(
        "--config",
        str(config),
        *extra,
        "export",
        "run",
        "--adhoc",
        domain,
        env={"MIRROR_API_KEY": sim.key},
    )


def status_with_key_file(tmp_path: Path, sim: Simulator, key_file: Path, got: list[str]) -> str:
    """The error line of `export status` with `key_file` as api.key_file (asserting exit 2)."""
    api = {"base_url": sim.url, "key_file": str(key_file)}
    config = write_config(tmp_path / "c.toml", {"api": api, "store": {"path": str(tmp_path)}})
    result = mirror_cli("--config", str(config), "export", "status", "se_1")
    got.append(f"exit {result.returncode}")
    assert result.returncode == 2, result.stderr
    return one_error_line(result)


# --- 8.4 a full disk --------------------------------------------------------------------------


@pytest.mark.fault(
    "8.4 ENOSPC during download", "exit 75, free/needed named, partial kept, resumable"
)
def test_a_full_disk_during_download_is_one_line_and_resumable(
    small_filesystem: Callable[[int], Path],
    sim_factory: Callable[..., Simulator],
    tmp_path: Path,
    fault_got: list[str],
) -> None:
    disk = small_filesystem(12 * MiB)
    store = disk / "store"
    small, big = sim_factory(), sim_factory(bundle_size=24 * MiB)
    first = export(sim_config(tmp_path / "small.toml", small, store), small, "docs.first.test")
    assert first.returncode == 0, first.stderr
    with open_app(store) as app:
        [earlier] = [v.path for v in list_blobs(app)]
        earlier_sha = hash_file(earlier).sha256

    config = sim_config(tmp_path / "big.toml", big, store)
    result = export(config, big, "docs.big.test", "--json")
    fault_got.append(f"exit {result.returncode}")
    assert result.returncode == 75, result.stderr
    line = one_error_line(result)
    assert f"no space left on the disk holding {store / 'tmp'}: " in line
    fault_got.append(line.split(f"{store / 'tmp'}: ", 1)[1][:60])
    assert " free, " in line and "more is needed" in line and "is kept" in line
    assert json.loads(result.stdout)["exit_code"] == 75

    with open_app(store) as app:
        run = latest_run(app, "docs.big.test")
        assert run.active and run.state == RunState.DOWNLOADING and run.bytes_done > 0
        partial = app.store.temp_path(run.partial_name or "")
        assert partial.stat().st_size == run.bytes_done  # cut back to the checkpoint
        assert hash_file(earlier).sha256 == earlier_sha and verify_store(app).ok

    subprocess.run(["mount", "-o", "remount,size=64m", str(disk)], check=True)
    again = export(config, big, "docs.big.test", "--json")
    assert again.returncode == 0, again.stderr
    outcome = json.loads(again.stdout)
    assert outcome["resumed"] is True and outcome["run_id"] == run.id
    assert outcome["sha256"] == big.bundle_sha256(outcome["job_id"])
    fault_got.append("resumed to the right sha256 after space was freed")


# --- 8.4 JSON nested too deeply, bytes that are not UTF-8 ---------------------------------------


class _NestedVendor(BaseHTTPRequestHandler):
    """A vendor whose every answer is deeply nested JSON (status from the path's first part)."""

    def do_GET(self) -> None:
        self.answer()

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.answer()

    def answer(self) -> None:
        status = 500 if "/se_500" in self.path else 200
        body = b"[" * DEEP + b"]" * DEEP
        if self.path.endswith("/jobs"):
            body = b'{"jobId": ' + body + b"}"
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def nested_vendor() -> Iterator[str]:
    server = QuietHTTPServer(("127.0.0.1", 0), _NestedVendor)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def nested(case: str, args: tuple[str, ...], code: int) -> Any:
    fault = pytest.mark.fault(f"8.4 nested JSON, vendor {case}", f"exit {code}, one line")
    return pytest.param(args, code, marks=fault, id=case.replace(" ", "-"))


@pytest.mark.parametrize(
    ("args", "code"),
    [
        nested("200 status", ("export", "status", "se_200"), 1),
        nested("500 status", ("export", "status", "se_500"), 75),
        nested("start answer", ("export", "start", "docs.example.com"), 1),
    ],
)
def test_deeply_nested_vendor_json_is_one_line(
    nested_vendor: str, tmp_path: Path, args: tuple[str, ...], code: int, fault_got: list[str]
) -> None:
    api = {"base_url": nested_vendor, "retry_attempts": 1}
    config = write_config(tmp_path / "c.toml", {"api": api, "store": {"path": str(tmp_path)}})
    result = mirror_cli("--config", str(config), *args, env={"MIRROR_API_KEY": "mint_test"})
    fault_got.append(f"exit {result.returncode}")
    assert result.returncode == code, result.stderr
    one_error_line(result)


@pytest.mark.fault("8.4 nested JSON in a signed manifest", "exit 5, one line")
def test_a_deeply_nested_manifest_is_an_integrity_error(
    tmp_path: Path, key_pair: tuple[Path, Path], fault_got: list[str]
) -> None:
    store = tmp_path / "store"
    document = {
        "store": {"path": str(store)},
        "transfer": {"signing_key": str(key_pair[0])},
        "target": {"transfer_keys": [str(key_pair[1])]},
    }
    config = write_config(tmp_path / "c.toml", document)
    app = App(settings_from_dict(document))
    try:
        add_version(app, "docs.example.com", "2026-11-21")
        result = pack(app, tmp_path / "set")
    finally:
        app.close()
    assert result.path is not None
    data = b'{"format": ' + b"[" * DEEP + b"]" * DEEP + b"}"
    (result.path / MANIFEST).write_bytes(data)
    (result.path / SIGNATURE).write_bytes(load_signing_key(key_pair[0]).signature_document(data))
    verified = mirror_cli("--config", str(config), "transfer", "verify", str(result.path))
    fault_got.append(f"exit {verified.returncode}")
    assert verified.returncode == 5, verified.stderr
    assert "manifest.json" in one_error_line(verified)


@pytest.mark.fault("8.4 non-UTF-8 config file", "exit 2 naming the file")
def test_a_config_file_that_is_not_utf8_is_a_config_error(
    tmp_path: Path, fault_got: list[str]
) -> None:
    config = tmp_path / "latin1.toml"
    config.write_bytes('[store]\npath = "/srv/d\u00e9p\u00f4t"\n'.encode("latin-1"))
    result = mirror_cli("--config", str(config), "config", "check")
    fault_got.append(f"exit {result.returncode}")
    assert result.returncode == 2, result.stderr
    line = one_error_line(result)
    assert str(config) in line and "UTF-8" in line


@pytest.mark.fault("8.4 non-UTF-8 api.key_file", "exit 2 naming the file")
def test_a_key_file_that_is_not_utf8_is_a_config_error(
    tmp_path: Path, sim: Simulator, fault_got: list[str]
) -> None:
    key_file = tmp_path / "key"
    key_file.write_bytes(b"\xffmint_\xfe\x00")
    line = status_with_key_file(tmp_path, sim, key_file, fault_got)
    assert str(key_file) in line and "UTF-8" in line


@pytest.mark.fault("8.4 hostile values file (deep YAML, not UTF-8)", "exit 2 naming the file")
def test_a_hostile_values_file_is_a_config_error(tmp_path: Path, fault_got: list[str]) -> None:
    target = {"bucket": "docs", "endpoint_url": "http://127.0.0.1:9"}  # never reached
    config = write_config(
        tmp_path / "c.toml", {"store": {"path": str(tmp_path / "store")}, "target": target}
    )
    deep, latin = tmp_path / "deep.yaml", tmp_path / "latin.yaml"
    deep.write_text("staticExport: " + "[" * DEEP + "]" * DEEP + "\n")
    latin.write_bytes("staticExport:\n  bundleUrl: https://caf\u00e9/\n".encode("latin-1"))
    for values in (deep, latin):
        result = mirror_cli("--config", str(config), "chart", "check", str(values))
        fault_got.append(f"{values.name}: exit {result.returncode}")
        assert result.returncode == 2, result.stderr
        assert str(values) in one_error_line(result)


# --- 8.10 exit codes --------------------------------------------------------------------------


@pytest.mark.fault("8.10 missing api.key_file", "exit 2 (configuration), not 4")
def test_a_missing_key_file_is_a_config_error(
    tmp_path: Path, sim: Simulator, fault_got: list[str]
) -> None:
    missing = tmp_path / "no-such-key"
    assert str(missing) in status_with_key_file(tmp_path, sim, missing, fault_got)


@pytest.mark.fault("8.10 store.path is a regular file", "exit 2 naming store.path")
def test_a_store_path_that_is_a_file_is_a_config_error(
    tmp_path: Path, fault_got: list[str]
) -> None:
    not_a_dir = tmp_path / "store"
    not_a_dir.write_text("oops\n")
    config = write_config(tmp_path / "c.toml", {"store": {"path": str(not_a_dir)}})
    result = mirror_cli("--config", str(config), "store", "list")
    fault_got.append(f"exit {result.returncode}")
    assert result.returncode == 2, result.stderr
    line = one_error_line(result)
    assert "store.path" in line and str(not_a_dir) in line


# --- 8.11 name twins --------------------------------------------------------------------------

NFC = unicodedata.normalize("NFC", "docs/caf\u00e9.html")
NFD = unicodedata.normalize("NFD", "docs/caf\u00e9.html")


def twins(first: str, second: str, kind: str, what: str) -> Any:
    allowed = "; allowed by setting" if kind == "case" else "; setting ignored"
    fault = pytest.mark.fault(f"8.11 name twins, {what}", f"exit 5 naming both{allowed}")
    return pytest.param(first, second, kind, marks=fault, id=what.replace(" ", "-"))


@pytest.mark.parametrize(
    ("first", "second", "kind"),
    [
        twins("docs/Index.html", "docs/index.html", "case", "case twin files"),
        twins("Docs/a.html", "docs/b.html", "case", "case twin directories"),
        twins(NFC, NFD, "nfc", "NFC twins"),
    ],
)
def test_name_twins_are_refused(
    tmp_path: Path, first: str, second: str, kind: str, fault_got: list[str]
) -> None:
    for writer in (write_tar, write_zip):
        archive = writer(tmp_path / "twins.bin", [Entry(first, b"one"), Entry(second, b"two")])
        with pytest.raises(IntegrityError) as refused:
            inspect_archive(archive)
        message = str(refused.value)
        assert refused.value.exit_code == 5
        assert ascii(first)[1:-1] in ascii(message) and ascii(second)[1:-1] in ascii(message)
        with pytest.raises(IntegrityError):
            extract_archive(archive, tmp_path / "out")
        assert not (tmp_path / "out").exists()
        allowing = ArchiveLimits(allow_case_twins=True)
        if kind == "case":
            assert inspect_archive(archive, allowing).file_count == 2
        else:
            with pytest.raises(IntegrityError, match="NFC"):
                inspect_archive(archive, allowing)
        fault_got.append(f"{writer.__name__}: exit 5")


@pytest.mark.fault("8.11 case twins in a vendor bundle", "export exit 5; stored when allowed")
def test_an_export_with_case_twins_is_refused_unless_allowed(
    sim: Simulator, tmp_path: Path, fault_got: list[str]
) -> None:
    domain = "docs.twins.test"
    sim.set_faults(malicious_domains={domain: "case_twins"})
    config = sim_config(tmp_path / "c.toml", sim, tmp_path / "store")
    refused = export(config, sim, domain)
    fault_got.append(f"exit {refused.returncode}")
    assert refused.returncode == 5, refused.stderr
    line = one_error_line(refused)
    assert "'index.html' and 'INDEX.HTML'" in line and "allow_case_twins" in line
    text = config.read_text().replace("[store]\n", "[store]\nallow_case_twins = true\n")
    config.write_text(text)
    allowed = export(config, sim, domain, "--json")
    assert allowed.returncode == 0, allowed.stderr
    assert json.loads(allowed.stdout)["state"] == "stored"
    fault_got.append("stored with store.allow_case_twins = true")


# --- 8.5 damaged blobs ------------------------------------------------------------------------


@pytest.mark.fault(
    "8.5 bit flip in a stored blob", "next export repairs it; verify --repair names remedy"
)
def test_the_next_export_repairs_a_damaged_blob(
    sim_factory: Callable[..., Simulator], tmp_path: Path, fault_got: list[str]
) -> None:
    sim = sim_factory(changes_per_export=0)
    store = tmp_path / "store"
    config = sim_config(tmp_path / "c.toml", sim, store)
    domain = "docs.rot.test"
    first = export(config, sim, domain, "--json")
    assert first.returncode == 0, first.stderr
    blob = Path(json.loads(first.stdout)["path"])
    flip_a_bit(blob)

    verify = ["--config", str(config), "store", "verify"]
    found = mirror_cli(*verify)
    assert found.returncode == 5 and "corrupt" in found.stdout, found.stderr
    repair = mirror_cli(*verify, "--repair")
    assert repair.returncode == 5, repair.stderr
    assert f"run `mirror export run` for {domain}" in repair.stdout
    assert "verify --repair" not in repair.stderr  # the remedy left is the export

    again = export(config, sim, domain, "--json")
    assert again.returncode == 0, again.stderr
    outcome = json.loads(again.stdout)
    assert outcome["state"] == "unchanged"
    clean = mirror_cli(*verify)
    fault_got.append(f"verify after the next export: exit {clean.returncode}")
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert hash_file(Path(outcome["path"])).sha256 == outcome["sha256"]


@pytest.mark.fault("8.5 damaged blob, good copy in the store", "verify --repair turns verify clean")
def test_verify_repair_uses_a_good_copy(tmp_path: Path, fault_got: list[str]) -> None:
    store = tmp_path / "store"
    config = write_config(tmp_path / "c.toml", {"store": {"path": str(store)}})
    with open_app(store) as app:
        _, damaged = add_version(app, "docs.example.com", "2026-11-20")
        extra, _ = app.store.add_file(write_tar(tmp_path / "x.tar.gz", {"a.html": b"a"}))
        good_copy = app.store.temp_path("run-1.part")
        good_copy.write_bytes(app.store.blob_path(damaged).read_bytes())
        with app.db.session() as session:
            session.add(
                ExportRun(
                    domain="docs.example.com",
                    active=False,
                    state=RunState.STORED,
                    bytes_done=good_copy.stat().st_size,
                    sha256=damaged,
                    partial_name=good_copy.name,
                )
            )
    flip_a_bit(store / "blobs" / "sha256" / damaged[:2] / damaged)
    assert mirror_cli("--config", str(config), "store", "verify").returncode == 5
    repaired = mirror_cli("--json", "--config", str(config), "store", "verify", "--repair")
    assert repaired.returncode == 0, repaired.stdout + repaired.stderr
    document = json.loads(repaired.stdout)
    assert [r["sha256"] for r in document["repairs"] if r["repaired"]] == [damaged]
    assert document["adopted"] + document["removed"] == [extra]
    assert mirror_cli("--config", str(config), "store", "verify").returncode == 0
    fault_got.append("repaired from a finished download; extra blob adopted; verify exit 0")


# --- helpers ----------------------------------------------------------------------------------


def list_blobs(app: App) -> list[Any]:
    from mirror.store.inventory import list_versions

    return list_versions(app)


def latest_run(app: App, domain: str) -> ExportRun:
    with app.db.session() as session:
        run = session.scalars(
            select(ExportRun).where(ExportRun.domain == domain).order_by(ExportRun.id.desc())
        ).first()
    assert run is not None
    return run


def flip_a_bit(path: Path) -> None:
    path.chmod(0o644)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    path.chmod(0o444)


@pytest.mark.fault(
    "8.4 index on a completely full disk", "exit 75 naming free space and where, one line"
)
def test_an_index_on_a_full_disk_says_the_disk_is_full(
    small_filesystem: Callable[[int], Path], tmp_path: Path, fault_got: list[str]
) -> None:
    disk = small_filesystem(2 * MiB)
    store = disk / "store"
    store.mkdir()
    with open(disk / "filler", "wb") as filler, contextlib.suppress(OSError):
        while True:
            filler.write(b"\0" * 65536)
            filler.flush()
    config = write_config(tmp_path / "c.toml", {"store": {"path": str(store)}})
    result = mirror_cli("--config", str(config), "db", "upgrade")
    fault_got.append(f"exit {result.returncode}")
    assert result.returncode == 75, result.stderr
    line = one_error_line(result)
    assert line.startswith(f"mirror: error: no space left on the disk holding {store}: ")
    assert "the index was not changed" in line
