"""The mirror tool as one signed artefact that installs offline (`mirror bundle-self`).

`mirror-tool-VERSION.tar` holds one directory `mirror-tool-VERSION/` with the
mirror wheel and a wheelhouse of every dependency, `install.sh` (a venv in
/opt/mirror, a link /usr/local/bin/mirror, the systemd units, the documentation in
/usr/share/doc/mirror), the units, the example config, the documentation under `doc/`
(DOCS: the README, docs/ and the pages they link to, in the repository's layout so their
links work), the lock file `requirements.lock`, and `SHA256SUMS` over all of them signed by
the transfer key (`SHA256SUMS.sig`, the same signature format as a transfer set).

Promises:
- The wheelhouse is complete for the targets it names: by default manylinux
  (glibc 2.28+) x86_64 and aarch64 for CPython 3.11 and 3.12, binary wheels only
  (`pip download --only-binary=:all:`), so `pip install --no-index` on the
  far side never needs a compiler or a network.
- A dependency whose lock entry has a marker (raptorq: x86_64 Linux only) is fetched only for
  the targets the marker holds for, decided per target (mirror.outbound.targets), not for
  the building machine as pip would; the feature needing it is missing on the others
  (mirror.features), and install.sh says which features the host got.
- What ships is what was tested: the dependencies are exactly the versions and files of
  `requirements.lock` (the lock `make venv` installs from): downloaded with the lock's
  hashes required, then every wheel held against the lock (name, version, sha256), and the
  mirror wheel's dependencies resolved from the wheelhouse alone for each target, so a
  lock that misses a dependency fails here, not on the far side.
- `local=True` builds for this machine's platform only, offline: the
  dependencies are re-packed as wheels from the distributions installed in the
  running Python (for tests and quick trials); their versions must be the locked ones
  (their bytes are re-packed, so only name and version are held against the lock).
- The artefact is written under a temporary name and renamed when complete; an
  existing artefact is never replaced.
"""

from __future__ import annotations

import base64
import contextlib
import importlib.metadata as metadata
import os
import re
import secrets
import shutil
import subprocess
import sys
import tarfile
import zipfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from mirror import __version__
from mirror.errors import ConfigError, OperationFailed
from mirror.fsutil import fsync_dir
from mirror.integrity import hash_bytes, hash_file
from mirror.outbound.lock import LOCK_NAME, read_lock, requirement_lines, unlocked_wheels
from mirror.outbound.targets import (
    ARCHITECTURES,
    PYTHONS,
    Target,
    manylinux_tags,
    targets,
    unresolved,
)
from mirror.transferset.keys import SigningKey

DOCS = (
    "README.md",
    "docs",
    "systemd/README.md",
    "deploy/kubernetes",
    "deploy/monitoring",
    "bench/RESULTS.md",
)
"""The documentation the artefact carries under doc/, as repository paths (a directory: every
file in it): the README, docs/, and every page they link to."""
DOC_DIR = "doc"
SUMS = "SHA256SUMS"
SUMS_SIGNATURE = "SHA256SUMS.sig"
SHARE = Path("share") / "mirror"
_SKIP_FROM_RECORD = {"RECORD", "INSTALLER", "REQUESTED", "direct_url.json"}


@dataclass(frozen=True)
class ToolSources:
    """Where the pieces come from: a source checkout, or an installation made by install.sh
    (which keeps its wheelhouse and these files under PREFIX/share/mirror, the documentation
    in its doc/)."""

    install_script: Path
    config_example: Path
    units: list[Path]
    docs: list[tuple[Path, str]]
    """(file, its path under doc/)."""
    lock: Path | None = None
    project: Path | None = None
    prebuilt_wheel: Path | None = None

    @classmethod
    def find(cls, source: Path | None = None) -> ToolSources:
        root = source or Path(__file__).resolve().parents[2]
        if (root / "pyproject.toml").is_file() and (root / "mirror").is_dir():
            return cls(
                install_script=root / "deploy" / "install.sh",
                config_example=root / "config.example.toml",
                units=_units(root / "systemd"),
                docs=_checkout_docs(root),
                lock=root / LOCK_NAME,
                project=root,
            )
        if source is not None:
            raise ConfigError(f"{source} is not a mirror source checkout (no pyproject.toml)")
        share = Path(sys.prefix) / SHARE
        wheels = sorted((share / "wheels").glob("mirror-*.whl"))
        if not wheels:
            raise ConfigError(
                "no mirror source checkout or installed wheelhouse found",
                hint="run from a source checkout, or pass --source DIR",
            )
        return cls(
            install_script=share / "install.sh",
            config_example=share / "config.example.toml",
            units=_units(share / "systemd"),
            docs=_tree(share / DOC_DIR, share / DOC_DIR),
            lock=share / LOCK_NAME if (share / LOCK_NAME).is_file() else None,
            prebuilt_wheel=wheels[-1],
        )


