"""`mirror target check`: what the configured object store really does, one row per check."""

from __future__ import annotations

import click

from mirror.cli.common import CliContext, pass_cli
from mirror.errors import MirrorError

MARKS = {"ok": "ok", "warn": "WARN", "fail": "FAIL", "skipped": "-"}


@click.group("target")
def target_group() -> None:
    """The air-gapped side's object store: probe what it really does."""


@target_group.command("check")
@pass_cli
def check_command(cli: CliContext) -> None:
    """Probe the object store: credentials and bucket, clock skew, conditional writes,
    checksums enforced, multipart list and abort, presigned GET.

    Writes only under PREFIX/.mirror-probe/ and removes what it wrote. Exits with the
    code of the first failed check (0 when none failed; warnings do not fail).
    """
    from mirror.airgap.s3.credentials import open_object_store
    from mirror.airgap.s3.probe import run_checks

    target = cli.settings.target
    store = open_object_store(target)
    checks = run_checks(store, ca_bundle=target.ca_bundle)
    width = max(len(check.name) for check in checks)
    lines = [f"{check.name:<{width}}  {MARKS[check.status]:<4}  {check.detail}" for check in checks]
    document = {"target": store.where, "checks": [check.as_dict() for check in checks]}
    failed = next((check for check in checks if check.status == "fail"), None)
    if failed is None:
        cli.emit({**document, "ok": True}, lines)
        return
    if not cli.as_json:
        for line in lines:
            click.echo(line)
    error = failed.error or MirrorError(failed.detail)
    error.document = {**document, "ok": False}
    raise error
