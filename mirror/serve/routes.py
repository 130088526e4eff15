"""The URL space of `mirror serve`, and the one parser of a request target into it (pure).

    /domains/DOMAIN/LABEL/bundle.EXT     one version's bundle: immutable, cacheable forever
    /domains/DOMAIN/current/bundle.EXT   the domain's current version: moves with promote
                                         and rollback (within serve.poll_interval)
    /healthz  /readyz  /metrics  /       liveness, readiness, Prometheus, the status page

The path after `/domains` is the bucket's own layout (`PREFIX/DOMAIN/VERSION/bundle.EXT`)
with the prefix left out, so `chart check` reads a served link as it reads a bucket link;
`current` is no version label, so the two never meet. mirror.airgap.layout owns the names
(`served_path`), as it owns the bucket's.

A target in absolute form (`http://host:port/path`, RFC 9112 3.2.2) names its path; the
authority is ignored (this is an origin server, not a proxy).

Promises: a target is matched only in full against that grammar after ONE percent-decoding:
a domain must be a lower-case hostname (mirror.hostnames), a label a version label
(mirror.versions), EXT one of the archive formats. Before decoding, a target that is too
long, holds a NUL, a backslash, an encoded slash or backslash, a `%` that starts no escape,
or any byte outside printable ASCII, is refused (400); after it, a `.` or `..` segment or a
`%` left over (a double encoding) is refused (400) and anything else that does not match is
not found (404). No request can therefore name anything but a version of a domain.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal
from urllib.parse import unquote

from mirror.airgap.layout import MOVING, SERVED_ROOT, served_path
from mirror.hostnames import is_domain
from mirror.versions import is_label

MAX_TARGET = 1024
FORMATS = ("tar.gz", "tar", "zip", "tar.xz", "tar.bz2")
CONTENT_TYPES = {
    "tar.gz": "application/gzip",
    "tar": "application/x-tar",
    "zip": "application/zip",
    "tar.xz": "application/x-xz",
    "tar.bz2": "application/x-bzip2",
}
PAGES = {"/": "status", "/healthz": "healthz", "/readyz": "readyz", "/metrics": "metrics"}
_ENCODED_SEPARATOR = re.compile(r"%(2f|5c|00)", re.IGNORECASE)
_BAD_ESCAPE = re.compile(r"%(?![0-9a-fA-F]{2})")
_PRINTABLE = re.compile(r"^[\x21-\x7e]*$")
_AUTHORITY = re.compile(r"[^/?#]*")


@dataclass(frozen=True)
class Page:
    """One of the service's own pages."""

    name: Literal["status", "healthz", "readyz", "metrics"]


@dataclass(frozen=True)
class BundleRoute:
    """A version's bundle; `label` None means the domain's current version."""

    domain: str
    label: str | None
    format: str

    @property
    def pinned(self) -> bool:
        return self.label is not None


@dataclass(frozen=True)
class Refusal:
    """Not a route: the status to answer (400, 404, or 503 with the seconds to wait before
    asking again: `retry_after`) and its one line."""

    status: int
    reason: str
    retry_after: int | None = None

    @property
    def headers(self) -> dict[str, str]:
        return {} if self.retry_after is None else {"Retry-After": str(self.retry_after)}


Route = Page | BundleRoute


bundle_path = served_path  # the one owner of the names is mirror.airgap.layout


def parse_target(target: str) -> Route | Refusal:
    """The route a request target names, or why it names none (module docstring)."""
    if len(target) > MAX_TARGET:
        return Refusal(400, f"request target longer than {MAX_TARGET} bytes")
    if not _PRINTABLE.match(target) or "\\" in target:
        return Refusal(400, "request target holds a byte that no served path has")
    origin = origin_form(target)
    if origin is None:
        return Refusal(400, "request target is not an absolute path nor an http(s) URL")
    path = origin.split("?", 1)[0]
    if _ENCODED_SEPARATOR.search(path) or _BAD_ESCAPE.search(path):
        return Refusal(400, "request target holds an encoded separator, NUL or a broken escape")
    decoded = unquote(path, encoding="latin-1")  # any byte past ASCII is refused below
    segments = decoded.split("/")[1:]
    if any(segment in (".", "..") for segment in segments) or "%" in decoded:
        return Refusal(400, "request target holds a dot segment or a double encoding")
    if not _PRINTABLE.match(decoded) or "\\" in decoded:
        return Refusal(400, "request target holds a byte that no served path has")
    if decoded in PAGES:
        return Page(PAGES[decoded])  # type: ignore[arg-type]
    return _bundle(segments) or Refusal(404, f"no such path: {decoded}")


def origin_form(target: str) -> str | None:
    """The origin form of a target: itself when it is one (`/path?query`); the path and query
    of an absolute-form target (`http://host:port/path`: RFC 9112 3.2.2, which a server must
    accept; the authority is ignored, as an origin server may); None for anything else
    (another scheme, no host, `*`)."""
    if target.startswith("/"):
        return target
    scheme, separator, rest = target.partition("://")
    if not separator or scheme.lower() not in ("http", "https"):
        return None
    authority = _AUTHORITY.match(rest)
    if authority is None or not authority.group(0):
        return None
    path = rest[authority.end() :]
    return path if path.startswith("/") else "/" + path


def _bundle(segments: list[str]) -> BundleRoute | None:
    if len(segments) != 4 or segments[0] != SERVED_ROOT or not segments[3].startswith("bundle."):
        return None
    domain, label, filename = segments[1], segments[2], segments[3]
    archive_format = filename.removeprefix("bundle.")
    if not is_domain(domain) or archive_format not in FORMATS:
        return None
    if label == MOVING:
        return BundleRoute(domain, None, archive_format)
    return BundleRoute(domain, label, archive_format) if is_label(label) else None
