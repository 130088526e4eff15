"""Settings of a simulator run (fixed at start, but for `link_ttl`) and faults (changeable while
it runs)."""

from __future__ import annotations

import dataclasses
import secrets
from dataclasses import dataclass, field
from typing import Any

MALICIOUS_KINDS = frozenset(
    {"traversal", "absolute", "symlink", "hardlink", "bomb", "device", "case_twins"}
)
DAMAGE_KINDS = frozenset({"truncated", "broken_links"})
AGENT_OUTCOMES = frozenset({"pr", "no_changes", "failed", "archived"})
DEFAULT_PROJECT_DOMAIN = "docs.sim.test"


def _new_key() -> str:
    return "mint_sim_" + secrets.token_hex(12)


@dataclass
class SimConfig:
    """How the simulated vendor behaves; every field has a usable default.

    The site: `pages` pages of `page_size` bytes, or with `site_size` (bytes) a realistic
    site of about that size (HTML pages of 5-60 KiB, CSS, JS and images; mirror.sim.tree).
    Each export changes `changes_per_export` pages, or with `change_share` (0 to 1) that
    share of the site's pages. `link_ttl` is read as each link is issued: changed while the
    simulator runs, it applies to the links issued after.

    `reuse_bundles` (benchmarks): a job whose export changes nothing gets the archive an
    earlier job of the same site made (its bytes, mtime included), so the vendor's packaging
    (45 s for a 500 MiB realistic site) is on no client's clock.
    """

    key: str = field(default_factory=_new_key)
    project_id: str = "proj_sim"
    queue_seconds: float = 0.2
    run_seconds: float = 0.6
    link_ttl: float = 300.0
    pages: int = 40
    page_size: int = 2048
    bundle_size: int | None = None
    changes_per_export: int = 2
    change_share: float | None = None
    site_size: int | None = None
    one_active_job: bool = True
    max_starts_per_hour: int = 0
    seed: int = 0
    reuse_bundles: bool = False

    def __repr__(self) -> str:
        fields = ", ".join(
            f"{f.name}={getattr(self, f.name)!r}"
            for f in dataclasses.fields(self)
            if f.name != "key"
        )
        return f"SimConfig(key=<redacted>, {fields})"


@dataclass
class Faults:
    """Injected misbehaviour; the server reads it on every request, so it may change at any time.

    The hostile-vendor switches: `newer_revision` (statuses carry the link in both flows,
    POST .../bundle answers 404), `change_object_on_range` (that many ranged downloads
    first replace the job's archive with another of the same size), `ignore_if_range`
    (serve the range even when If-Range no longer matches), `bundle_url_override` (the
    bundleUrl handed out instead of a real link), `redirect_downloads_to` (downloads
    answer 302 to it), `trickle_bytes_per_second` for `trickles_remaining` downloads,
    `huge_body_bytes` (API answers become a JSON body that long, streamed, with
    `huge_body_status`), `job_id_override` (the jobId a start answers), `never_settle`
    (jobs stay running), `damaged_domains` (domain -> "truncated": the bundle holds a third
    of the pages the job's `pageCount` reports; "broken_links": pages link to a page and an
    image that the bundle does not hold), `page_count_reported` (the `pageCount` every answer
    reports instead of the job's own, as big as a vendor may send).

    `hold_jobs` is the test's hand on the vendor's clock: while it is set no job ends (export
    jobs stay queued, then running; agent jobs stay active; a second start of a held job's
    domain answers 409), and once cleared each job ends as its timing says (at once when its
    time has passed). A caller that must see a job before it ends holds it, looks, and lets
    go: no job is so short that a busy machine misses it, none so long that a test waits.
    """

    error_rate: float = 0.0
    error_status: int = 503
    rate_limit_next: int = 0
    retry_after: str = "1"
    cut_after_bytes: int | None = None
    page_count_reported: int | None = None
    cuts_remaining: int = 0
    ignore_range: bool = False
    fail_domains: set[str] = field(default_factory=set)
    malicious_domains: dict[str, str] = field(default_factory=dict)
    damaged_domains: dict[str, str] = field(default_factory=dict)
    not_enabled_domains: set[str] = field(default_factory=set)
    bad_request_domains: set[str] = field(default_factory=set)
    project_flow_bundle_in_status: bool = True
    global_flow_bundle_in_status: bool = False
    omit_size: bool = False
    progress_as_string: bool = False
    unknown_state: str | None = None
    newer_revision: bool = False
    change_object_on_range: int = 0
    ignore_if_range: bool = False
    bundle_url_override: str | None = None
    redirect_downloads_to: str | None = None
    trickle_bytes_per_second: int = 0
    trickles_remaining: int = 0
    huge_body_bytes: int = 0
    huge_body_status: int = 200
    job_id_override: str | None = None
    never_settle: bool = False
    hold_jobs: bool = False

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready copy: sets become sorted lists."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, set):
                value = sorted(value)
            elif isinstance(value, dict):
                value = dict(value)
            out[f.name] = value
        return out

    def update(self, changes: dict[str, Any]) -> None:
        """Set the given fields after checking all of them; raises ValueError and sets nothing
        when any name or value is wrong."""
        checked = {name: _check_fault(name, value) for name, value in changes.items()}
        for name, value in checked.items():
            setattr(self, name, value)


