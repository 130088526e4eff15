"""`mirror transfer pack|verify|import|ack|push`: carry versions across the air gap.

boto3 and the transfer modules are imported inside the commands, so every other
command starts without paying for them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from mirror.cli.common import DOMAIN, SIZE, CliContext, pass_cli
from mirror.config import Settings
from mirror.errors import ConfigError
from mirror.units import format_size

if TYPE_CHECKING:
    from mirror.airgap.importer import ImportResult
    from mirror.airgap.s3.objectstore import ObjectStore
    from mirror.cli.preflight import Purpose
    from mirror.cli.progress import ByteTask
    from mirror.outbound.delta import Choice
    from mirror.outbound.pack import PackResult
    from mirror.transferset.keys import PublicKey


@contextlib.contextmanager
def _progress(
    cli: CliContext, *phases: str, total: int | None = None
) -> Iterator[tuple[ByteTask | None, ...]]:
    """One byte counter (MiB of `total`) per phase on stderr for a person at a terminal;
    Nones (no output) otherwise."""
    if not cli.interactive:
        yield tuple(None for _ in phases)
        return
    from mirror.cli.progress import ByteProgress

    with ByteProgress() as progress:
        yield tuple(progress.phase(phase, total) for phase in phases)


def _trusted(settings: Settings, keys: tuple[Path, ...]) -> dict[str, PublicKey]:
    """The keys whose sets are accepted, through the command's preflight (`verify`)."""
    from mirror.cli import preflight

    return preflight.transfer_keys(settings, preflight.Given(trusted_keys=keys))


def _require(cli: CliContext, purpose: Purpose, keys: tuple[Path, ...] = ()) -> None:
    """The command's preflight (`mirror.cli.preflight`), `keys` given by --trusted-key."""
    from mirror.cli.preflight import Given, require

    require(cli.settings, purpose, Given(trusted_keys=keys))


def _object_store(settings: Settings) -> ObjectStore:
    from mirror.airgap.s3.credentials import open_object_store

    return open_object_store(settings.target)


_SITE_OPTION = click.option(
    "--site",
    metavar="NAME",
    default=None,
    help="The air-gapped site ([[sites]] name; may be left out when only one is configured).",
)


def _trusted_key_option(function: Callable[..., Any]) -> Callable[..., Any]:
    """`--trusted-key FILE.pub` (repeatable; `--key`, its old name, still works)."""
    path = click.Path(dir_okay=False, path_type=Path)
    function = click.option("--key", "keys", multiple=True, type=path, hidden=True)(function)
    return click.option(
        "--trusted-key",
        "keys",
        multiple=True,
        type=path,
        metavar="FILE.pub",
        help="A public key whose transfer sets are accepted: the connected side's "
        "transfer.pub (repeatable) [target.transfer_keys].",
    )(function)


@click.group("transfer")
def transfer_group() -> None:
    """Signed transfer sets: pack, verify, import, acknowledge, push, send, receive."""


@transfer_group.command("pack")
@click.argument("out", required=False, type=click.Path(file_okay=False, path_type=Path))
@click.option("--domain", type=DOMAIN, default=None, help="Only this domain.")
@click.option("--all", "include_all", is_flag=True, help="Every version, delivered or not.")
@click.option("--max-size", type=SIZE, default=None, help="Largest part [transfer.max_size].")
@click.option("--full", is_flag=True, help="Whole bundles only, never deltas.")
@click.option(
    "--from-set",
    type=click.IntRange(min=1),
    metavar="N",
    default=None,
    help="The versions set N carried, again (with --full: what an import refusing a delta says).",
)
@click.option(
    "--dry-run", is_flag=True, help="Say what would go and how (deltas, sizes); write nothing."
)
@click.option(
    "--with-tool",
    "with_tool",
    metavar="PATH|auto",
    default=None,
    help="Also carry the mirror tool: a mirror-tool-VERSION.tar, or `auto` to build one now.",
)
@_SITE_OPTION
@pass_cli
def transfer_pack(
    cli: CliContext,
    out: Path | None,
    domain: str | None,
    include_all: bool,
    max_size: int | None,
    full: bool,
    from_set: int | None,
    dry_run: bool,
    with_tool: str | None,
    site: str | None,
) -> None:
    """Write a signed transfer set of the versions not yet delivered into OUT.

    A version whose base the air-gapped side holds goes as a delta when that is small
    enough (transfer.delta_max_ratio); OUT may be left out with --dry-run."""
    from mirror.outbound import pack as packing

    chosen = packing.Selection(domain, include_all, full, from_set, site)
    if dry_run:
        if with_tool is not None:
            raise ConfigError("--with-tool cannot be combined with --dry-run")
        _emit_pack(cli, packing.dry_run(cli.app, out, chosen, max_size=max_size), with_tool=False)
        return
    if out is None:
        raise ConfigError("missing argument OUT", hint="name the set's directory, or --dry-run")
    _require(cli, "pack")
    with contextlib.ExitStack() as stack:
        tool = _tool(cli, stack, with_tool, out)
        (on_progress,) = stack.enter_context(_progress(cli, "packing"))
        result = packing.pack(
            cli.app,
            out,
            chosen,
            max_size=max_size,
            on_progress=on_progress,
            on_total=on_progress.set_total if on_progress else None,
            tool=tool,
        )
    _emit_pack(cli, result, with_tool=tool is not None)


