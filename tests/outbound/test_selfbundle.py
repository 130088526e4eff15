"""The offline installer: `mirror bundle-self` builds it, install.sh installs it with nothing
fetched, and the installed tool verifies a real signed transfer set. The documented steps
(docs/install.md blocks marked `tested:`) are the ones run here."""

from __future__ import annotations

import filecmp
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from packaging.utils import parse_wheel_filename

from mirror import __version__
from mirror.errors import ConfigError
from mirror.outbound.lock import canonical_name, read_lock, unlocked_wheels
from mirror.outbound.pack import pack
from mirror.outbound.selfbundle import ToolBundle, bundle_self, tool_for_pack
from mirror.outbound.targets import (
    ARCHITECTURES,
    PYTHONS,
    Target,
    manylinux_tags,
    targets,
    unresolved,
)
from mirror.store.app import App
from mirror.transferset.keys import load_signing_key, load_trusted_keys, verify_signature_file
from tests.fixtures.artefact import Installed, offline_env
from tests.fixtures.cli import mirror_cli, write_config
from tests.fixtures.docs import documented
from tests.fixtures.s3 import transfer_config
from tests.fixtures.versions import add_version

ROOT = Path(__file__).resolve().parents[2]


def run(
    argv: list[str], env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=600, check=False
    )


def test_the_artefact_holds_wheels_script_units_config_and_signed_sums(
    built: tuple[ToolBundle, Path, Path], tmp_path: Path
) -> None:
    made, _, public = built
    assert made.path.name == f"mirror-tool-{__version__}.tar"
    assert made.targets == ["local"]
    assert any(name.startswith("mirror-") for name in made.wheels)
    for needed in ("cryptography", "pydantic_core", "psycopg_binary", "boto3"):
        assert any(name.startswith(needed + "-") for name in made.wheels), needed
    with tarfile.open(made.path) as archive:
        archive.extractall(tmp_path, filter="data")
    root = tmp_path / f"mirror-tool-{__version__}"
    for name in ("install.sh", "config.example.toml", "systemd/mirror.service"):
        assert (root / name).is_file(), name
    for name in ("README.md", "docs/install.md", "docs/architecture.md", "systemd/README.md"):
        assert (root / "doc" / name).read_bytes() == (ROOT / name).read_bytes(), name
    assert os.access(root / "install.sh", os.X_OK)
    listed = {line.split("  ")[1] for line in (root / "SHA256SUMS").read_text().splitlines()}
    files = {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}
    assert listed == files - {"SHA256SUMS", "SHA256SUMS.sig"}
    checked = run(["sha256sum", "--strict", "-c", "SHA256SUMS"], cwd=root)
    assert checked.returncode == 0
    trusted = load_trusted_keys([public])
    sums = (root / "SHA256SUMS").read_bytes()
    signer = verify_signature_file(sums, root / "SHA256SUMS.sig", trusted, what="SHA256SUMS")
    assert signer.key_id == made.key_id


def resolve_elsewhere(wheels: Path, target: Target, work: Path) -> set[str]:
    """The projects uv's resolver (a second one, which decides markers for the target it is
    given) installs for mirror on `target` from `wheels` alone, nothing fetched."""
    wanted = work / "mirror.in"
    wanted.write_text(f"mirror=={__version__}\n")
    platform = f"{target.architecture}-manylinux_2_28"
    done = run(
        [
            str(Path(sys.executable).parent / "uv"),
            *("pip", "compile", str(wanted), "--quiet", "--no-header", "--no-annotate"),
            *("--python-platform", platform, "--python-version", target.python),
            *("--no-index", "--find-links", str(wheels), "--only-binary", ":all:"),
        ],
        offline_env(),
    )
    assert done.returncode == 0, (target, done.stderr)
    return {line.split("==")[0] for line in done.stdout.splitlines() if "==" in line}


def parse_tags(filename: str) -> frozenset[object]:
    return frozenset(parse_wheel_filename(filename)[3])


