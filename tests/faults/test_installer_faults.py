"""The offline installer run without `--key` (issue 18, class 5).

An artefact rebuilt and re-signed by someone else passes `sha256sum -c` (its SHA256SUMS is
new too), so only the signature tells. Without `--key` install.sh cannot check it: it
installs, and says on stderr, before installing and as its last words, that the signature
was NOT checked and the exact command that checks it, with standard tools only (the
attacker here also changed install.sh's own --check-only to lie). That command is run here
as printed (with the key's path put in): it refuses the re-signed artefact and accepts the
real one.
"""

from __future__ import annotations

import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from mirror import __version__
from mirror.outbound.selfbundle import ToolBundle
from mirror.transferset.keys import generate_keypair, load_signing_key
from tests.fixtures.artefact import Installed, copied_venv, offline_env

DOCUMENTED_KEY = "/etc/mirror/transfer.pub"


def unpack(artefact: Path, where: Path) -> Path:
    with tarfile.open(artefact) as archive:
        archive.extractall(where, filter="data")
    return where / f"mirror-tool-{__version__}"


def resign(unpacked: Path, key_prefix: Path) -> None:
    """What an attacker with their own key does: change a file, new sums, new signature."""
    example = unpacked / "config.example.toml"
    example.write_text(example.read_text() + "\n# changed by someone else\n")
    script = unpacked / "install.sh"
    lying = 'if [ "$check_only" = yes ]; then echo checked; exit 0; fi\n'
    before_signature = '\nif [ -n "$key" ]; then\n'
    assert before_signature in script.read_text()
    script.write_text(
        script.read_text().replace(before_signature, "\n" + lying + before_signature[1:], 1)
    )
    listed = subprocess.run(
        ["sh", "-c", "find . -type f ! -name 'SHA256SUMS*' | sed 's#^./##' | LC_ALL=C sort"],
        cwd=unpacked,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    sums = subprocess.run(
        ["sha256sum", *listed], cwd=unpacked, capture_output=True, check=True
    ).stdout
    (unpacked / "SHA256SUMS").write_bytes(sums)
    generate_keypair(key_prefix)
    signature = load_signing_key(key_prefix.with_suffix(".key")).signature_document(sums)
    (unpacked / "SHA256SUMS.sig").write_bytes(signature)


def install(unpacked: Path, root: Path, *options: str) -> subprocess.CompletedProcess[str]:
    python = getattr(sys, "_base_executable", sys.executable)
    argv = ["./install.sh", *options, "--root", str(root), "--python", python, "--no-systemd"]
    return subprocess.run(
        argv, cwd=unpacked, env=offline_env(), capture_output=True, text=True, check=False
    )


def printed_remedy(stderr: str, key: Path) -> list[str]:
    """The command the warning prints, with the documented key path replaced by `key`."""
    line = next(line for line in stderr.splitlines() if line.startswith("  cd "))
    command = line.strip()
    assert DOCUMENTED_KEY in command and "install.sh" not in command, line
    return ["sh", "-c", command.replace(DOCUMENTED_KEY, str(key))]


@pytest.mark.slow
@pytest.mark.fault(
    "18.5 install.sh without --key, re-signed artefact",
    "installs, warns NOT checked twice; printed check: 1, on the real one 0",
)
def test_without_key_a_resigned_artefact_is_named_unchecked_and_the_remedy_catches_it(
    built: tuple[ToolBundle, Path, Path],
    installed: Installed,
    tmp_path: Path,
    fault_got: list[str],
) -> None:
    """Run over a host that has the tool installed already (a copy of the run's install):
    an upgrade is where a re-signed artefact meets an operator."""
    made, _, public = built
    unpacked = unpack(made.path, tmp_path)
    resign(unpacked, tmp_path / "attacker")
    copied_venv(installed, tmp_path / "root" / "opt" / "mirror")
    done = install(unpacked, tmp_path / "root")
    assert done.returncode == 0, done.stdout + done.stderr
    warnings = [line for line in done.stderr.splitlines() if "was NOT checked" in line]
    fault_got.append(f"exit {done.returncode}, {len(warnings)} warnings")
    assert len(warnings) == 2, done.stderr
    assert done.stderr.rstrip().splitlines()[-2].startswith("install.sh: check it with")
    assert done.stderr.rstrip().splitlines()[-1].startswith("  cd ")
    assert (tmp_path / "root" / "usr" / "local" / "bin" / "mirror").is_symlink()

    checked = subprocess.run(
        printed_remedy(done.stderr, public),
        cwd=tmp_path,
        env=offline_env(),
        capture_output=True,
        text=True,
        check=False,
    )
    fault_got.append(f"printed check: exit {checked.returncode}")
    assert checked.returncode == 1, checked.stdout + checked.stderr
    assert "Signature Verification Failure" in checked.stdout + checked.stderr
    lied = subprocess.run(
        [str(unpacked / "install.sh"), "--check-only", "--key", str(public)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert lied.returncode == 0  # why the printed check must not be the artefact's own script

    # the same command on the real artefact (unpacked elsewhere) passes and installs nothing
    real = unpack(made.path, tmp_path / "real")
    command = printed_remedy(done.stderr, public)
    command[2] = command[2].replace(str(unpacked), str(real))
    checked = subprocess.run(
        command, cwd=tmp_path, env=offline_env(), capture_output=True, text=True, check=False
    )
    fault_got.append(f"on the real one: exit {checked.returncode}")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "Signature Verified Successfully" in checked.stdout + checked.stderr
    missing_key = subprocess.run(
        [str(real / "install.sh"), "--check-only"], capture_output=True, text=True, check=False
    )
    assert missing_key.returncode == 2 and "--check-only needs --key" in missing_key.stderr
