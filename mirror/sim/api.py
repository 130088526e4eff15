"""The vendor's admin API and the simulator's control API, as request -> reply functions.

No sockets here: `SimApi.handle` takes a parsed request and returns a `Reply`; the HTTP layer
(server.py) moves the bytes. Downloads are the one streaming exception and live in server.py.
"""

from __future__ import annotations

import dataclasses
import hmac
import json
import logging
import math
import random
import re
import secrets
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from mirror.sim.config import AGENT_OUTCOMES, DEFAULT_PROJECT_DOMAIN, Faults, SimConfig
from mirror.sim.jobs import AgentJob, ExportJob, ExportView, is_hostname, iso
from mirror.sim.links import LinkIssuer
from mirror.sim.site import BuildCancelled, BundleInfo, SiteSpec, build_bundle, page_count
from mirror.sim.stats import SimStats

log = logging.getLogger("mirror.sim")

RATE_WINDOW = 3600.0
BASE_PATHS = ("", "/docs", "/documentation")
MSG_AUTH = "Invalid or missing admin API key"
MSG_BUSY = "A static export job is already in progress for this deployment"
MSG_NOT_ENABLED = "Static export is not enabled for this organization"


@dataclass
class Reply:
    status: int
    body: bytes = b""
    content_type: str = "application/json"
    headers: list[tuple[str, str]] = field(default_factory=list)


def json_reply(status: int, payload: Any, headers: list[tuple[str, str]] | None = None) -> Reply:
    return Reply(status, json.dumps(payload).encode(), "application/json", headers or [])


def error_reply(status: int, message: str, headers: list[tuple[str, str]] | None = None) -> Reply:
    return json_reply(status, {"error": message}, headers)


@dataclass
class _DomainState:
    revision: int = 0
    exports: int = 0
    last_mtime: int = 0


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    headers: Mapping[str, str]
    body: bytes
    base_url: str
    client_is_loopback: bool = True


_Handler = Callable[["SimApi", Request, dict[str, str]], Reply]
_ROUTES: list[tuple[str, re.Pattern[str], str]] = [
    ("POST", re.compile(r"/v1/static-export/jobs"), "start_global"),
    ("GET", re.compile(r"/v1/static-export/jobs/(?P<job_id>[^/]+)"), "status_global"),
    ("POST", re.compile(r"/v1/static-export/jobs/(?P<job_id>[^/]+)/bundle"), "bundle"),
    ("POST", re.compile(r"/v1/static-export/(?P<project_id>[^/]+)/jobs"), "start_project"),
    (
        "GET",
        re.compile(r"/v1/static-export/(?P<project_id>[^/]+)/jobs/(?P<job_id>[^/]+)"),
        "status_project",
    ),
    ("GET", re.compile(r"/v2/agent/(?P<project_id>[^/]+)/job/(?P<job_id>[^/]+)"), "agent_job"),
]
_CONTROL_ROUTES: list[tuple[str, re.Pattern[str], str]] = [
    ("GET", re.compile(r"/_sim/stats"), "ctl_stats"),
    ("GET", re.compile(r"/_sim/faults"), "ctl_get_faults"),
    ("POST", re.compile(r"/_sim/faults"), "ctl_set_faults"),
    ("POST", re.compile(r"/_sim/publish/(?P<domain>[^/]+)"), "ctl_publish"),
    ("POST", re.compile(r"/_sim/agent-jobs"), "ctl_agent_job"),
    ("POST", re.compile(r"/_sim/expire-links"), "ctl_expire_links"),
    ("GET", re.compile(r"/_sim/bundles/(?P<job_id>[^/]+)"), "ctl_bundle_info"),
]


def _route(
    routes: list[tuple[str, re.Pattern[str], str]], method: str, path: str
) -> tuple[str, dict[str, str]] | Reply:
    allowed: list[str] = []
    for route_method, pattern, name in routes:
        match = pattern.fullmatch(path)
        if match is None:
            continue
        if route_method == method or (route_method == "GET" and method == "HEAD"):
            return name, match.groupdict()
        allowed.extend(("GET", "HEAD") if route_method == "GET" else (route_method,))
    if allowed:
        return error_reply(405, "Method not allowed", [("Allow", ", ".join(sorted(set(allowed))))])
    return error_reply(404, "Not found")


