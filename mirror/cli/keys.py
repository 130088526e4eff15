"""`mirror keys generate|show`: Ed25519 key pairs for transfer sets and receipts."""

from __future__ import annotations

from pathlib import Path

import click

from mirror.cli.common import CliContext, pass_cli
from mirror.errors import ConfigError, NotFound
from mirror.transferset.keys import (
    PublicKey,
    generate_keypair,
    load_public_key,
    load_signing_key,
    write_public_key,
)
from mirror.transferset.pkcs11uri import is_token_uri

PUBLIC_OUT = click.option(
    "--public",
    "public_out",
    metavar="FILE",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Also write the public key to FILE (PEM), the file the other side trusts; "
    "never overwrites one.",
)


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
    metavar="PREFIX|URI",
    help="Writes PREFIX.key (private, mode 0600) and PREFIX.pub; or makes the key in the "
    "PKCS#11 token a pkcs11: URI names (object= its label; with --public).",
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
@PUBLIC_OUT
@pass_cli
def keys_generate(
    cli: CliContext, prefix: str, purpose: str | None, public_out: Path | None
) -> None:
    """Make a new Ed25519 key pair; never overwrites an existing file or token object.

    Says where each half belongs: a transfer key signs sets on the connected side, a
    receipt key signs receipts on the air-gapped side."""
    if is_token_uri(prefix):
        _generate_in_token(cli, prefix, purpose, public_out)
        return
    if public_out is not None:
        raise ConfigError("--public is for a key made in a token; PREFIX.pub is written here")
    chosen = purpose or ("receipt" if Path(prefix).name.startswith("receipt") else "transfer")
    keep, copy = ADVICE[chosen]
    made = generate_keypair(Path(prefix))
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


def _generate_in_token(
    cli: CliContext, uri: str, purpose: str | None, public_out: Path | None
) -> None:
    from mirror.transferset.token import generate_in_token

    if public_out is None:
        raise ConfigError(
            "a key made in a token needs --public FILE: its public half, to copy to the other side"
        )
    if public_out.exists() or public_out.is_symlink():
        raise ConfigError(f"{public_out} already exists; refusing to overwrite a key")
    chosen = purpose or ("receipt" if "object=receipt" in uri else "transfer")
    keep, copy = ADVICE[chosen]
    made = generate_in_token(uri)
    write_public_key(public_out, made.public)
    cli.emit(
        {"key_id": made.key_id, "private_key": made.source, "public_key": str(public_out)},
        [
            f"{chosen} key id {made.key_id}",
            f"private key {made.source} (in the token, never extractable: {keep})",
            f"public key  {public_out} ({copy})",
        ],
    )


@keys_group.command("show")
@click.argument("source", metavar="KEY")
@PUBLIC_OUT
@pass_cli
def keys_show(cli: CliContext, source: str, public_out: Path | None) -> None:
    """Print the key id of a public or private key file, or of a key in a PKCS#11 token
    (a pkcs11: URI); never the key itself."""
    if is_token_uri(source):
        from mirror.transferset.token import load_token_key

        key = load_token_key(source)
        _show(cli, key.source, "token", key.public, public_out)
        return
    path = Path(source)
    if not path.is_file():
        raise NotFound(f"key file {path} does not exist")
    try:
        public, kind = load_public_key(path), "public"
    except ConfigError:
        if b"PRIVATE KEY" not in path.read_bytes()[:4096]:
            raise ConfigError(
                f"{path} holds neither an Ed25519 public key nor an Ed25519 private key"
            ) from None
        public, kind = load_signing_key(path).public, "private"
    _show(cli, str(path), kind, public, public_out)


def _show(
    cli: CliContext, name: str, kind: str, public: PublicKey, public_out: Path | None
) -> None:
    if public_out is not None:
        write_public_key(public_out, public)
    cli.emit(
        {
            "path": name,
            "kind": kind,
            "key_id": public.key_id,
            "public_key": str(public_out) if public_out else None,
        },
        f"{name}: {'private key in a token' if kind == 'token' else kind + ' key'} "
        f"{public.key_id}" + (f" (public key written to {public_out})" if public_out else ""),
    )