def _units(directory: Path) -> list[Path]:
    return sorted(p for p in directory.glob("mirror*") if p.suffix in (".service", ".timer"))


def _checkout_docs(root: Path) -> list[tuple[Path, str]]:
    found: list[tuple[Path, str]] = []
    for name in DOCS:
        path = root / name
        if not path.exists():
            raise ConfigError(f"{path} is missing: the artefact carries it ({DOCS})")
        found.extend(_tree(path, root) if path.is_dir() else [(path, name)])
    return found


def _tree(directory: Path, base: Path) -> list[tuple[Path, str]]:
    """Every file under `directory`, named relative to `base` ([] if there is none: an
    installation made before the artefact carried its documentation)."""
    files = sorted(p for p in directory.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    return [(p, p.relative_to(base).as_posix()) for p in files]


@dataclass(frozen=True)
class ToolBundle:
    path: Path
    version: str
    sha256: str
    size: int
    key_id: str
    targets: list[str]
    wheels: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "path": str(self.path),
            "version": self.version,
            "sha256": self.sha256,
            "size": self.size,
            "key_id": self.key_id,
            "targets": self.targets,
            "wheels": self.wheels,
        }


def artefact_name(version: str = __version__) -> str:
    return f"mirror-tool-{version}.tar"


def bundle_self(
    out_dir: Path,
    signing_key: SigningKey,
    *,
    local: bool = False,
    architectures: tuple[str, ...] = ARCHITECTURES,
    pythons: tuple[str, ...] = PYTHONS,
    source: Path | None = None,
) -> ToolBundle:
    """Build `out_dir/mirror-tool-VERSION.tar`; ConfigError if it exists already."""
    sources = ToolSources.find(source)
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / artefact_name()
    if target.exists() or target.is_symlink():
        raise ConfigError(f"{target} already exists; remove it or choose another directory")
    work = out_dir / f".{target.name}.partial-{secrets.token_hex(4)}"
    try:
        root = work / f"mirror-tool-{__version__}"
        wheels = root / "wheels"
        wheels.mkdir(parents=True)
        lock = _lock(sources)
        chosen = None if local else targets(architectures, pythons)
        names = _gather_wheels(sources, lock, wheels, work, chosen)
        _copy_files(sources, root)
        shutil.copy2(lock, root / LOCK_NAME)
        sums = _sha256sums(root)
        (root / SUMS).write_bytes(sums)
        (root / SUMS_SIGNATURE).write_bytes(signing_key.signature_document(sums))
        partial = work / target.name
        _write_tar(root, partial)
        os.rename(partial, target)
        fsync_dir(out_dir)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return _built(target, signing_key, names)


def _gather_wheels(
    sources: ToolSources, lock: Path, wheels: Path, work: Path, chosen: list[Target] | None
) -> list[str]:
    """Fill `wheels` with mirror's wheel and its locked dependencies: downloaded for the
    `chosen` targets, or (None: `--local`) taken from this installation; every one checked
    against the lock (its hashes too, when downloaded). The targets' names."""
    mirror_wheel = _mirror_wheel(sources, wheels, work)
    if chosen is None:
        for dist in requirement_closure("mirror"):
            wheel_from_installed(dist, wheels)
        names = ["local"]
    else:
        names = _download_locked(lock, mirror_wheel, chosen, work)
    _check_locked(wheels, mirror_wheel, lock, check_hashes=chosen is not None)
    return names


def _built(target: Path, signing_key: SigningKey, names: list[str]) -> ToolBundle:
    """What was built, read back from the artefact in place."""
    digest = hash_file(target)
    return ToolBundle(
        path=target,
        version=__version__,
        sha256=digest.sha256,
        size=digest.size,
        key_id=signing_key.key_id,
        targets=names,
        wheels=_wheel_names(target),
    )


