"""`chart refresh`: render values files again where needed and run the change hook.

Promises: a values file is rewritten only when its link is about to expire, its
version is no longer current, or it is missing; `chart.on_change` runs (no
shell) only for files that were rewritten; every domain is handled even when a
hook fails, and then RefreshFailed names the first failure.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shlex
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from mirror.airgap.chart.bucket import BucketStore, current_version
from mirror.airgap.chart.values import (
    isoformat,
    link_target,
    read_values_file,
    render_values,
    write_values,
)
from mirror.airgap.records import record_links
from mirror.config import ChartSettings, TargetSettings
from mirror.errors import ConfigError, NotFound, OperationFailed
from mirror.links import link_expiry
from mirror.timestamps import utcnow
from mirror.units import format_duration

log = logging.getLogger(__name__)

HOOK_OUTPUT_LIMIT = 200

Clock = Callable[[], datetime]


@dataclass(frozen=True)
class RefreshResult:
    domain: str
    path: Path
    version: str
    action: Literal["rendered", "fresh"]
    reason: str
    expires_at: datetime | None
    hook_exit: int | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "domain": self.domain,
            "path": str(self.path),
            "version": self.version,
            "action": self.action,
            "reason": self.reason,
            "expires_at": isoformat(self.expires_at) if self.expires_at else None,
            "hook_exit": self.hook_exit,
        }

    def line(self) -> str:
        verb = "wrote" if self.action == "rendered" else "kept"
        return f"{verb} {self.path}: {self.domain} {self.version} ({self.reason})"


def values_paths(template: str, domains: list[str]) -> dict[str, Path]:
    """Where each domain's values go; ConfigError if several share one file."""
    if not template:
        raise ConfigError("chart.values_path is not set; set it to the values file to refresh")
    if not domains:
        raise ConfigError("no domain to refresh: pass --domain D or list [[exports]] domains")
    if "{domain}" not in template and len(domains) > 1:
        raise ConfigError(
            f"chart.values_path {template!r} has no {{domain}} but {len(domains)} domains "
            "would share it; add {domain} to the path or pass one --domain"
        )
    return {domain: Path(template.replace("{domain}", domain)) for domain in domains}


def refresh_reason(
    path: Path,
    domain: str,
    version: str,
    target: TargetSettings,
    refresh_before: float,
    now: datetime,
) -> str | None:
    """Why the values file at `path` must be rendered again, or None if it is still good."""
    if not path.exists():
        return "missing"
    try:
        values = read_values_file(path)
        link = link_target(values.bundle_url)
        expires_at = link_expiry(values.bundle_url)
    except ConfigError:
        return "unreadable"
    if (link.domain, link.version) != (domain, version) or values.version not in (None, version):
        return f"version {values.version or link.version} -> {version}"
    if target.url_mode in ("plain", "serve"):
        if expires_at is not None:
            return f"url_mode is now {target.url_mode}"
        return None
    if expires_at is None:
        return "url_mode is now presigned"
    left = (expires_at - now).total_seconds()
    if left <= 0:
        return f"link expired {format_duration(-left)} ago"
    if left < refresh_before:
        return f"link expires in {format_duration(left)}"
    return None


def refresh_values(
    store: BucketStore,
    target: TargetSettings,
    chart: ChartSettings,
    domains: list[str],
    *,
    now: Clock = utcnow,
    served_at: str = "",
) -> list[RefreshResult]:
    """Render each domain's values file again where needed and run chart.on_change for it.

    Every domain is handled even when a hook fails; then OperationFailed names
    the first failure (its files were written all the same).
    """
    paths = values_paths(chart.values_path, domains)
    hook = shlex.split(chart.on_change) if chart.on_change.strip() else []
    results: list[RefreshResult] = []
    failures: list[str] = []
    for domain, path in paths.items():
        version = current_version(store, domain)
        reason = refresh_reason(path, domain, version, target, chart.refresh_before, now())
        if reason is None:
            expires_at = _existing_expiry(path)
            results.append(RefreshResult(domain, path, version, "fresh", "still valid", expires_at))
            continue
        planned = RefreshResult(domain, path, version, "rendered", reason, None)
        result, failure = _render(store, target, hook, planned, served_at)
        results.append(result)
        if failure is not None:
            failures.append(failure)
    record_links(store, target.url_mode, results)
    if failures:
        raise RefreshFailed(failures[0], results=results)
    return results


def _render(
    store: BucketStore,
    target: TargetSettings,
    hook: list[str],
    planned: RefreshResult,
    served_at: str,
) -> tuple[RefreshResult, str | None]:
    """Write the `planned` values file and run the hook on it; the result and the hook's
    failure, if any."""
    domain, path, version = planned.domain, planned.path, planned.version
    values = render_values(store, target, domain, version, served_at=served_at)
    write_values(values, path)
    log.info("values rendered", extra={"domain": domain, "version": version, "path": str(path)})
    hook_exit: int | None = None
    failure: str | None = None
    if hook:
        hook_exit, detail = run_hook(hook, path, domain, version)
        if hook_exit != 0:
            failure = (
                f"chart.on_change ({hook[0]}) exited with {hook_exit} for {domain} "
                f"({path} was written){detail}"
            )
    result = dataclasses.replace(planned, expires_at=values.expires_at, hook_exit=hook_exit)
    return result, failure


class RefreshFailed(OperationFailed):
    """A chart.on_change hook failed; `results` tells what was written anyway."""

    def __init__(self, message: str, *, results: list[RefreshResult]) -> None:
        super().__init__(message)
        self.results = results


def _existing_expiry(path: Path) -> datetime | None:
    try:
        return link_expiry(read_values_file(path).bundle_url)
    except (ConfigError, NotFound):
        return None


def run_hook(command: list[str], path: Path, domain: str, version: str) -> tuple[int, str]:
    """Run chart.on_change (no shell) with the file, domain and version in its environment.

    Returns its exit code (127 when it cannot be started) and a short detail
    from its error output for the message.
    """
    env = dict(os.environ)
    env.update(
        {"MIRROR_VALUES_FILE": str(path), "MIRROR_DOMAIN": domain, "MIRROR_VERSION": version}
    )
    try:
        completed = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    except OSError as exc:
        return 127, f": cannot start it: {exc.strerror}"
    for stream, text in (("stdout", completed.stdout), ("stderr", completed.stderr)):
        if text.strip():
            log.info("chart.on_change %s: %s", stream, text.strip())
    last = completed.stderr.strip().splitlines()[-1:] if completed.stderr.strip() else []
    detail = f": {last[0][:HOOK_OUTPUT_LIMIT]}" if last and completed.returncode else ""
    return completed.returncode, detail
