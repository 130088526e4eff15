"""The one line per response of `mirror serve` (logger `mirror.serve.access`), and its count.

Every response goes through `log_response`, whether the handler answered it or the listener
refused the connection before reading a request (503 "too many clients"): it is counted in
`mirror_serve_responses_total{code}` and the bytes served, kept for the status page's last
fetches, and logged with the client, method, path, status, bytes and duration, and for a
bundle its domain, version and sha256. A response cut short (a stalled client, or the
drain's deadline on SIGTERM) says "(cut)".
"""

from __future__ import annotations

import logging
import time

from mirror.serve.pointers import Listed
from mirror.serve.service import Fetch, Service
from mirror.timestamps import utcnow

access = logging.getLogger("mirror.serve.access")


def log_response(
    service: Service,
    request: tuple[str, str, str],
    status: int,
    sent: int,
    started: float,
    listed: Listed | None = None,
    *,
    cut: bool = False,
) -> None:
    """Count and log one response to `request` (client address, method, target as sent)."""
    client, method, target = request
    seconds = time.monotonic() - started
    ref = listed.ref if listed is not None else None
    path = shown(target)
    fetch = Fetch(
        utcnow(),
        client,
        method or "-",
        path,
        status,
        sent,
        seconds,
        ref.domain if ref else None,
        str(ref.label) if ref else None,
    )
    service.record(fetch)
    access.info(
        "%s %s %d%s",
        fetch.method,
        path,
        status,
        " (cut)" if cut else "",
        extra=_fields(fetch, ref.sha256 if ref else None),
    )


def _fields(fetch: Fetch, sha256: str | None) -> dict[str, object]:
    """The access line's fields (the JSON log's keys): the response, and the bundle's
    digest when it was one."""
    return {
        "client": fetch.client,
        "method": fetch.method,
        "path": fetch.path,
        "status": fetch.status,
        "bytes": fetch.bytes,
        "duration_ms": round(fetch.seconds * 1000, 1),
        "domain": fetch.domain,
        "version": fetch.version,
        "sha256": sha256,
    }


def shown(path: str) -> str:
    """A request target as a log line may hold it: printable, escaped, bounded."""
    text = path.encode("latin-1", "replace").decode("ascii", "backslashreplace")
    text = "".join(c if c.isprintable() else f"\\x{ord(c):02x}" for c in text)
    return text[:300]