@contextlib.contextmanager
def tool_for_pack(spec: str, signing_key: SigningKey, work_root: Path) -> Iterator[Path]:
    """The artefact `transfer pack --with-tool SPEC` carries: a file, or `auto` to build one
    now (every default target) in a temporary directory that goes away afterwards."""
    if spec != "auto":
        if not Path(spec).is_file():
            raise ConfigError(
                f"--with-tool {spec}: no such file",
                hint="name a mirror-tool-VERSION.tar from `mirror bundle-self`, or `auto`",
            )
        yield Path(spec)
        return
    work = work_root / f".mirror-tool-auto-{secrets.token_hex(4)}"
    try:
        yield bundle_self(work, signing_key).path
    finally:
        shutil.rmtree(work, ignore_errors=True)


# ---- pieces ---------------------------------------------------------------------------------


def _run(command: list[str], what: str) -> None:
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        tail = (result.stderr or result.stdout).strip().splitlines()[-3:]
        raise OperationFailed(f"{what} failed: {' / '.join(tail) or 'no output'}")


def _lock(sources: ToolSources) -> Path:
    if sources.lock is None or not sources.lock.is_file():
        raise ConfigError(
            f"no {LOCK_NAME} found beside the sources: the artefact carries only locked versions",
            hint="run from a source checkout (make lock writes it), or pass --source DIR",
        )
    return sources.lock


def _check_locked(wheels: Path, mirror_wheel: Path, lock: Path, *, check_hashes: bool) -> None:
    dependencies = [p for p in wheels.glob("*.whl") if p != mirror_wheel]
    problems = unlocked_wheels(dependencies, read_lock(lock), check_hashes=check_hashes)
    if problems:
        raise ConfigError(
            f"{len(problems)} wheel(s) not as {lock} pins them: {'; '.join(problems[:5])}",
            hint="run make venv (it installs the lock) and build again, or make lock",
        )


def _mirror_wheel(sources: ToolSources, wheels: Path, work: Path) -> Path:
    if sources.prebuilt_wheel is not None:
        shutil.copy2(sources.prebuilt_wheel, wheels / sources.prebuilt_wheel.name)
        return wheels / sources.prebuilt_wheel.name
    assert sources.project is not None
    tree = work / "src"
    tree.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in ("mirror", "migrations"):
        shutil.copytree(sources.project / name, tree / name, ignore=ignore)
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy2(sources.project / name, tree / name)
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-index",
            "--no-build-isolation",
            "--wheel-dir",
            str(wheels),
            str(tree),
        ],
        "building the mirror wheel (needs setuptools and wheel installed)",
    )
    built = sorted(wheels.glob("mirror-*.whl"))
    if not built:
        raise OperationFailed("building the mirror wheel produced no wheel")
    return built[0]


def _download_locked(lock: Path, mirror_wheel: Path, chosen: list[Target], work: Path) -> list[str]:
    """The locked wheels for every target, beside the mirror wheel; the targets' names. Each
    target gets the lock's pins whose markers hold for it (never decided by pip, which would
    decide them for this machine), then the wheelhouse must install mirror on each alone."""
    pins = [pin for pinned in read_lock(lock).values() for pin in pinned]
    wheels = mirror_wheel.parent
    downloads: list[tuple[Path, Path, Target]] = []
    for target in chosen:
        wanted = requirement_lines(p for p in pins if p.applies(target.environment()))
        requirements = work / f"requirements-{target.name}.txt"
        requirements.write_text(wanted, encoding="utf-8")
        downloads.append((requirements, work / f"wheels-{target.name}", target))
    with ThreadPoolExecutor(max_workers=len(downloads) or 1) as pool:
        list(pool.map(lambda download: _pip_download(*download), downloads))
    for _, directory, _ in downloads:
        for wheel in directory.glob("*.whl"):
            if not (wheels / wheel.name).exists():
                os.replace(wheel, wheels / wheel.name)
    everything = sorted(wheels.glob("*.whl"))
    problems = [line for t in chosen for line in unresolved(everything, mirror_wheel, t)]
    if problems:
        raise ConfigError(
            f"{LOCK_NAME} misses what mirror needs: {len(problems)} requirement(s) no locked "
            f"wheel fits: {'; '.join(problems[:5])}",
            hint="run make lock (uv pip compile --universal) and build again",
        )
    return [target.name for target in chosen]


