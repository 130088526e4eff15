"""A token bucket: the sender's rate cap (`--rate`), so a link or a receiver's queue is
never offered more than it was sized for."""

from __future__ import annotations

import time
from collections.abc import Callable

SLACK = 0.002
"""Seconds of debt before sleeping: sleeping for every datagram costs a system call and a
wake-up each (a sender at 8 MiB/s spent more CPU on them than on its work)."""


class TokenBucket:
    """`take(n)` blocks until `n` bytes may go at `rate` bytes a second, allowing a burst of
    `burst` bytes; a rate of None never waits."""

    def __init__(
        self,
        rate: float | None,
        burst: int = 64 * 1024,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.rate = rate
        self.burst = burst
        self.clock = clock
        self.sleep = sleep
        self.tokens = float(burst)
        self.stamp = clock()

    def take(self, size: int) -> None:
        if self.rate is None:
            return
        now = self.clock()
        self.tokens = min(self.burst, self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now
        self.tokens -= size
        if self.tokens < -self.rate * SLACK:  # one sleep per ~2 ms of datagrams, not each
            self.sleep(-self.tokens / self.rate)
