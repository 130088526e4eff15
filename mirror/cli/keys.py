"""`mirror keys generate|show`: Ed25519 key pairs for transfer sets and receipts."""

from __future__ import annotations

from pathlib import Path

import click

from mirror.cli.common import CliContext, pass_cli
from mirror.errors import ConfigError, NotFound
from mirror.transferset.keys import generate_keypair, load_public_key, load_signing_key


@click.group("keys")
def keys_group() -> None:
    """Signing keys for transfer sets."""


ADVICE = {
    "transfer": (
        "keep it on the connected side, set transfer.signing_key",
        "copy it to the air-gapped side: target.transfer_keys",
    ),
    "receipt": (
        "keep it on the air-gapped side, set transfer.signing_key there: it signs receipts",
        "copy it to the connected side: transfer.receipt_keys, or the site's [[sites]] "
        "trusted_keys",
    ),
}


@keys_group.command("generate")
@click.option(
    "--out",
    "prefix",
    required=True,
    metavar="PREFIX",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Writes PREFIX.key (private, mode 0600) and PREFIX.pub.",
)
@click.option(
    "--for",
    "purpose",
    type=click.Choice(list(ADVICE)),
    default=None,
    help="What the key signs: transfer sets (made on the connected side) or receipts "
    "(made on the air-gapped side) [receipt when PREFIX's name starts with `receipt`, "
    "else transfer].",
)
@pass_cli
def keys_generate(cli: CliContext, prefix: Path, purpose: str | None) -> None:
    """Make a new Ed25519 key pair; never overwrites an existing file.

    Says where each half belongs: a transfer key signs sets on the connected side, a
    receipt key signs receipts on the air-gapped side."""
    chosen = purpose or ("receipt" if prefix.name.startswith("receipt") else "transfer")
    keep, copy = ADVICE[chosen]
    made = generate_keypair(prefix)
    cli.emit(
        {
            "key_id": made.key_id,
            "private_key": str(made.private_path),
            "public_key": str(made.public_path),
        },
        [
            f"{chosen} key id {made.key_id}",
            f"private key {made.private_path} (mode 0600: {keep})",
            f"public key  {made.public_path} ({copy})",
        ],
    )


@keys_group.command("show")
@click.argument("path", type=click.Path(dir_okay=False, path_type=Path))
@pass_cli
def keys_show(cli: CliContext, path: Path) -> None:
    """Print the key id of a public or private key file (never the key itself)."""
    if not path.is_file():
        raise NotFound(f"key file {path} does not exist")
    try:
        key_id, kind = load_public_key(path).key_id, "public"
    except ConfigError:
        if b"PRIVATE KEY" not in path.read_bytes()[:4096]:
            raise ConfigError(
                f"{path} holds neither an Ed25519 public key nor an Ed25519 private key"
            ) from None
        key_id, kind = load_signing_key(path).key_id, "private"
    cli.emit({"path": str(path), "kind": kind, "key_id": key_id}, f"{path}: {kind} key {key_id}")
