"""One answer's body into the partial file, refused when it comes too slowly or is too long.

Promises:

- a body of known length on HTTP/1.x is received from the socket straight into the
  partial file's block (`socketbody.SocketBody`); any other body through httpx's pieces;
- a transfer slower than the speed limit is cut (`Retry`, marked slow: no progress);
- a byte past the announced size is an `IntegrityError` before it is kept: at most one
  byte past it is ever read;
- whatever ends the body, the bytes received are written to the file; a body that ends
  before the expected size is a `Retry` (the next try resumes).
"""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import urlsplit

import httpx

from mirror.errors import IntegrityError
from mirror.vendorapi.attempts import Retry
from mirror.vendorapi.client import BundleLink
from mirror.vendorapi.partial import PartialFile
from mirror.vendorapi.socketbody import SocketBody
from mirror.vendorapi.speedlimit import SpeedLimit
from mirror.vendorapi.validators import ResumeGuard


class Receiver:
    """Moves bodies into `file`; `after_block` runs after each full block is written."""

    def __init__(
        self,
        file: PartialFile,
        guard: ResumeGuard,
        speed: SpeedLimit,
        after_block: Callable[[], None],
    ) -> None:
        self.file = file
        self.guard = guard
        self.speed = speed
        self.after_block = after_block

    def receive(self, response: httpx.Response, link: BundleLink) -> None:
        """Append the body of `response` (the bytes of `link`) to the file, all of it."""
        file = self.file
        self.speed.start()
        try:
            body = SocketBody.of(response)  # else the body comes through httpx's pieces
            for piece in response.iter_raw() if body is None else (body.first,):
                self.take(len(piece), link)
                file.buffer(piece, self.after_block)
            # Socket -> block, up to one byte past the announced size (refused, never kept).
            while body is not None and (got := body.readinto(file.space(self.room))):
                self.take(got, link)
                file.filled(got, self.after_block)
        finally:
            file.write_block()  # whatever ended the body, the bytes received are good
        expected = self.guard.expected
        if expected is not None and file.offset < expected:
            raise Retry(f"the connection ended early at byte {file.offset}")

    @property
    def room(self) -> int | None:
        """How many more bytes may be read: up to one past the expected size."""
        expected = self.guard.expected
        return None if expected is None else expected - self.file.offset - self.file.fill + 1

    def take(self, count: int, link: BundleLink) -> None:
        """Accept `count` more bytes of the body, or refuse them: too slow, or too many."""
        if self.speed.too_slow(count):
            raise Retry(self.speed.describe(), slow=True)
        expected = self.guard.expected
        received = self.file.offset + self.file.fill + count
        if expected is not None and received > expected:
            raise IntegrityError(
                f"bundle of job {link.job_id} from {urlsplit(link.url).netloc} "
                f"is bigger than the {expected} bytes announced; nothing was stored"
            )