def _tool(
    cli: CliContext, stack: contextlib.ExitStack, with_tool: str | None, out: Path
) -> Path | None:
    """The tool artefact `--with-tool` names (or builds, until `stack` closes), or None."""
    if with_tool is None:
        return None
    from mirror.outbound.pack import signing_key_from
    from mirror.outbound.selfbundle import tool_for_pack

    key = signing_key_from(cli.app)
    return stack.enter_context(tool_for_pack(with_tool, key, out.absolute().parent))


def _emit_pack(cli: CliContext, result: PackResult, *, with_tool: bool) -> None:
    document = {"nothing": result.nothing, **result.as_dict()}
    if result.nothing:
        cli.emit(
            document,
            f"nothing to pack for site {result.site}: every version it takes was packed or "
            "delivered"
            + ("; the tool is not carried alone (a set needs a version)" if with_tool else ""),
        )
        return
    size = f"{format_size(result.total_bytes)} in {result.part_count} part(s)"
    if result.dry_run:
        lines = [
            f"would pack set {result.sequence} for site {result.site}: "
            f"{len(result.items)} version(s), {size}"
        ]
        lines += [_choice_line(choice) for choice in result.versions]
        from mirror.export import sitecheck

        lines += sitecheck.pack_lines(cli.app, [item.ref for item in result.items])
        lines.append("nothing was written (--dry-run)")
        cli.emit(document, lines)
        return
    lines = [
        f"packed set {result.sequence} for site {result.site} into {result.path}: "
        f"{len(result.items)} version(s), "
        f"{size}, signed by key {result.key_id}"
    ]
    for item in result.items:
        how = f"delta against {item.delta.base_version}" if item.delta else "full"
        lines.append(f"  {item.ref.domain} {item.ref.label}  {how}  {format_size(item.ref.size)}")
    if result.tool:
        lines.append(f"  with the mirror tool {result.tool}")
    cli.emit(document, lines)


def _choice_line(choice: Choice) -> str:
    offered = choice.offered.ref
    head = f"  {offered.domain} {offered.label}  full {format_size(offered.size)}"
    delta = choice.delta
    if delta is None:
        return f"{head}  no delta: {choice.reason}"
    base = choice.base.label if choice.base else "?"
    changes = (
        f"against {base}: {delta.changed} changed, {delta.added} added, {delta.removed} removed"
    )
    if not choice.as_delta:
        return f"{head}  delta {format_size(delta.size)} {changes}  goes full: {choice.reason}"
    share = 100 * choice.saving // max(offered.size, 1)
    return (
        f"{head}  delta {format_size(delta.size)} {changes}  "
        f"saves {format_size(choice.saving)} ({share}%)"
    )


@transfer_group.command("verify")
@click.argument("set_dir", metavar="DIR", type=click.Path(file_okay=False, path_type=Path))
@_trusted_key_option
@pass_cli
def transfer_verify(cli: CliContext, set_dir: Path, keys: tuple[Path, ...]) -> None:
    """Check the signature, the chain fields and every hash, offline."""
    from mirror.transferset.reader import set_bytes, verify_set

    _require(cli, "verify", keys)
    trusted = _trusted(cli.settings, keys)
    with _progress(cli, "verifying", total=set_bytes(set_dir)) as (on_progress,):
        verified = verify_set(set_dir, trusted, on_progress=on_progress)
    cli.emit(verified.as_dict(), verified.lines())


