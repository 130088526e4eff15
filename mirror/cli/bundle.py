"""`mirror bundle-self OUT`: the tool itself as one signed, offline-installable artefact."""

from __future__ import annotations

from pathlib import Path

import click

from mirror.cli.common import CliContext, pass_cli
from mirror.units import format_size


@click.command("bundle-self")
@click.argument("out", type=click.Path(file_okay=False, path_type=Path))
@click.option(
    "--signing-key",
    "key_path",
    metavar="FILE.key|URI",
    default=None,
    help="The private key that signs the installer: the connected side's transfer.key (or "
    "the pkcs11: URI of its key in a token), whose transfer.pub install.sh --key checks it "
    "with [transfer.signing_key].",
)
@click.option(
    "--key",
    "key_path",
    default=None,
    hidden=True,
    help="Deprecated: --signing-key.",
)
@click.option(
    "--local",
    is_flag=True,
    help="This machine's platform only, wheels re-packed from this installation (offline).",
)
@click.option(
    "--arch",
    "architectures",
    multiple=True,
    type=click.Choice(["x86_64", "aarch64"]),
    help="manylinux architecture (repeatable) [x86_64 and aarch64].",
)
@click.option(
    "--python", "pythons", multiple=True, help="CPython version (repeatable) [3.11, 3.12]."
)
@click.option(
    "--source",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="mirror source checkout [the one this runs from, or the installed wheelhouse].",
)
@pass_cli
def bundle_self_command(
    cli: CliContext,
    out: Path,
    key_path: str | None,
    local: bool,
    architectures: tuple[str, ...],
    pythons: tuple[str, ...],
    source: Path | None,
) -> None:
    """Write OUT/mirror-tool-VERSION.tar: wheels, install.sh, units, example config, signed."""
    from mirror.cli.preflight import Given, signing_key
    from mirror.outbound.selfbundle import bundle_self
    from mirror.outbound.targets import ARCHITECTURES, PYTHONS

    key = signing_key(None if key_path else cli.settings, Given(signing_key=key_path))
    made = bundle_self(
        out,
        key,
        local=local,
        architectures=architectures or ARCHITECTURES,
        pythons=pythons or PYTHONS,
        source=source,
    )
    cli.emit(
        made.as_dict(),
        [
            f"wrote {made.path} ({format_size(made.size)}, {len(made.wheels)} wheels, "
            f"for {', '.join(made.targets)}), signed by key {made.key_id}",
            f"sha256 {made.sha256}",
        ],
    )
