"""`mirror evidence`: one version's evidence for an accreditor, parsed and printed here
(mirror.airgap.evidence gathers, verifies and writes it)."""

from __future__ import annotations

from pathlib import Path

import click

from mirror.cli.common import DOMAIN, CliContext, pass_cli


@click.command("evidence")
@click.argument("domain", type=DOMAIN)
@click.argument("version")
@click.option(
    "--out",
    required=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Write the evidence into this directory (new, or empty).",
)
@click.option(
    "--with-object",
    is_flag=True,
    help="Also copy the version's object (its bundle) from the bucket, checked as it comes.",
)
@pass_cli
def evidence_command(
    cli: CliContext, domain: str, version: str, out: Path, with_object: bool
) -> None:
    """One version's evidence (digest, provenance, verification record, keys, VERIFY.md).

    Writes into --out DOMAIN VERSION's object digest, its provenance, this site's
    verification record, the public keys that signed them, and VERIFY.md, whose commands
    check them all with openssl, coreutils and python3 only. Both statements are verified
    first (target.transfer_keys, target.receipt_keys): evidence that does not verify is
    never written (exit 5).
    """
    from mirror.airgap.evidence import gather, write_evidence
    from mirror.airgap.s3.credentials import open_object_store
    from mirror.cli.preflight import record_keys, require, transfer_keys

    settings = cli.settings
    require(settings, "chart")
    store = open_object_store(settings.target)
    found = gather(store, domain, version, transfer_keys(settings), record_keys(settings))
    stream = store.open_stream(found.described.object) if with_object else None
    written = write_evidence(found, out, stream)
    document = {**found.as_dict(), "out": str(out), "files": [path.name for path in written]}
    lines = [
        f"{domain} {version}: evidence in {out} ({len(written)} files)",
        f"provenance signed by transfer key {found.transfer_key.key_id}; verification record "
        f"signed by receipt key {found.receipt_key.key_id}",
        f"check it without mirror: {out / 'VERIFY.md'}",
    ]
    cli.emit(document, lines)