@transfer_group.command("import")
@click.argument("set_dir", metavar="DIR", type=click.Path(file_okay=False, path_type=Path))
@click.option(
    "--allow-replay", is_flag=True, help="Import a set already imported, or an older one."
)
@click.option(
    "--skip-imported",
    is_flag=True,
    help="A set already imported here (the same manifest) exits 0, changing nothing.",
)
@click.option("--promote", is_flag=True, help="Make each domain's newest imported version current.")
@click.option(
    "--receipt",
    "receipt_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Where to write the receipt [DIR/receipt.json].",
)
@_trusted_key_option
@pass_cli
def transfer_import(
    cli: CliContext,
    set_dir: Path,
    allow_replay: bool,
    skip_imported: bool,
    promote: bool,
    receipt_path: Path | None,
    keys: tuple[Path, ...],
) -> None:
    """Verify a transfer set, then publish it into the object store (air-gapped side).

    A set this bucket already imported is refused (exit 5) unless --allow-replay imports it
    again; --skip-imported makes it a success that changes nothing, so a job that imports
    whatever set is in place can run again safely."""
    from mirror.airgap.publish import import_bytes
    from mirror.airgap.records import recorded_import

    _require(cli, "import", keys)
    trusted = _trusted(cli.settings, keys)
    store = _object_store(cli.settings)
    run = _importing(cli.settings, store, set_dir, trusted, allow_replay, skip_imported, promote)
    with _progress(cli, "importing", total=import_bytes(set_dir)) as (on_progress,):
        result = recorded_import(store, lambda: run(on_progress, receipt_path))
    cli.emit(result.as_dict(), _import_lines(result, store.bucket))


def _importing(
    settings: Settings,
    store: ObjectStore,
    set_dir: Path,
    trusted: dict[str, PublicKey],
    allow_replay: bool,
    skip_imported: bool,
    promote: bool,
) -> Callable[[ByteTask | None, Path | None], ImportResult]:
    """The import `transfer import` runs, given where its progress and receipt go: the
    options as given, the receipt signed with the configured key."""
    from mirror.airgap import chart
    from mirror.airgap.importer import import_set
    from mirror.cli.preflight import receipt_signing_key
    from mirror.transferset.keys import load_trusted_keys

    def run(on_progress: ByteTask | None, receipt_path: Path | None) -> ImportResult:
        return import_set(
            store,
            set_dir,
            trusted,
            allow_replay=allow_replay,
            skip_imported=skip_imported,
            promote=chart.promote if promote else None,
            receipt_key=receipt_signing_key(settings),
            receipt_path=receipt_path,
            on_progress=on_progress,
            on_verify_progress=on_progress,
            work_dir=settings.target.work_dir,
            site=settings.target.site,
            receipt_keys=load_trusted_keys(settings.target.receipt_keys),
        )

    return run


def _import_lines(result: ImportResult, bucket: str) -> list[str]:
    if result.already_imported:
        lines = [f"set {result.sequence} from {result.source_id} is already in bucket {bucket}"]
        lines += [f"note: {note}" for note in result.notes]
        if result.receipt is not None:
            lines.append(f"receipt {result.receipt} (from its first import)")
        return lines
    lines = [f"imported set {result.sequence} from {result.source_id} into bucket {bucket}:"]
    lines += [f"  {i.ref.domain} {i.ref.label}  {i.status}  {i.object}" for i in result.items]
    lines += [f"  promoted {d} {v}" for d, v in result.promoted]
    lines += [f"note: {note}" for note in result.notes]
    signed = f"signed by key {result.receipt_signed_by}" if result.receipt_signed_by else "unsigned"
    lines.append(
        f"receipt {result.receipt} ({signed}): carry it back and run `mirror transfer ack`"
    )
    return lines


