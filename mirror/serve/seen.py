"""What readers see, kept across restarts: per domain, the version this cache last served
(a GET) and when the vendor exported it, in `CACHE_DIR/served.json`.

`mirror_serve_last_served_info` and `mirror_serve_served_version_age_seconds` say what the
vendor's pods show; a pod keeps showing what it fetched while `mirror serve` restarts (a
rollout, a node drain), so a restart must not make those series vanish until the next
fetch (MirrorServedNotCurrent and MirrorServedDocsTooOld would have nothing to look at).
The file is written only when a domain's last served version changes (not per response),
all or nothing; an unreadable one is a warning and an empty start, never a failure.
"""

from __future__ import annotations

import json
import logging
import threading
from pathlib import Path

from mirror.fsutil import atomic_write_bytes
from mirror.serve.metrics import Served

log = logging.getLogger(__name__)

FILE = "served.json"
FORMAT = 1


class LastServed:
    """The per-domain record, in memory and in `directory/served.json`. Thread-safe."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / FILE
        self.domains: dict[str, Served] = {}
        self._lock = threading.Lock()

    def load(self) -> None:
        """Read the record an earlier run kept (none: empty)."""
        try:
            document = json.loads(self.path.read_bytes())
            if document.get("format") != FORMAT:
                raise ValueError(f"format {document.get('format')!r}, expected {FORMAT}")
            self.domains = {
                str(domain): Served(str(item["version"]), _seconds(item.get("exported")))
                for domain, item in document["domains"].items()
            }
        except FileNotFoundError:
            return
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            log.warning("ignoring the record of what was served %s: %s", self.path, exc)

    def served(self, domain: str, now: Served) -> None:
        """`now` is what `domain`'s readers got last; written out when it changed."""
        with self._lock:
            if self.domains.get(domain) == now:
                return
            self.domains[domain] = now
            document = {
                "format": FORMAT,
                "domains": {
                    name: {"version": seen.version, "exported": seen.exported}
                    for name, seen in sorted(self.domains.items())
                },
            }
            atomic_write_bytes(self.path, json.dumps(document, indent=1).encode() + b"\n")

    def snapshot(self) -> dict[str, Served]:
        with self._lock:
            return dict(self.domains)


def _seconds(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) else None
