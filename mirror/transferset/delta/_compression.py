"""Deterministic gzip: the one owner of how a tree archive's bytes are compressed.

A delta version is rebuilt on the air-gapped side and must hash to what the connected
side signed, so both sides must make the same compressed bytes from the same tar stream.
Streaming compressors do not promise that across versions or CPU features; a pinned
libdeflate (PyPI `deflate`, carried to both sides by the offline installer from the same
lock file) compressing fixed-size pieces one-shot does.

The format: the tar stream cut into pieces of `chunk_size` bytes (the last one shorter),
each compressed one-shot by libdeflate at `level` into its own gzip member with fixed
header fields (no name, mtime 0, XFL 0, OS 255), concatenated. Every gzip reader accepts
a multi-member gzip (RFC 1952, section 2.2), so the object is an ordinary `.tar.gz`.

A manifest names the compression it used (`Compression`: library, its version, level,
piece size; sets packed before it name none, stored deflate blocks: refused, docs/delta.md).
An importer that cannot reproduce a named compression refuses before it reads anything
(`require_reproducible`, exit 2), saying what it needs.

Level 6: on the simulator's pages 1.06x the size of the vendor's own `gzip -6` stream, at
2.5x its speed (level 5: 1.11x; level 9: 1.00x at a third of the speed).

Promises: memory is one piece a worker plus its compressed form; the same input and the
same `Compression` give the same bytes, compressed here or by worker processes (pinned by
a golden test).
"""

from __future__ import annotations

import contextlib
import os
import struct
import subprocess
import sys
import zlib
from collections import deque
from collections.abc import Callable
from typing import Protocol

from mirror.errors import ConfigError
from mirror.integrity import Digest, HashingWriter
from mirror.transferset.format import Compression

LIBRARY = "deflate"
CHUNK_SIZE = 1024 * 1024
LEVEL = 6
SERIAL_PIECES = 4
MAX_WORKERS = 4
# a gzip member header with fixed fields: no name, mtime 0, XFL 0, OS 255
MEMBER_HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"


def installed_version() -> str | None:
    """The version of the `deflate` package in this installation, or None without it."""
    try:
        import deflate
    except ImportError:
        return None
    return str(deflate.__version__)


def current() -> Compression:
    """What this installation writes into new delta sets."""
    version = installed_version()
    if version is None:
        raise ConfigError(
            f"the {LIBRARY} package is not installed",
            hint="reinstall mirror from its lock file (requirements.lock)",
        )
    return Compression(library="deflate", version=version, level=LEVEL, chunk_size=CHUNK_SIZE)


def require_reproducible(spec: Compression | None) -> None:
    """Refuse (ConfigError, exit 2) unless this installation makes the bytes `spec` names."""
    if spec is None:
        return
    installed = installed_version()
    if installed != spec.version:
        have = f"{LIBRARY}=={installed}" if installed else f"no {LIBRARY} package"
        raise ConfigError(
            f"this set's delta archives were compressed with {spec.describe()}, "
            f"and this installation has {have}",
            hint=f"install {LIBRARY}=={spec.version} from the offline installer of the "
            "release that packed the set, or ask for a full set (transfer pack --full)",
        )


class GzipSink(Protocol):
    """Where a tree archive's tar stream goes: compressed, counted and hashed."""

    @property
    def result(self) -> Digest: ...

    def write(self, data: bytes) -> None: ...

    def close(self) -> None: ...


def gzip_sink(spec: Compression, write: Callable[[bytes], object]) -> GzipSink:
    """A sink that writes `spec`'s gzip of what it is given."""
    require_reproducible(spec)
    return ChunkedGzip(write, level=spec.level, chunk_size=spec.chunk_size)


class _Output:
    def __init__(self, write: Callable[[bytes], object]) -> None:
        self._write = write
        self._hashed = HashingWriter()

    @property
    def result(self) -> Digest:
        """sha256 and size of the compressed bytes written so far."""
        return self._hashed.result

    def _out(self, data: bytes) -> None:
        self._hashed.write(data)
        self._write(data)


