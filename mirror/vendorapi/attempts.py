"""How the tries of one download are counted, and when they end.

Promises:

- a try that received bytes starts the count again; `max_attempts` tries in a row that
  made no progress give the link up (`LinkFailed`), naming its host, never its query
  string (a credential);
- a restart from zero is no progress: more than `max_attempts` of them give the link up,
  as do more than `max_attempts` fresh links in a row that deliver no block;
- a link host that does not resolve is given up after `DNS_ATTEMPTS` tries, naming it;
- between tries the download waits with backoff honouring `Retry-After` (`BACKOFF`),
  woken at once by `cancel` when it waits on the real clock.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from urllib.parse import urlsplit

import httpx

from mirror.errors import TemporaryFailure
from mirror.links import safe_url
from mirror.vendorapi.client import BundleLink
from mirror.vendorapi.retry import Backoff
from mirror.vendorapi.transport import DNS_ATTEMPTS, name_resolution_error

log = logging.getLogger("mirror.vendorapi.download")  # one logger for the whole download

# A cut connection is usually back within a second; a busy storage host says Retry-After.
BACKOFF = Backoff(initial=0.5, maximum=30.0, jitter=0.5, retry_after_cap=300.0)


class LinkFailed(TemporaryFailure):
    """This link cannot deliver the bundle (a scheme other than http/https, or its attempts
    are spent): drop it; the next try asks the vendor for a fresh one (exit 75)."""


class Retry(Exception):
    """A failure worth another try after `delay` seconds."""

    def __init__(
        self, reason: str, retry_after: float | None = None, *, slow: bool = False
    ) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retry_after = retry_after
        self.slow = slow


class Refresh(Exception):
    """The link has expired: get a new one and continue."""


class Attempts:
    """The counts of one download's tries: failures in a row, restarts, fresh links."""

    def __init__(
        self,
        max_attempts: int,
        sleep: Callable[[float], None],
        cancel: threading.Event | None,
    ) -> None:
        self.max_attempts = max(1, max_attempts)
        self.sleep = sleep
        self.cancel = cancel
        self.failures = self.restarts = 0
        self.refreshes = self.refreshes_in_a_row = 0

    def check_restarts(self, link: BundleLink) -> None:
        """Bytes thrown away by a restart are no progress: a host whose answers keep
        disagreeing (a lying length, a changing object, ranges ignored and the body cut)
        would otherwise reset the failure count on every pass and hold the run for ever."""
        if self.restarts <= self.max_attempts:
            return
        raise LinkFailed(
            f"download of the bundle of job {link.job_id} from "
            f"{urlsplit(link.url).netloc} restarted from zero {self.restarts} times (its "
            "answers keep disagreeing about the object); the link is dropped and the next run "
            "asks the vendor for a fresh one"
        )

    def unresolvable(
        self, exc: httpx.TransportError, link: BundleLink, progressed: bool
    ) -> TemporaryFailure | None:
        """The error to give up with when the link's host name keeps failing to resolve: a
        name that does not resolve will not resolve in a minute either."""
        unresolved = name_resolution_error(exc)
        if unresolved is None or self.failures + 1 < DNS_ATTEMPTS or progressed:
            return None
        return TemporaryFailure(
            f"cannot resolve the bundle host {urlsplit(link.url).hostname!r} "
            f"(job {link.job_id}): {unresolved.strerror or unresolved}, "
            f"tried {self.failures + 1} times",
            hint="check the network's DNS resolver (and a proxy, if one is needed)",
        )

    def refresh(self, link: BundleLink) -> None:
        """Count a fresh link about to be asked for; give up when they keep expiring."""
        self.refreshes_in_a_row += 1
        if self.refreshes_in_a_row > self.max_attempts:
            raise LinkFailed(
                f"the bundle link of job {link.job_id} keeps expiring "
                f"({self.refreshes_in_a_row - 1} fresh links in a row failed); check the clock "
                "and try again later"
            )
        self.refreshes += 1

    def block_written(self) -> None:
        """A block of the body reached the file: the link works."""
        self.refreshes_in_a_row = 0

    def failed(
        self,
        reason: str,
        retry_after: float | None,
        *,
        progressed: bool,
        link: BundleLink,
        offset: int,
    ) -> None:
        """Count a failed try and wait before the next; LinkFailed when tries are spent."""
        self.failures = 1 if progressed else self.failures + 1
        if self.failures >= self.max_attempts:
            raise LinkFailed(
                f"download of the bundle of job {link.job_id} from "
                f"{urlsplit(link.url).netloc} failed {self.failures} times in a row "
                f"({reason}); run the export again later to resume",
                retry_after=retry_after,
            )
        delay = BACKOFF.delay(self.failures, retry_after)
        log.info(
            "download of %s: %s at byte %d; retrying in %.1fs",
            safe_url(link.url),
            reason,
            offset,
            delay,
        )
        if self.cancel is not None and self.sleep is time.sleep:
            self.cancel.wait(delay)
        else:
            self.sleep(delay)
