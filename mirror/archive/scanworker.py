"""The completeness scan's parsing in a process of its own, fed the pages from the stream.

Parsing a documentation site's pages (lexbor, `completeness.page_links`) took three
quarters of `export run`'s CPU on a 13,600-page site, on the thread that also inflates,
checks and hashes the archive: the two took turns. A `PageParser` hands each page or
stylesheet, as the inspection reads it, to a child process (`python -m
mirror.archive.completeness`: `serve` with the scanner's parser) that parses it on another
core and answers with its base href and references; the scanner records the answers in
the order it sent the pages, so the report is the one an in-process scan makes. Nothing
is read twice: the child gets the bytes the inspection already holds, over a pipe.
Promises:

- memory is bounded: at most `IN_FLIGHT_BYTES` of pages (plus the one being sent, at
  most `completeness.MAX_PARSE_BYTES`) are sent and not yet answered; `submit` waits for
  answers past that;
- answers come back in the order pages were sent;
- the child ends when `close()` is called, when the parser is garbage collected, or when
  this process ends (its input closes); none is left behind;
- a child that dies (killed, out of memory) ends the scan with one `TemporaryFailure`
  line (exit 75) saying how it ended, never a hang: nothing was stored, the downloaded
  bytes are kept, and the next run checks them again;
- a page the parser cannot read ends the scan with one line (exit 1), as an unexpected
  error of the in-process scan does.

Framing, both ways: a 4-byte big-endian length, then the message. To the child: one byte
of kind (`h` a page, `c` a stylesheet), then the bytes. From it: JSON, `[href, refs]` or
`{"error": "..."}`.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import queue
import signal
import struct
import subprocess
import sys
import threading
import weakref
from collections.abc import Callable
from typing import IO, Any

from mirror.errors import MirrorError, TemporaryFailure

IN_FLIGHT_BYTES = 8 * 1024 * 1024
_LENGTH = struct.Struct(">I")
_DIED = object()  # the reader's word that the child's answers ended
CLOSE_SECONDS = 10.0  # how long a closed child may take to leave before it is killed

Links = tuple[str | None, list[str]]


class PageParser:
    """A child process that parses pages and stylesheets for one scan, answers in order."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "mirror.archive.completeness"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        assert self.process.stdin is not None and self.process.stdout is not None
        self._to = self.process.stdin
        self._answers: queue.Queue[Any] = queue.Queue()
        self._sizes: collections.deque[int] = collections.deque()
        self.in_flight = 0
        reader = threading.Thread(
            target=_read_answers,
            args=(self.process.stdout, self._answers),
            name="mirror-scan-answers",
            daemon=True,
        )
        reader.start()
        self._finalizer = weakref.finalize(self, _close, self.process, reader)

    def submit(self, text: bytes, kind: str) -> list[Links]:
        """Send one page (`kind` "html") or stylesheet ("css"); the answers that had to be
        waited for to keep within IN_FLIGHT_BYTES, oldest first."""
        ready = []
        while self._sizes and self.in_flight + len(text) > IN_FLIGHT_BYTES:
            ready.append(self.next())
        try:
            self._to.write(_LENGTH.pack(len(text) + 1) + (b"h" if kind == "html" else b"c"))
            self._to.write(text)
            self._to.flush()
        except (BrokenPipeError, ValueError):
            raise self._died() from None
        self._sizes.append(len(text))
        self.in_flight += len(text)
        return ready

    def pending(self) -> int:
        return len(self._sizes)

    def next(self) -> Links:
        """The answer to the oldest page sent and not yet answered."""
        answer = self._answers.get()
        if answer is _DIED:
            self._answers.put(_DIED)  # every later call learns it too
            raise self._died()
        self.in_flight -= self._sizes.popleft()
        if isinstance(answer, dict):
            raise MirrorError(f"the completeness scan could not read a page: {answer['error']}")
        href, refs = answer
        return href, refs

    def close(self) -> None:
        """End the child (it leaves when its input closes; killed if it lingers)."""
        self._finalizer()

    def _died(self) -> TemporaryFailure:
        code = self.process.wait()
        how = f"was killed by signal {-code}" if code < 0 else f"exited with status {code}"
        return TemporaryFailure(
            f"the completeness scan's page parser (pid {self.process.pid}) {how}; nothing "
            "was stored: run the export again"
        )


def _read_answers(stream: IO[bytes], answers: queue.Queue[Any]) -> None:
    """The parent's reader thread: each answer into `answers`, then _DIED at the end."""
    try:
        while (message := _receive(stream)) is not None:
            answers.put(json.loads(message))
    except (OSError, ValueError):
        pass
    answers.put(_DIED)


def _close(process: subprocess.Popen[bytes], reader: threading.Thread) -> None:
    if process.stdin is not None:
        with contextlib.suppress(OSError):
            process.stdin.close()
    try:
        process.wait(CLOSE_SECONDS)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    reader.join(CLOSE_SECONDS)


def _receive(stream: IO[bytes]) -> bytes | None:
    """One framed message, None at a clean end; EOFError inside a frame."""
    head = stream.read(_LENGTH.size)
    if not head:
        return None
    if len(head) < _LENGTH.size:
        raise EOFError("a frame's length was cut short")
    (length,) = _LENGTH.unpack(head)
    body = stream.read(length)
    if len(body) < length:
        raise EOFError("a frame was cut short")
    return body


def serve(source: IO[bytes], sink: IO[bytes], parse: Callable[[bytes, bool], Links]) -> None:
    """The child's loop: parse each page (`parse(text, True)`) or stylesheet (False)
    received, answer in order, until the input ends."""
    while True:
        try:
            message = _receive(source)
        except EOFError:
            return
        if message is None:
            return
        kind, text = message[:1], message[1:]
        try:
            links: Any = parse(text, kind == b"h")
        except Exception as exc:  # answered, raised in the parent as the in-process scan would
            links = {"error": str(exc) or type(exc).__name__}
        answer = json.dumps(links).encode()
        sink.write(_LENGTH.pack(len(answer)) + answer)
        sink.flush()


def child_main(parse: Callable[[bytes, bool], Links]) -> None:
    """The child process: serve stdin to stdout, then leave at once."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when the scan ends
    serve(sys.stdin.buffer, sys.stdout.buffer, parse)
    os._exit(0)
