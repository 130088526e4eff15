"""The daemon loop's self-pipe and signal handlers (mirror.export.wakeup)."""

from __future__ import annotations

import os
import signal
import threading
import time

from mirror.export.wakeup import SignalHandlers, WakeupPipe

# A sleep that only a wake ends within the test's time; a woken one ends far sooner even on a
# busy machine (the bound is the difference, not a guess at the machine's speed)
LONG = 120.0
WOKEN = 60.0


def test_a_wake_ends_one_sleep_and_piled_up_wakes_are_drained() -> None:
    pipe = WakeupPipe()
    try:
        for _ in range(100):
            pipe.wake()
        started = time.monotonic()
        pipe.sleep(LONG)
        assert time.monotonic() - started < WOKEN
        started = time.monotonic()
        pipe.sleep(0.2)
        assert time.monotonic() - started >= 0.19  # drained: the next sleep runs its course
        threading.Timer(0.1, pipe.wake).start()
        started = time.monotonic()
        pipe.sleep(LONG)
        assert time.monotonic() - started < WOKEN
    finally:
        pipe.close()
    pipe.wake()  # closed: no error


def test_signals_call_their_handlers_wake_the_pipe_and_are_restored() -> None:
    pipe = WakeupPipe()
    seen: list[str] = []
    handlers = SignalHandlers(
        pipe, on_stop=lambda: seen.append("stop"), on_reload=lambda: seen.append("reload")
    )
    before = signal.getsignal(signal.SIGHUP)
    handlers.install()
    try:
        os.kill(os.getpid(), signal.SIGHUP)
        started = time.monotonic()
        pipe.sleep(LONG)
        assert time.monotonic() - started < WOKEN
        os.kill(os.getpid(), signal.SIGTERM)
        started = time.monotonic()
        pipe.sleep(LONG)  # woken by the handler
        assert time.monotonic() - started < WOKEN
        assert seen == ["reload", "stop"]
    finally:
        handlers.restore()
        pipe.close()
    assert signal.getsignal(signal.SIGHUP) == before