@transfer_group.command("ack")
@click.argument("receipt", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--accept-unsigned",
    is_flag=True,
    help="Believe a receipt that no trusted key signed (logged, and recorded on the set).",
)
@pass_cli
def transfer_ack(cli: CliContext, receipt: Path, accept_unsigned: bool) -> None:
    """Mark the versions a signed receipt lists as delivered, so the next pack leaves them out.

    The receipt must be signed by a key in target.trusted_keys (the air-gapped side's
    receipt.pub)."""
    from mirror.outbound.ack import ack

    _require(cli, "ack")
    result = ack(cli.app, receipt, accept_unsigned=accept_unsigned)
    lines = [f"site {result.site} set {result.sequence}: receipt {result.signature}"]
    lines += [f"  delivered {d} {v}" for d, v in result.marked]
    lines += [f"  already delivered {d} {v}" for d, v in result.already]
    if not result.complete:
        lines.append("note: the receipt does not list every version of the set")
    cli.emit(result.as_dict(), lines)


@transfer_group.command("push")
@click.option("--domain", type=DOMAIN, default=None, help="Only this domain.")
@click.option("--all", "include_all", is_flag=True, help="Every version, delivered or not.")
@click.option("--max-size", type=SIZE, default=None, help="Largest part [transfer.max_size].")
@click.option("--allow-replay", is_flag=True, help="Accept a set the target already imported.")
@click.option("--promote", is_flag=True, help="Make each domain's newest pushed version current.")
@_SITE_OPTION
@pass_cli
def transfer_push(
    cli: CliContext,
    domain: str | None,
    include_all: bool,
    max_size: int | None,
    allow_replay: bool,
    promote: bool,
    site: str | None,
) -> None:
    """Pack, import and acknowledge in one step where the target is reachable."""
    from mirror.airgap import chart
    from mirror.outbound.push import push

    _require(cli, "push")
    hook = chart.promote if promote else None
    store = _object_store(cli.settings)
    with _progress(cli, "pushing") as (on_progress,):
        result = push(
            cli.app,
            store,
            domain=domain,
            include_all=include_all,
            site=site,
            max_size=max_size,
            allow_replay=allow_replay,
            promote=hook,
            on_progress=on_progress,
        )
    if result.imported is None:
        cli.emit(result.as_dict(), "nothing to push: every version was packed or delivered")
        return
    imported = result.imported
    lines = [f"pushed set {imported.sequence} into bucket {store.bucket}:"]
    lines += [f"  {i.ref.domain} {i.ref.label}  {i.status}" for i in imported.items]
    lines += [f"  promoted {d} {v}" for d, v in imported.promoted]
    lines += [f"note: {note}" for note in imported.notes]
    cli.emit(result.as_dict(), lines)


@transfer_group.command("lost")
@click.argument("sequence", metavar="SET", type=click.IntRange(min=1))
@_SITE_OPTION
@pass_cli
def transfer_lost(cli: CliContext, sequence: int, site: str | None) -> None:
    """Mark set SET of a site lost: its versions wait again for the next pack for the site.

    Nothing packed afterwards uses them as a delta base there; other sites are untouched."""
    from mirror.outbound.lost import mark_lost

    result = mark_lost(cli.app, site, sequence)
    count = len(result.waiting_again)
    state = "was already marked lost" if result.already else "marked lost"
    cli.emit(
        result.as_dict(),
        f"site {result.site} set {sequence} {state}: {count} version(s) wait again; "
        f"run `mirror transfer pack --site {result.site} OUT` to carry them",
    )


@transfer_group.command("resend")
@click.argument("sequence", metavar="SET", type=click.IntRange(min=1))
@click.argument("out", type=click.Path(file_okay=False, path_type=Path))
@_SITE_OPTION
@pass_cli
def transfer_resend(cli: CliContext, sequence: int, out: Path, site: str | None) -> None:
    """Copy set SET of a site into OUT exactly as it was packed (same sequence, same bytes).

    For a disk that was damaged on the way; the copy is checked against the signed manifest."""
    from mirror.outbound.lost import resend

    result = resend(cli.app, site, sequence, out)
    cli.emit(
        result.as_dict(),
        f"copied site {result.site} set {sequence} into {result.path}: the same "
        f"{format_size(result.total_bytes)}, manifest {result.manifest_sha256[:16]}…, verified",
    )