def _pip_download(requirements: Path, wheels: Path, target: Target) -> None:
    """Exactly the locked files: every requirement pinned, every download's sha256 checked.
    The targets download at once, each into its own directory (the same locked file may come
    for several; a name is one file, the lock's hashes see to that)."""
    platforms = [
        option for tag in manylinux_tags(target.architecture) for option in ("--platform", tag)
    ]
    _run(
        [
            *(sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--require-hashes"),
            *("--only-binary=:all:", *platforms, "--implementation", "cp"),
            *("--python-version", target.python, "--dest", str(wheels), "-r", str(requirements)),
        ],
        f"downloading the locked wheels for CPython {target.python} on manylinux "
        f"{target.architecture}",
    )


def requirement_closure(name: str) -> list[metadata.Distribution]:
    """Every installed distribution `name` needs (with extras and markers honoured), not
    `name` itself."""
    found: dict[str, metadata.Distribution] = {}
    seen: set[tuple[str, str]] = set()
    todo: list[tuple[str, str]] = [(name, "")]
    while todo:
        wanted, extra = todo.pop()
        if (canonicalize_name(wanted), extra) in seen:
            continue
        seen.add((canonicalize_name(wanted), extra))
        try:
            dist = metadata.distribution(wanted)
        except metadata.PackageNotFoundError:
            raise ConfigError(f"{wanted} is not installed here; cannot bundle it") from None
        if canonicalize_name(wanted) != canonicalize_name(name):
            found[canonicalize_name(wanted)] = dist
        for text in dist.requires or []:
            requirement = Requirement(text)
            if requirement.marker is not None and not requirement.marker.evaluate({"extra": extra}):
                continue
            todo.append((requirement.name, ""))
            todo.extend((requirement.name, wanted_extra) for wanted_extra in requirement.extras)
    return [found[key] for key in sorted(found)]


def wheel_from_installed(dist: metadata.Distribution, dest: Path) -> Path:
    """Re-pack an installed distribution as the wheel it was installed from (same tags,
    files and metadata; compiled caches and installer records left out)."""
    files = [f for f in dist.files or [] if "__pycache__" not in f.parts and f.parts[0] != ".."]
    info_dir = next(f.parts[0] for f in files if f.parts[0].endswith(".dist-info"))
    tags = [
        line.split(":", 1)[1].strip()
        for line in (dist.read_text("WHEEL") or "").splitlines()
        if line.startswith("Tag:")
    ]
    if not tags:
        raise ConfigError(f"{dist.metadata['Name']} was not installed from a wheel")
    parts = [sorted({tag.split("-")[index] for tag in tags}) for index in range(3)]
    name = re.sub(r"[-_.]+", "_", dist.metadata["Name"])
    wheel = dest / f"{name}-{dist.version}-{'-'.join('.'.join(p) for p in parts)}.whl"
    record: list[str] = []
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as archive:
        for entry in files:
            if entry.parts[0] == info_dir and entry.name in _SKIP_FROM_RECORD:
                continue
            data = Path(str(dist.locate_file(entry))).read_bytes()
            archive.writestr(str(entry), data)
            digest = base64.urlsafe_b64encode(bytes.fromhex(hash_bytes(data))).rstrip(b"=")
            record.append(f"{entry},sha256={digest.decode()},{len(data)}")
        record.append(f"{info_dir}/RECORD,,")
        archive.writestr(f"{info_dir}/RECORD", "\n".join(record) + "\n")
    return wheel


def _copy_files(sources: ToolSources, root: Path) -> None:
    shutil.copy2(sources.install_script, root / "install.sh")
    (root / "install.sh").chmod(0o755)
    shutil.copy2(sources.config_example, root / "config.example.toml")
    for path, name in sources.docs:
        (root / DOC_DIR / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, root / DOC_DIR / name)
    (root / "systemd").mkdir()
    for unit in sources.units:
        shutil.copy2(unit, root / "systemd" / unit.name)


def _sha256sums(root: Path) -> bytes:
    lines = []
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        lines.append(f"{hash_file(path).sha256}  {path.relative_to(root).as_posix()}\n")
    return "".join(lines).encode("utf-8")


def _write_tar(root: Path, target: Path) -> None:
    def normalise(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.uid = info.gid = 0
        info.uname = info.gname = "root"
        info.mode = 0o755 if info.isdir() or info.mode & 0o100 else 0o644
        return info

    with open(target, "xb") as handle:
        with tarfile.open(fileobj=handle, mode="w", format=tarfile.PAX_FORMAT) as archive:
            archive.add(root, arcname=root.name, filter=normalise)
        handle.flush()
        os.fsync(handle.fileno())


def _wheel_names(artefact: Path) -> list[str]:
    with tarfile.open(artefact) as archive:
        return sorted(Path(name).name for name in archive.getnames() if name.endswith(".whl"))
