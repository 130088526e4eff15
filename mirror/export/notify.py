"""The systemd notification protocol (sd_notify) over `$NOTIFY_SOCKET`, stdlib only.

Promise: outside systemd (no `$NOTIFY_SOCKET`) every call is a cheap no-op, and a
notification that cannot be delivered is logged once and never raises. Sending never
blocks (a full receiver drops the datagram), so the scheduler loop, which sends the
watchdog pings, cannot hang on its own notifications.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Mapping

log = logging.getLogger(__name__)


def notify_address(env: Mapping[str, str]) -> str | None:
    """The socket address from `$NOTIFY_SOCKET` ('@name' is the abstract namespace), or None."""
    value = env.get("NOTIFY_SOCKET", "")
    if not value:
        return None
    if value.startswith("@"):
        return "\0" + value[1:]
    if value.startswith("/"):
        return value
    log.warning("ignoring NOTIFY_SOCKET=%r: not an absolute path or abstract socket", value)
    return None


def watchdog_interval(env: Mapping[str, str], pid: int | None = None) -> float | None:
    """Seconds within which systemd expects WATCHDOG=1, or None when the watchdog is off.

    `$WATCHDOG_PID`, when set, must name this process (the variables may be inherited
    by a child that is not the service's main process).
    """
    usec = env.get("WATCHDOG_USEC", "")
    if not usec:
        return None
    watched_pid = env.get("WATCHDOG_PID", "")
    if watched_pid and watched_pid != str(pid if pid is not None else os.getpid()):
        return None
    try:
        value = int(usec)
    except ValueError:
        return None
    return value / 1_000_000 if value > 0 else None


class Notifier:
    """Sends state lines to the service manager; no-op when there is none."""

    def __init__(self, env: Mapping[str, str] | None = None) -> None:
        env = os.environ if env is None else env
        self.address = notify_address(env)
        self.watchdog_seconds = watchdog_interval(env)
        self._socket: socket.socket | None = None
        self._warned = False

    @property
    def enabled(self) -> bool:
        return self.address is not None

    def send(self, *lines: str) -> bool:
        """Send `KEY=value` lines in one datagram; True when delivered."""
        if self.address is None:
            return False
        message = "\n".join(line.replace("\n", " ") for line in lines).encode()
        try:
            if self._socket is None:
                kind = socket.SOCK_DGRAM | socket.SOCK_CLOEXEC | socket.SOCK_NONBLOCK
                self._socket = socket.socket(socket.AF_UNIX, kind)
            self._socket.sendto(message, self.address)
        except OSError as exc:
            if not self._warned:
                log.warning("cannot notify the service manager: %s", exc.strerror or exc)
                self._warned = True
            return False
        return True

    def ready(self, status: str | None = None) -> bool:
        lines = ["READY=1", f"MAINPID={os.getpid()}"]
        if status:
            lines.append(f"STATUS={status}")
        return self.send(*lines)

    def status(self, text: str) -> bool:
        return self.send(f"STATUS={text}")

    def watchdog(self) -> bool:
        return self.send("WATCHDOG=1")

    def reloading(self) -> bool:
        return self.send("RELOADING=1")

    def stopping(self, status: str | None = None) -> bool:
        lines = ["STOPPING=1"]
        if status:
            lines.append(f"STATUS={status}")
        return self.send(*lines)

    def close(self) -> None:
        if self._socket is not None:
            self._socket.close()
            self._socket = None


class StatusLine:
    """The daemon's STATUS= line: sent when its counts change, or at most every 5 s for
    the countdown to the next due domain, so a loop of short passes never floods systemd."""

    def __init__(self, notifier: Notifier) -> None:
        self.notifier = notifier
        self.last = ""
        self.sent_at = 0.0

    def send(self, text: str) -> None:
        counts = text.split(", next due", 1)[0]
        last_counts = self.last.split(", next due", 1)[0]
        now = time.monotonic()
        if text != self.last and (counts != last_counts or now - self.sent_at >= 5):
            self.last = text
            self.sent_at = now
            self.notifier.status(text)
