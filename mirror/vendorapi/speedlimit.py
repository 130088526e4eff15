"""The low-speed limit of a bundle download, as curl's `--speed-limit`/`--speed-time`.

A transfer slower than `min_speed` bytes/s over `stall_time` seconds is too slow (the
caller cuts and resumes it); silence for `stall_time` is a speed of 0, so the read
timeout is capped there too. A `min_speed` of 0 turns the limit off.
"""

from __future__ import annotations

import time

import httpx


class SpeedLimit:
    """Measures one response body in windows of `stall_time` seconds."""

    def __init__(self, min_speed: int, stall_time: float) -> None:
        self.min_speed = max(0, min_speed)
        self.stall_time = max(stall_time, 0.001)
        self.window_start = time.monotonic()
        self.window_bytes = 0

    def timeout(self, timeout: httpx.Timeout) -> httpx.Timeout:
        """`timeout` with its read timeout no longer than `stall_time` (when the limit is on)."""
        if self.min_speed <= 0:
            return timeout
        # Silence for stall_time is a speed of 0: below any limit.
        read = min(timeout.read, self.stall_time) if timeout.read else self.stall_time
        return httpx.Timeout(
            connect=timeout.connect, read=read, write=timeout.write, pool=timeout.pool
        )

    def start(self) -> None:
        """A body begins: its first window starts now."""
        self.window_start = time.monotonic()
        self.window_bytes = 0

    def too_slow(self, received: int) -> bool:
        """Count `received` bytes; True when a whole window ran below `min_speed`."""
        if self.min_speed <= 0:
            return False
        self.window_bytes += received
        elapsed = time.monotonic() - self.window_start
        if elapsed < self.stall_time:
            return False
        if self.window_bytes < self.min_speed * elapsed:
            return True
        self.window_start, self.window_bytes = time.monotonic(), 0
        return False

    def describe(self) -> str:
        return f"transfer below {self.min_speed} bytes/s for {self.stall_time:g}s"