class SimApi:
    """All simulator state: jobs, sites, links, the start budget; thread-safe."""

    def __init__(self, config: SimConfig, faults: Faults, stats: SimStats, workdir: Path) -> None:
        self.config = config
        self.faults = faults
        self.stats = stats
        self.workdir = workdir
        self.links = LinkIssuer()
        self.jobs: dict[str, ExportJob] = {}
        self.agent_jobs: dict[str, AgentJob] = {}
        self.cancel = threading.Event()
        self.fault_lock = threading.Lock()
        self._lock = threading.RLock()
        self._domains: dict[str, _DomainState] = {}
        self._start_times: deque[float] = deque()
        self._rng = random.Random(config.seed)  # noqa: S311
        self._builders: list[threading.Thread] = []
        self._build_slots = threading.Semaphore(2)
        self._reused: dict[SiteSpec, BundleInfo] = {}
        self._reuse_lock = threading.Lock()  # not _lock: a build takes seconds
        self._pr_numbers = iter(range(101, 10**9))

    # ---- entry point -------------------------------------------------------------------

    def handle(self, request: Request) -> Reply:
        """Answer one API or control request."""
        if request.path.startswith("/_sim/"):
            if not request.client_is_loopback:
                return error_reply(403, "Simulator control is loopback only")
            routed = _route(_CONTROL_ROUTES, request.method, request.path)
            if isinstance(routed, Reply):
                return routed
            name, params = routed
            handler: _Handler = getattr(SimApi, name)
            return handler(self, request, params)
        if not self._authorized(request.headers):
            self.stats.count_auth_failure()
            return error_reply(401, MSG_AUTH)
        routed = _route(_ROUTES, request.method, request.path)
        if isinstance(routed, Reply):
            return routed
        name, params = routed
        self._count_call(name, params, request.body)
        fault = self._injected_fault()
        if fault is not None:
            return fault
        handler = getattr(SimApi, name)
        return handler(self, request, params)

    def _authorized(self, headers: Mapping[str, str]) -> bool:
        value = headers.get("authorization", "")
        scheme, _, token = value.partition(" ")
        if scheme.lower() != "bearer":
            return False
        return hmac.compare_digest(token.strip().encode(), self.config.key.encode())

    def _count_call(self, name: str, params: dict[str, str], body: bytes) -> None:
        if name.startswith("start_"):
            parsed = _parse_json(body)
            domain = parsed.get("domain") if isinstance(parsed, dict) else None
            if name == "start_project" and domain is None:
                domain = DEFAULT_PROJECT_DOMAIN
            self.stats.count_start_attempt(domain if isinstance(domain, str) else "")
        elif name.startswith("status_"):
            self.stats.count_status_call(params["job_id"])
        elif name == "bundle":
            self.stats.count_bundle_call(params["job_id"])
        elif name == "agent_job":
            self.stats.count_agent_call(params["job_id"])

    def _injected_fault(self) -> Reply | None:
        faults = self.faults
        with self.fault_lock:
            if faults.rate_limit_next > 0:
                faults.rate_limit_next -= 1
                return error_reply(
                    429,
                    "Rate limit exceeded, try again later",
                    [("Retry-After", faults.retry_after)],
                )
            if faults.error_rate > 0 and self._rng.random() < faults.error_rate:
                status = faults.error_status
                headers = [("Retry-After", faults.retry_after)] if status in (429, 503) else []
                return error_reply(status, "Service temporarily unavailable", headers)
        return None

    # ---- static export -----------------------------------------------------------------

    def start_global(self, request: Request, params: dict[str, str]) -> Reply:
        body = _parse_json(request.body)
        if not isinstance(body, dict):
            return error_reply(400, "Request body must be a JSON object with a domain")
        domain = body.get("domain")
        if not is_hostname(domain):
            return error_reply(
                400, "Invalid domain: provide the hostname only, for example docs.example.com"
            )
        assert isinstance(domain, str)
        version = body.get("version")
        if version is not None and not isinstance(version, str):
            return error_reply(400, "version must be a string")
        paths = body.get("paths")
        if paths is not None and not _valid_paths(paths):
            return error_reply(400, "paths must be a list of page paths such as guides/intro")
        return self._start(request, domain, "global", version=version, paths=paths, base_path=None)

    def start_project(self, request: Request, params: dict[str, str]) -> Reply:
        if params["project_id"] != self.config.project_id:
            return error_reply(404, "Project not found")
        body = _parse_json(request.body) if request.body.strip() else {}
        if not isinstance(body, dict):
            return error_reply(400, "Request body must be a JSON object")
        base_path = body.get("basePath")
        if base_path is not None and base_path not in BASE_PATHS:
            return error_reply(400, "basePath must be one of '', '/docs', '/documentation'")
        domain = body.get("domain", DEFAULT_PROJECT_DOMAIN)
        if not is_hostname(domain):
            return error_reply(400, "Invalid domain: provide the hostname only")
        assert isinstance(domain, str)
        return self._start(
            request, domain, "project", version=None, paths=None, base_path=base_path
        )

    def _start(
        self,
        request: Request,
        domain: str,
        flow: str,
        *,
        version: str | None,
        paths: list[str] | None,
        base_path: str | None,
    ) -> Reply:
        faults, config = self.faults, self.config
        if domain in faults.bad_request_domains:
            return error_reply(400, f"The request is invalid: {domain} is not a reachable hostname")
        if domain in faults.not_enabled_domains:
            return error_reply(403, MSG_NOT_ENABLED)
        with self._lock:
            now = time.monotonic()
            if config.max_starts_per_hour > 0:
                while self._start_times and self._start_times[0] <= now - RATE_WINDOW:
                    self._start_times.popleft()
                if len(self._start_times) >= config.max_starts_per_hour:
                    wait = max(1, math.ceil(self._start_times[0] + RATE_WINDOW - now))
                    return error_reply(
                        429,
                        f"Rate limit exceeded: at most {config.max_starts_per_hour} static export "
                        "job starts per organization per hour",
                        [("Retry-After", str(wait))],
                    )
            if config.one_active_job and any(
                job.domain == domain
                and job.view(now, held=faults.hold_jobs).status in ("queued", "running")
                for job in self.jobs.values()
            ):
                return error_reply(409, MSG_BUSY)
            job, spec = self._new_job(domain, flow, now, version, paths, base_path)
            self.jobs[job.job_id] = job
            self._start_times.append(now)
            self.stats.record_start(domain, job.job_id)
        if spec is None:
            job.built.set()
        else:
            self._build_in_background(job, spec)
        log.info("export job %s started for %s (%s flow)", job.job_id, domain, flow)
        payload = self._job_json(job, flow, request.base_url, just_started=True)
        if faults.job_id_override is not None:
            payload["jobId"] = faults.job_id_override
        return json_reply(202, payload)

    def _new_job(
        self,
        domain: str,
        flow: str,
        now: float,
        version: str | None,
        paths: list[str] | None,
        base_path: str | None,
    ) -> tuple[ExportJob, SiteSpec | None]:
        config = self.config
        failing = domain in self.faults.fail_domains
        site = self._domains.setdefault(domain, _DomainState())
        wall = time.time()
        mtime = max(int(wall), site.last_mtime + 1)
        spec = SiteSpec(
            domain=domain,
            revision=site.revision,
            export_number=site.exports,
            pages=max(config.pages, 1),
            page_size=config.page_size,
            changes_per_export=config.changes_per_export,
            change_share=config.change_share,
            site_size=config.site_size,
            base_path=base_path or "",
            paths=tuple(paths) if paths is not None else None,
            bundle_size=config.bundle_size,
            malicious=self.faults.malicious_domains.get(domain),
            damage=self.faults.damaged_domains.get(domain),
            mtime=mtime,
            seed=config.seed,
        )
        if not failing:
            site.exports += 1
            site.last_mtime = mtime
        job = ExportJob(
            job_id="se_" + secrets.token_hex(8),
            domain=domain,
            flow=flow,
            created_mono=now,
            created_wall=wall,
            queue_seconds=config.queue_seconds,
            run_seconds=config.run_seconds,
            page_count=page_count(spec),
            fail_error=(
                f"Export failed while rendering {domain}: page guides/page-007 timed out "
                "(simulated failure)"
                if failing
                else None
            ),
            version=version,
            paths=paths,
            base_path=base_path,
            spec=None if failing else spec,
        )
        return job, (None if failing else spec)

    def _build_in_background(self, job: ExportJob, spec: SiteSpec) -> None:
        def build() -> None:
            try:
                with self._build_slots:
                    if self.cancel.is_set():
                        return
                    job.bundle = self._built(job, spec)
                    job.built_mono = time.monotonic()
            except BuildCancelled:
                job.build_error = "Export cancelled: the service is shutting down"
            except Exception:
                log.exception("building the bundle of %s failed", job.job_id)
                job.build_error = "Export failed: internal error while packaging the bundle"
            finally:
                job.built.set()

        thread = threading.Thread(target=build, name=f"sim-build-{job.job_id}", daemon=True)
        with self._lock:
            self._builders = [t for t in self._builders if t.is_alive()]
            self._builders.append(thread)
        thread.start()

    def _built(self, job: ExportJob, spec: SiteSpec) -> BundleInfo:
        """The job's archive: made now, or with `reuse_bundles` an earlier job's of the same
        unchanged site."""
        if not self.config.reuse_bundles or spec.changes:
            return build_bundle(spec, self.workdir / f"{job.job_id}.tar.gz", self.cancel)
        key = replace(spec, mtime=0, export_number=0)
        with self._reuse_lock:
            built = self._reused.get(key)
            if built is None:
                path = self.workdir / f"{job.job_id}.tar.gz"
                built = self._reused[key] = build_bundle(spec, path, self.cancel)
        return built

    def change_bundle(self, job: ExportJob) -> None:
        """Replace the job's archive by another object (new content and mtime; the same size
        when `bundle_size` is set), as a storage host whose object changes under a link."""
        with self._lock:
            spec = job.spec
            if spec is None or job.bundle is None:
                return
            changes = spec.revision + 1
            spec = replace(spec, revision=spec.revision + 1000, mtime=spec.mtime + 1)
            job.bundle = build_bundle(spec, self.workdir / f"{job.job_id}.{changes}.tar.gz")
            job.spec = spec

    def join_builders(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        with self._lock:
            builders = list(self._builders)
        for thread in builders:
            thread.join(max(deadline - time.monotonic(), 0))

    def _job_json(
        self, job: ExportJob, flow: str, base_url: str, *, just_started: bool = False
    ) -> dict[str, Any]:
        faults = self.faults
        if just_started:
            view = ExportView("queued", 0, 0, job.created_wall, None)
        else:
            view = job.view(time.monotonic(), held=faults.hold_jobs)
        if faults.never_settle and view.status != "failed":
            view = ExportView("running", 99, job.page_count, time.time(), None)
        if faults.page_count_reported is not None:
            view = dataclasses.replace(view, page_count=faults.page_count_reported)
        status = view.status
        if status == "running" and faults.unknown_state:
            status = faults.unknown_state
        payload: dict[str, Any] = {"jobId": job.job_id, "status": status}
        if flow == "global":
            if faults.progress_as_string:
                payload["progress"] = f"{view.progress}%"
                payload["pageCount"] = str(view.page_count)
            else:
                payload["progress"] = view.progress
                payload["pageCount"] = view.page_count
        payload["createdAt"] = iso(job.created_wall)
        payload["updatedAt"] = iso(view.updated_at)
        if view.error is not None:
            payload["error"] = view.error
        elif flow == "project":
            payload["error"] = None
        in_status = faults.newer_revision or (
            faults.project_flow_bundle_in_status
            if flow == "project"
            else faults.global_flow_bundle_in_status
        )
        if view.status == "completed" and in_status:
            payload.update(self._link_fields(job, base_url))
        return payload

    def _link_fields(self, job: ExportJob, base_url: str) -> dict[str, Any]:
        assert job.bundle is not None
        url, link = self.links.issue(
            base_url, job.job_id, job.domain, self.config.link_ttl, time.time()
        )
        if self.faults.bundle_url_override is not None:
            url = self.faults.bundle_url_override
        fields: dict[str, Any] = {"bundleUrl": url}
        if not self.faults.omit_size:
            fields["sizeBytes"] = job.bundle.size
            fields["expiresAt"] = iso(link.expires_at)
        return fields

    def status_global(self, request: Request, params: dict[str, str]) -> Reply:
        job = self.jobs.get(params["job_id"])
        if job is None:
            return error_reply(404, "No job exists with the provided ID")
        return json_reply(200, self._job_json(job, "global", request.base_url))

    def status_project(self, request: Request, params: dict[str, str]) -> Reply:
        job = self.jobs.get(params["job_id"])
        if params["project_id"] != self.config.project_id or job is None:
            return error_reply(404, "No job exists with the provided ID for this deployment")
        return json_reply(200, self._job_json(job, "project", request.base_url))

    def bundle(self, request: Request, params: dict[str, str]) -> Reply:
        if self.faults.newer_revision:
            return error_reply(404, "Not found")  # that revision has no bundle call
        job = self.jobs.get(params["job_id"])
        if job is None:
            return error_reply(404, "No job exists with the provided ID")
        view = job.view(time.monotonic(), held=self.faults.hold_jobs)
        if view.status == "failed":
            return error_reply(409, "The job failed, so a bundle cannot be generated")
        if view.status != "completed":
            return error_reply(409, "The job has not finished yet, so a bundle cannot be generated")
        return json_reply(200, {"jobId": job.job_id, **self._link_fields(job, request.base_url)})

    # ---- agent jobs --------------------------------------------------------------------

    def agent_job(self, request: Request, params: dict[str, str]) -> Reply:
        job = self.agent_jobs.get(params["job_id"])
        if params["project_id"] != self.config.project_id or job is None:
            return error_reply(404, "Agent job not found")
        return json_reply(200, job.to_json(time.monotonic(), held=self.faults.hold_jobs))

    def add_agent_job(self, outcome: str, seconds: float, job_id: str | None) -> str:
        if outcome not in AGENT_OUTCOMES:
            raise ValueError(f"outcome must be one of {', '.join(sorted(AGENT_OUTCOMES))}")
        if seconds < 0:
            raise ValueError("seconds must not be negative")
        job_id = job_id or "aj_" + secrets.token_hex(8)
        with self._lock:
            self.agent_jobs[job_id] = AgentJob(
                job_id, outcome, time.monotonic(), time.time(), seconds, next(self._pr_numbers)
            )
        return job_id

    # ---- sites -------------------------------------------------------------------------

    def publish(self, domain: str) -> None:
        with self._lock:
            self._domains.setdefault(domain, _DomainState()).revision += 1

    # ---- control API -------------------------------------------------------------------

    def ctl_stats(self, request: Request, params: dict[str, str]) -> Reply:
        return json_reply(200, self.stats.snapshot())

    def ctl_get_faults(self, request: Request, params: dict[str, str]) -> Reply:
        with self.fault_lock:
            return json_reply(200, self.faults.to_json())

    def ctl_set_faults(self, request: Request, params: dict[str, str]) -> Reply:
        body = _parse_json(request.body)
        if not isinstance(body, dict):
            return error_reply(400, "Body must be a JSON object of fault fields")
        try:
            with self.fault_lock:
                self.faults.update(body)
                current = self.faults.to_json()
        except ValueError as exc:
            return error_reply(400, str(exc))
        return json_reply(200, current)

    def ctl_publish(self, request: Request, params: dict[str, str]) -> Reply:
        self.publish(params["domain"])
        return json_reply(200, {"domain": params["domain"]})

    def ctl_agent_job(self, request: Request, params: dict[str, str]) -> Reply:
        body = _parse_json(request.body) if request.body.strip() else {}
        if not isinstance(body, dict):
            return error_reply(400, "Body must be a JSON object")
        seconds = body.get("seconds", 0.5)
        job_id = body.get("id")
        if isinstance(seconds, bool) or not isinstance(seconds, int | float):
            return error_reply(400, "seconds must be a number")
        if job_id is not None and not isinstance(job_id, str):
            return error_reply(400, "id must be a string")
        try:
            new_id = self.add_agent_job(str(body.get("outcome", "pr")), float(seconds), job_id)
        except ValueError as exc:
            return error_reply(400, str(exc))
        return json_reply(201, {"id": new_id})

    def ctl_expire_links(self, request: Request, params: dict[str, str]) -> Reply:
        self.links.expire_all()
        return json_reply(200, {"expired": True})

    def ctl_bundle_info(self, request: Request, params: dict[str, str]) -> Reply:
        job = self.jobs.get(params["job_id"])
        if job is None:
            return error_reply(404, "No such job")
        if job.bundle is None:
            return error_reply(409, "The job has no bundle (yet)")
        return json_reply(
            200,
            {
                "jobId": job.job_id,
                "domain": job.domain,
                "sha256": job.bundle.sha256,
                "sizeBytes": job.bundle.size,
                "pageCount": job.bundle.page_count,
            },
        )


def _parse_json(body: bytes) -> Any:
    try:
        return json.loads(body) if body else None
    except (ValueError, UnicodeDecodeError):
        return None


def _valid_paths(paths: Any) -> bool:
    return isinstance(paths, list) and all(
        isinstance(p, str) and p.strip("/") and ".." not in p.split("/") and "://" not in p
        for p in paths
    )