_FLOAT_FIELDS = {"error_rate"}
_INT_FIELDS = {
    "error_status",
    "rate_limit_next",
    "cuts_remaining",
    "change_object_on_range",
    "trickle_bytes_per_second",
    "trickles_remaining",
    "huge_body_bytes",
    "huge_body_status",
}
_BOOL_FIELDS = {
    "ignore_range",
    "project_flow_bundle_in_status",
    "global_flow_bundle_in_status",
    "omit_size",
    "progress_as_string",
    "newer_revision",
    "ignore_if_range",
    "never_settle",
    "hold_jobs",
}
_OPTIONAL_TEXT_FIELDS = {
    "unknown_state",
    "bundle_url_override",
    "redirect_downloads_to",
    "job_id_override",
}
_SET_FIELDS = {"fail_domains", "not_enabled_domains", "bad_request_domains"}


def _check_fault(name: str, value: Any) -> Any:
    if name in _FLOAT_FIELDS:
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
            raise ValueError(f"{name} must be a number from 0 to 1")
        return float(value)
    if name in _INT_FIELDS:
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{name} must be a non-negative integer")
        return value
    if name in _BOOL_FIELDS:
        if not isinstance(value, bool):
            raise ValueError(f"{name} must be true or false")
        return value
    if name in _SET_FIELDS:
        if not isinstance(value, list | set | tuple) or not all(isinstance(v, str) for v in value):
            raise ValueError(f"{name} must be a list of domains")
        return set(value)
    if name == "retry_after":
        if not isinstance(value, str | int) or isinstance(value, bool):
            raise ValueError("retry_after must be seconds or an HTTP date")
        return str(value)
    if name in ("cut_after_bytes", "page_count_reported"):
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or value < 0
        ):
            raise ValueError(f"{name} must be null or a non-negative integer")
        return value
    if name in _OPTIONAL_TEXT_FIELDS:
        if value is not None and not isinstance(value, str):
            raise ValueError(f"{name} must be null or a string")
        return value
    kinds = {"malicious_domains": MALICIOUS_KINDS, "damaged_domains": DAMAGE_KINDS}.get(name)
    if kinds is not None:
        if not isinstance(value, dict) or not all(
            isinstance(k, str) and v in kinds for k, v in value.items()
        ):
            raise ValueError(f"{name} must map domains to one of " + ", ".join(sorted(kinds)))
        return dict(value)
    raise ValueError(f"unknown fault: {name}")