def documentation_paths(units: Path) -> set[str]:
    """Every `file:` path the units' Documentation= lines name."""
    found: set[str] = set()
    for unit in sorted(units.glob("mirror*")):
        for line in unit.read_text().splitlines():
            if line.startswith("Documentation="):
                found.update(u.removeprefix("file:") for u in line.split("=", 1)[1].split())
    return found


def headings(page: Path) -> set[str]:
    """The anchors of a Markdown page's headings, as GitHub makes them."""
    titles = re.findall(r"^#+ (.*)$", page.read_text(), re.M)
    return {re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-") for title in titles}


def broken_links(docs: Path) -> list[str]:
    """Every relative link of the Markdown pages under `docs` to a file outside it, a file
    that is not there, or a heading the page lacks."""
    broken = []
    for page in sorted(docs.rglob("*.md")):
        for link in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
            if re.match(r"[a-z]+:", link):
                continue
            path, _, anchor = link.partition("#")
            target = (page.parent / path).resolve() if path else page
            if not (target.is_file() and target.is_relative_to(docs.resolve())):
                broken.append(f"{page.relative_to(docs)}: {link}")
            elif anchor and target.suffix == ".md" and anchor not in headings(target):
                broken.append(f"{page.relative_to(docs)}: {link} (no such heading)")
    return broken


def test_every_link_of_the_docs_the_artefact_carries_resolves_inside_them(
    built: tuple[ToolBundle, Path, Path], tmp_path: Path
) -> None:
    """An operator holding only the artefact reads README.md, docs/ and what they link to
    (doc/, installed to /usr/share/doc/mirror): no link leads outside them or nowhere."""
    made, _, _ = built
    with tarfile.open(made.path) as archive:
        archive.extractall(tmp_path, filter="data")
    docs = tmp_path / f"mirror-tool-{__version__}" / "doc"
    assert (docs / "README.md").is_file()
    assert broken_links(docs) == []


def test_install_refuses_a_wheel_the_signed_list_does_not_name(
    built: tuple[ToolBundle, Path, Path], tmp_path: Path
) -> None:
    """sha256sum -c checks only the files listed; pip would take any newer wheel beside them,
    so an added `mirror-99` wheel (or a link) must stop the install before pip runs."""
    made, _, public = built
    with tarfile.open(made.path) as archive:
        archive.extractall(tmp_path, filter="data")
    unpacked = tmp_path / f"mirror-tool-{__version__}"
    planted = unpacked / "wheels" / "mirror-99.0.0-py3-none-any.whl"
    planted.write_bytes(b"PK\x05\x06" + bytes(18))
    root = tmp_path / "root"
    python = getattr(sys, "_base_executable", sys.executable)
    argv = ["./install.sh", "--key", str(public), "--root", str(root), "--python", python]
    done = run(argv, offline_env(), cwd=unpacked)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "wheels/mirror-99.0.0-py3-none-any.whl" in done.stderr
    assert "not listed in SHA256SUMS" in done.stderr
    assert not root.exists()


def test_bundle_never_replaces_an_artefact(built: tuple[ToolBundle, Path, Path]) -> None:
    made, private, _ = built
    with pytest.raises(ConfigError, match="already exists"):
        bundle_self(made.path.parent, load_signing_key(private), local=True)


def test_install_offline_then_verify_a_real_set_with_the_installed_tool(
    built: tuple[ToolBundle, Path, Path],
    installed: Installed,
    transfer_app: App,
    key_pair: tuple[Path, Path],
    tmp_path: Path,
) -> None:
    """The tool a set carries is the artefact the run installed by docs/install.md's steps
    (tests/fixtures/artefact.py): that install, the connected host's documented set-up with
    it, and the installed tool verifying the set (and refusing it with its tool changed)."""
    made, _, _ = built
    add_version(transfer_app, "docs.example.com", "2026-11-20")
    set_dir = tmp_path / "set-0007"
    pack(transfer_app, set_dir, tool=made.path)
    carried = set_dir / "tool" / made.path.name
    assert filecmp.cmp(carried, made.path, shallow=False)
    root = installed.mirror.parents[3]
    assert "signature of SHA256SUMS checked" in installed.said
    assert f"mirror, version {__version__}" in installed.said
    link = installed.mirror
    assert link.is_symlink() and os.readlink(link) == f"{root}/opt/mirror/bin/mirror"
    assert (root / "etc" / "systemd" / "system" / "mirror.service").is_file()
    assert (root / "opt" / "mirror" / "share" / "mirror" / "wheels").is_dir()
    assert "  one-way link (transfer send, transfer receive): yes" in installed.said.splitlines()
    documentation = documentation_paths(ROOT / "systemd")
    assert "/usr/share/doc/mirror/README.md" in documentation
    for path in documentation:
        assert Path(f"{root}{path}").is_file(), f"Documentation={path} is not installed"
    docs = root / "usr" / "share" / "doc" / "mirror"
    assert (docs / "docs" / "install.md").read_bytes() == (ROOT / "docs/install.md").read_bytes()
    assert broken_links(docs) == []
    etc = str(tmp_path / "etc-mirror")  # a copy: the shared install is never changed
    shutil.copytree(root / "etc" / "mirror", etc)
    connected = documented("connected-host").replace("/etc/mirror", etc).replace("sudo ", "")
    connected = "\n".join(line for line in connected.splitlines() if "systemctl" not in line)
    env = {**offline_env(), "MIRROR_CONFIG": f"{etc}/config.toml", "MINT_ADMIN_KEY": "mint_x"}
    env["PATH"] = f"{root}/usr/local/bin:{env['PATH']}"
    example = Path(etc, "config.example.toml")  # the host's paths, under the scratch root
    example.write_text(
        example.read_text()
        .replace("/etc/mirror", etc)
        .replace("/var/lib/mirror", f"{tmp_path}/var/lib/mirror")
    )
    steps = run(["bash", "-e", "-c", connected], env)
    assert steps.returncode == 0, steps.stdout + steps.stderr
    assert oct(Path(etc, "config.toml").stat().st_mode & 0o777) == "0o644"
    assert oct(Path(etc, "admin-api-key").stat().st_mode & 0o777) == "0o600"
    assert Path(etc, "admin-api-key").read_text().strip() == "mint_x"
    assert Path(etc, "transfer.key").is_file() and Path(etc, "transfer.pub").is_file()
    config = tmp_path / "config.toml"
    config.write_text(f'[target]\ntransfer_keys = ["{key_pair[1]}"]\n')
    env = {**offline_env(), "MIRROR_CONFIG": str(config)}
    verify = run([str(link), "--json", "transfer", "verify", str(set_dir)], env)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    document = json.loads(verify.stdout)
    assert document["valid"] is True
    assert document["tool"]["name"] == made.path.name
    carried.write_bytes(carried.read_bytes()[:-1] + b"!")
    refused = run([str(link), "transfer", "verify", str(set_dir)], env)
    assert refused.returncode == 5, refused.stderr
    assert "tool/" in refused.stderr


@pytest.mark.pypi
@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_the_default_build_holds_every_target_and_installs_here(
    transfer_app: App, store_dir: Path, key_pair: tuple[Path, Path], tmp_path: Path
) -> None:
    """What `make dist` builds (bundle-self with no options: every default target), here by
    `transfer pack --with-tool auto`, which builds the same on the spot: the wheels come from
    the index pip is set up with (PyPI), as the build's do. Every wheel is a locked file;
    each target gets exactly the lock's pins whose markers hold for it (raptorq: x86_64
    only) and installs mirror from the wheelhouse alone; this host installs it offline."""
    add_version(transfer_app, "docs.example.com", "2026-11-20")
    config = write_config(tmp_path / "config.toml", transfer_config(store_dir, key_pair))
    out = tmp_path / "set"
    argv = ["--config", str(config), "transfer", "pack", str(out), "--with-tool", "auto"]
    packed = mirror_cli(*argv, timeout=1700)
    assert packed.returncode == 0, packed.stdout + packed.stderr
    with tarfile.open(out / "tool" / f"mirror-tool-{__version__}.tar") as archive:
        archive.extractall(tmp_path, filter="data")
    unpacked = tmp_path / f"mirror-tool-{__version__}"
    lock = ROOT / "requirements.lock"
    assert (unpacked / "requirements.lock").read_bytes() == lock.read_bytes()
    wheels = sorted((unpacked / "wheels").glob("*.whl"))
    (mirror_wheel,) = [p for p in wheels if p.name.startswith("mirror-")]
    pins = read_lock(lock)
    assert unlocked_wheels([p for p in wheels if p != mirror_wheel], pins) == []
    for target in targets(ARCHITECTURES, PYTHONS):
        assert unresolved(wheels, mirror_wheel, target) == [], target
        resolved = resolve_elsewhere(unpacked / "wheels", target, tmp_path)
        assert ("raptorq" in resolved) == (target.architecture == "x86_64"), resolved
        fitting = {p.name.split("-")[0] for p in wheels if parse_tags(p.name) & target.tags()}
        environment = target.environment()
        wanted = {n for n, pinned in pins.items() if any(p.applies(environment) for p in pinned)}
        assert {canonical_name(n) for n in fitting} == wanted | {"mirror"}, target
        assert ("raptorq" in wanted) == (target.architecture == "x86_64")
    python = getattr(sys, "_base_executable", sys.executable)
    argv = ["./install.sh", "--root", str(tmp_path / "root"), "--python", python, "--no-systemd"]
    installed = run(argv, offline_env(), cwd=unpacked)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    assert f"mirror, version {__version__}" in installed.stdout
    assert "  one-way link (transfer send, transfer receive): yes" in installed.stdout


def test_the_documented_manual_check_passes_and_catches_a_change(
    transfer_app: App, key_pair: tuple[Path, Path], tmp_path: Path
) -> None:
    add_version(transfer_app, "docs.example.com", "2026-11-20")
    set_dir = tmp_path / "set"
    pack(transfer_app, set_dir, max_size=1024 * 1024)
    recipe = documented("manual-verify")
    recipe = recipe.replace("/media/usb/set-0007", str(set_dir))
    recipe = recipe.replace("/etc/mirror/transfer.pub", str(key_pair[1]))
    recipe = recipe.replace("/tmp/manifest.sig", str(tmp_path / "manifest.sig"))

    good = run(["sh", "-e", "-c", recipe])
    assert good.returncode == 0, good.stdout + good.stderr
    assert "Signature Verified Successfully" in good.stdout
    manifest = set_dir / "manifest.json"
    manifest.write_bytes(manifest.read_bytes().replace(b'"sequence":1', b'"sequence":2'))
    assert run(["sh", "-e", "-c", recipe]).returncode != 0


def test_manylinux_tags_include_every_older_glibc() -> None:
    """pip --platform takes tags literally: psycopg-binary ships only manylinux_2_17 for
    x86_64, so naming manylinux_2_28 alone would find no wheel for it."""
    tags = manylinux_tags("x86_64")
    assert tags[0] == "manylinux_2_28_x86_64"
    assert "manylinux_2_17_x86_64" in tags and tags[-1] == "manylinux2014_x86_64"
    assert len(tags) == len(set(tags)) == 13


def test_with_tool_naming_a_missing_file_is_a_usage_error(tmp_path: Path) -> None:
    from mirror.transferset.keys import generate_keypair

    generate_keypair(tmp_path / "k")
    key = load_signing_key(tmp_path / "k.key")
    missing = str(tmp_path / "mirror-tool-9.tar")
    with (
        pytest.raises(ConfigError, match=r"--with-tool .*: no such file"),
        tool_for_pack(missing, key, tmp_path),
    ):
        pass
