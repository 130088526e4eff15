"""How the daemon's loop sleeps and is woken: a self-pipe, and the signals that write to it.

Promises:

- `WakeupPipe.sleep(seconds)` returns after `seconds`, or as soon as `wake()` is called
  (from any thread, also before the sleep began) or a signal arrives; wakes that piled up
  are drained, so they end one sleep, not the next ones too.
- `wake()` never blocks and never fails on a full or closed pipe.
- `SignalHandlers.install()` works in the main thread only (elsewhere it does nothing):
  SIGTERM/SIGINT call `on_stop`, SIGHUP calls `on_reload`, every signal also wakes the pipe
  (`signal.set_wakeup_fd`), and SIGUSR1 dumps every thread's stack to stderr (for a stuck
  daemon). `restore()` puts back what was there before.
"""

from __future__ import annotations

import contextlib
import errno
import faulthandler
import os
import select
import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any


class WakeupPipe:
    """A non-blocking self-pipe: `sleep` until a timeout or a `wake`."""

    def __init__(self) -> None:
        self.read_fd, self.write_fd = os.pipe()
        os.set_blocking(self.read_fd, False)
        os.set_blocking(self.write_fd, False)

    def wake(self) -> None:
        try:
            os.write(self.write_fd, b"\0")
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN, errno.EBADF):
                raise

    def sleep(self, seconds: float) -> None:
        with contextlib.suppress(InterruptedError):
            select.select([self.read_fd], [], [], max(0.0, seconds))
        try:
            while os.read(self.read_fd, 4096):
                pass
        except BlockingIOError:
            pass

    def close(self) -> None:
        for fd in (self.read_fd, self.write_fd):
            with contextlib.suppress(OSError):
                os.close(fd)


class SignalHandlers:
    """The daemon's signal handlers, installed for the life of `run()`."""

    def __init__(
        self, pipe: WakeupPipe, *, on_stop: Callable[[], None], on_reload: Callable[[], None]
    ) -> None:
        self.pipe = pipe
        self.on_stop = on_stop
        self.on_reload = on_reload
        self._previous: dict[int, Any] = {}

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return

        def stop(_signum: int, _frame: FrameType | None) -> None:
            self.on_stop()

        def reload(_signum: int, _frame: FrameType | None) -> None:
            self.on_reload()

        self._previous = {
            signal.SIGTERM: signal.signal(signal.SIGTERM, stop),
            signal.SIGINT: signal.signal(signal.SIGINT, stop),
            signal.SIGHUP: signal.signal(signal.SIGHUP, reload),
        }
        self._previous[-1] = signal.set_wakeup_fd(self.pipe.write_fd, warn_on_full_buffer=False)
        faulthandler.register(signal.SIGUSR1, all_threads=True, chain=False)

    def restore(self) -> None:
        previous, self._previous = self._previous, {}
        if not previous:
            return
        signal.set_wakeup_fd(previous.pop(-1))
        faulthandler.unregister(signal.SIGUSR1)
        for signum, handler in previous.items():
            signal.signal(signum, handler)