class ChunkedGzip(_Output):
    """Multi-member gzip, one member per `chunk_size` piece, each compressed one-shot.

    The pieces are independent, so past the first `SERIAL_PIECES` they go to `workers`
    processes (one per usable core; the binding holds the GIL, so threads would not help),
    one piece in flight each, and are written in order: the same bytes as compressing them
    here, which is what happens when a worker cannot be had or fails (and for small
    archives, which never start one)."""

    def __init__(
        self,
        write: Callable[[bytes], object],
        *,
        level: int,
        chunk_size: int,
        workers: int | None = None,
    ) -> None:
        super().__init__(write)
        import deflate

        self._compress = deflate.deflate_compress
        self._level = level
        self._chunk_size = chunk_size
        self._pending = bytearray()
        self._members = 0
        self._count = usable_cores() if workers is None else workers
        self._workers: _Workers | None = None
        self._waiting: deque[tuple[int, bytes]] = deque()

    def write(self, data: bytes) -> None:
        self._pending += data
        while len(self._pending) >= self._chunk_size:
            piece = bytes(self._pending[: self._chunk_size])
            del self._pending[: self._chunk_size]
            self._member(piece)

    def close(self) -> None:
        try:
            if self._pending or not self._members:
                self._member(bytes(self._pending))
            self._pending.clear()
            while self._waiting:
                self._emit_oldest()
        finally:
            if self._workers is not None:
                self._workers.close()
                self._workers = None

    def _member(self, piece: bytes) -> None:
        number = self._members
        self._members += 1
        workers = self._workers_for(number)
        if workers is None:
            while self._waiting:
                self._emit_oldest()
            self._out(_gzip_member(piece, self._compress(piece, self._level)))
            return
        if len(self._waiting) >= self._count:
            self._emit_oldest()  # the piece this worker had
        self._waiting.append((number, piece))
        if self._workers is not None and not self._workers.send(number, piece, self._level):
            self._give_up()

    def _emit_oldest(self) -> None:
        number, piece = self._waiting.popleft()
        body: bytes | bytearray | None = None
        if self._workers is not None:
            body = self._workers.receive(number)
        if body is None:
            self._give_up()
            body = self._compress(piece, self._level)
        self._out(_gzip_member(piece, body))

    def _workers_for(self, number: int) -> _Workers | None:
        if self._count < 2 or number < SERIAL_PIECES:
            return None
        if self._workers is None and number == SERIAL_PIECES:
            self._workers = _Workers.start(self._count)
            if self._workers is None:
                self._count = 0
        return self._workers

    def _give_up(self) -> None:
        """A worker failed: the rest is compressed here (same bytes)."""
        if self._workers is not None:
            self._workers.close()
            self._workers = None
        self._count = 0


def _gzip_member(piece: bytes, body: bytes | bytearray) -> bytes:
    trailer = struct.pack("<II", zlib.crc32(piece) & 0xFFFFFFFF, len(piece) & 0xFFFFFFFF)
    return MEMBER_HEADER + bytes(body) + trailer


def usable_cores() -> int:
    """The cores this process may run on, at most `MAX_WORKERS`."""
    try:
        count = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        count = os.cpu_count() or 1
    return min(count, MAX_WORKERS)


_WORKER = """
import struct, sys, deflate
source, sink = sys.stdin.buffer, sys.stdout.buffer
while len(head := source.read(8)) == 8:
    level, size = struct.unpack("<II", head)
    body = deflate.deflate_compress(source.read(size), level)
    sink.write(struct.pack("<I", len(body)) + body)
    sink.flush()
"""


class _Workers:
    """Compressing processes (this interpreter running `_WORKER`) fed over pipes, piece
    `number` to worker `number % count`, one piece each at a time. A worker ends when its
    input closes, so a killed parent leaves none behind; it imports nothing from the working
    directory (`-P`: an operator may stand on a medium that holds a `deflate.py`). `send` and
    `receive` answer False and None when a worker fails."""

    def __init__(self, processes: list[subprocess.Popen[bytes]]) -> None:
        self._processes = processes

    @classmethod
    def start(cls, count: int) -> _Workers | None:
        processes: list[subprocess.Popen[bytes]] = []
        try:
            for _ in range(count):
                processes.append(
                    subprocess.Popen(
                        # -P: `python -c` would put the working directory first on
                        # sys.path, so a deflate.py where the operator stands would run
                        [sys.executable, "-P", "-c", _WORKER],
                        stdin=subprocess.PIPE,
                        stdout=subprocess.PIPE,
                        stderr=subprocess.DEVNULL,
                    )
                )
        except OSError:
            cls(processes).close()
            return None
        return cls(processes)

    def _of(self, number: int) -> subprocess.Popen[bytes]:
        return self._processes[number % len(self._processes)]

    def send(self, number: int, piece: bytes, level: int) -> bool:
        process = self._of(number)
        assert process.stdin is not None
        try:
            process.stdin.write(struct.pack("<II", level, len(piece)) + piece)
            process.stdin.flush()
        except OSError:
            return False
        return True

    def receive(self, number: int) -> bytes | None:
        process = self._of(number)
        assert process.stdout is not None
        try:
            head = process.stdout.read(4)
            if len(head) != 4:
                return None
            (size,) = struct.unpack("<I", head)
            body = process.stdout.read(size)
        except OSError:
            return None
        return body if len(body) == size else None

    def close(self) -> None:
        for process in self._processes:
            with contextlib.suppress(OSError):
                if process.stdin is not None:
                    process.stdin.close()
        for process in self._processes:
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            if process.stdout is not None:
                process.stdout.close()
        self._processes = []
