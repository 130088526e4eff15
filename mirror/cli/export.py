"""`export run` (one whole cycle into the store) and the raw API steps start, status, bundle."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

import click

from mirror.cli.common import DOMAIN, CliContext, pass_cli
from mirror.cli.preflight import require
from mirror.errors import ConfigError
from mirror.export.outcome import ExportOutcome, RunEvent
from mirror.export.runner import run_export
from mirror.timestamps import rfc3339, rfc3339_or_none
from mirror.units import format_size
from mirror.vendorapi.client import BundleLink, ExportJob, VendorClient

_VENDOR_VERSION = click.option(
    "--vendor-version",
    "version",
    metavar="V",
    help="The vendor's export version to ask for (not a mirror version label).",
)
_VENDOR_VERSION_ALIAS = click.option(
    "--version", "version", metavar="V", hidden=True, help="Deprecated: --vendor-version."
)


@click.group("export")
def export() -> None:
    """Static exports from the vendor: the whole cycle, or its raw API steps."""


@export.command("run")
@click.argument("domain", type=DOMAIN)
@_VENDOR_VERSION
@_VENDOR_VERSION_ALIAS
@click.option(
    "--path", "paths", metavar="P", multiple=True, help="Only this page path (repeatable)."
)
@click.option(
    "--adhoc",
    is_flag=True,
    help="Export a domain that is not in [[exports]] (once; it is not scheduled).",
)
@pass_cli
def export_run(
    cli: CliContext, domain: str, version: str | None, paths: tuple[str, ...], adhoc: bool
) -> None:
    """Start, poll, download, check and store one export of DOMAIN (resumes an unfinished one).

    Exit 0 stored or unchanged, 1 the vendor job failed, 5 the bundle failed its checks,
    75 busy or deferred (run again later; an interrupted run resumes where it stopped).
    """
    configured = {export.domain for export in cli.settings.exports}
    if domain not in configured and not adhoc:
        source = cli.settings.source or "the embedded defaults"
        raise ConfigError(
            f"{domain} is not an [[exports]] domain in {source}",
            hint="add it there, or pass --adhoc to export it once anyway",
        )
    require(cli.settings, "export")
    cancel = threading.Event()
    with (
        VendorClient.from_settings(cli.settings) as client,
        _cancel_on_signals(cancel),
        _progress(cli, domain) as on_event,
    ):
        outcome = run_export(
            cli.app,
            client,
            domain,
            cancel=cancel,
            on_event=on_event,
            version=version,
            paths=list(paths) if paths else None,
        )
    cli.emit(outcome.as_dict(), describe_outcome(outcome))


@export.command("start")
@click.argument("domain", type=DOMAIN)
@_VENDOR_VERSION
@_VENDOR_VERSION_ALIAS
@click.option(
    "--path", "paths", metavar="P", multiple=True, help="Only this page path (repeatable)."
)
@pass_cli
def export_start(cli: CliContext, domain: str, version: str | None, paths: tuple[str, ...]) -> None:
    """Start a vendor export job and print its id (raw step: no run is recorded)."""
    require(cli.settings, "api")
    with VendorClient.from_settings(cli.settings) as client:
        job = client.start_export(domain, version=version, paths=list(paths) if paths else None)
    cli.emit(job_document(job), f"started export job {job.job_id} for {domain} ({job.status})")


@export.command("status")
@click.argument("job_id")
@pass_cli
def export_status(cli: CliContext, job_id: str) -> None:
    """Read a vendor export job's state, progress and page count."""
    require(cli.settings, "api")
    with VendorClient.from_settings(cli.settings) as client:
        job = client.export_status(job_id)
    lines = [f"export job {job.job_id}: {job.status}"]
    if job.progress is not None:
        lines.append(f"  progress {job.progress:g}%")
    if job.page_count is not None:
        lines.append(f"  pages    {job.page_count}")
    if job.error:
        lines.append(f"  error    {job.error}")
    if job.bundle is not None:
        lines.extend(link_lines(job.bundle))
    cli.emit(job_document(job), lines)


@export.command("bundle")
@click.argument("job_id")
@pass_cli
def export_bundle(cli: CliContext, job_id: str) -> None:
    """Ask for a (fresh) presigned link to a completed job's bundle and print it."""
    require(cli.settings, "api")
    with VendorClient.from_settings(cli.settings) as client:
        link = client.export_bundle(job_id)
    cli.emit(link_document(link), [f"bundle of export job {link.job_id}:", *link_lines(link)])


# --- output -----------------------------------------------------------------------------------


def describe_outcome(outcome: ExportOutcome) -> list[str]:
    ref = outcome.ref
    if outcome.state == "stored":
        head = (
            f"{ref.domain}: stored new version {ref.label} "
            f"({format_size(ref.size)} {ref.format}, {outcome.file_count} files)"
        )
    else:
        head = f"{ref.domain}: unchanged, same content as version {ref.label}; nothing new stored"
    resumed = ", resumed" if outcome.resumed else ""
    return [
        head,
        f"  sha256  {ref.sha256}",
        f"  file    {outcome.blob_path}",
        f"  job     {outcome.job_id} (run {outcome.run_id}{resumed})",
        *([f"  site    {outcome.site}"] if outcome.site else []),
    ]


def job_document(job: ExportJob) -> dict[str, Any]:
    document: dict[str, Any] = {
        "job_id": job.job_id,
        "status": job.status,
        "progress": job.progress,
        "page_count": job.page_count,
        "error": job.error,
    }
    if job.bundle is not None:
        document["bundle"] = link_document(job.bundle)
    return document


def link_document(link: BundleLink) -> dict[str, Any]:
    return {
        "job_id": link.job_id,
        "bundle_url": link.url,
        "size_bytes": link.size_bytes,
        "expires_at": rfc3339_or_none(link.expires_at),
    }


def link_lines(link: BundleLink) -> list[str]:
    lines = [f"  url      {link.url}"]
    if link.size_bytes is not None:
        lines.append(f"  size     {format_size(link.size_bytes)} ({link.size_bytes} bytes)")
    if link.expires_at is not None:
        lines.append(f"  expires  {rfc3339(link.expires_at)}")
    return lines


# --- terminal niceties ------------------------------------------------------------------------


@contextlib.contextmanager
def _progress(cli: CliContext, domain: str) -> Iterator[Callable[[RunEvent], None] | None]:
    """A live display only for a person at a terminal (never with --json, -q or a pipe)."""
    if not cli.interactive:
        yield None
        return
    from mirror.cli.exportprogress import ExportProgress

    with ExportProgress(domain) as display:
        yield display.update


@contextlib.contextmanager
def _cancel_on_signals(cancel: threading.Event) -> Iterator[None]:
    """SIGTERM and the first Ctrl-C stop the run cleanly (state saved); a second Ctrl-C aborts."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, _frame: FrameType | None) -> None:
        if signum == signal.SIGINT and cancel.is_set():
            raise KeyboardInterrupt
        cancel.set()

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
