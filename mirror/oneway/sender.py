"""The sending end: a set's blocks, FEC-encoded and interleaved, at a capped rate, in passes.

Promises:
- `pass_datagrams` is the pure core: the datagrams of one pass, in order. The file table
  goes first (twice) and again every TABLE_EVERY datagrams. Blocks are encoded `depth` at a
  time and the packets of those blocks are spread evenly over the group (packet j of a block
  of n packets at (j + 1/2) / n of the group), so a burst of B lost datagrams costs each
  block about B / depth packets, and a small file's few packets are far apart.
- `send` is the edge: one UDP socket that only ever sends (it never reads), the token
  bucket paid every BATCH datagrams (never more than BATCH datagrams ahead of the rate), a
  HEARTBEAT every `heartbeat` seconds and END three times after each pass. Memory holds
  `depth` blocks and their packets, never the set.
"""

from __future__ import annotations

import errno
import json
import socket
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from mirror.oneway import fec
from mirror.oneway.rate import TokenBucket
from mirror.oneway.table import Table
from mirror.oneway.wire import Builder, Kind, build, resolve

DEFAULT_DEPTH = 16
TABLE_EVERY = 1024
END_REPEAT = 3
BATCH = 16
"""Datagrams sent between two payments to the token bucket (at most about 23 KiB ahead of
the rate, within its 64 KiB burst)."""
Only = Mapping[int, frozenset[int] | None]
"""file index -> the blocks to send (None: all of them); empty mapping: every file."""


@dataclass
class SendStats:
    datagrams: int = 0
    wire_bytes: int = 0
    passes: int = 0

    def as_dict(self) -> dict[str, int]:
        return {"datagrams": self.datagrams, "wire_bytes": self.wire_bytes, "passes": self.passes}


def table_datagrams(table: Table, room: int) -> list[bytes]:
    data = table.encode()
    pieces = [data[i : i + room] for i in range(0, len(data), room)] or [b""]
    return [
        build(Kind.TABLE, table.session, 0, index, len(pieces), piece)
        for index, piece in enumerate(pieces)
    ]


def selected_blocks(table: Table, only: Only) -> list[tuple[int, int]]:
    chosen = []
    for file, block in table.blocks():
        if only and (file not in only or (only[file] is not None and block not in only[file])):  # type: ignore[operator]
            continue
        chosen.append((file, block))
    return chosen


def pass_datagrams(
    table: Table,
    read_block: Callable[[int, int], bytes],
    room: int,
    *,
    depth: int = DEFAULT_DEPTH,
    only: Only | None = None,
) -> Iterator[bytes]:
    """The datagrams of one pass (module docstring)."""
    tables = table_datagrams(table, room)
    yield from tables + tables
    blocks = selected_blocks(table, only or {})
    data_datagram = Builder(Kind.DATA, table.session)
    count = 0
    for start in range(0, len(blocks), depth):
        slots: list[tuple[float, int, int, int, bytes]] = []
        for file, block in blocks[start : start + depth]:
            data = read_block(file, block)
            packets = fec.encode(data, table.symbol_size, table.repair_count(len(data)))
            n = len(packets)
            slots += [((j + 0.5) / n, file, block, j, p) for j, p in enumerate(packets)]
        slots.sort()  # by place in the group (ties: file, block, symbol; never the packet)
        for _, file, block, symbol, packet in slots:
            yield data_datagram(file, block, symbol, packet)
            count += 1
            if count % TABLE_EVERY == 0:
                yield from tables
    yield from tables


def file_reader(set_dir: Path, table: Table) -> Callable[[int, int], bytes]:
    """Reads block `block` of file `file` from the set on disk."""

    def read(file: int, block: int) -> bytes:
        with open(set_dir / table.files[file].name, "rb") as handle:
            handle.seek(block * table.block_bytes)
            return handle.read(table.block_length(file, block))

    return read


class _Every:
    """Due once every `seconds` (monotonic clock): when the next HEARTBEAT goes."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.next = time.monotonic() + seconds

    def due(self) -> bool:
        if time.monotonic() < self.next:
            return False
        self.next = time.monotonic() + self.seconds
        return True


def _named(set_dir: Path, address: tuple[str, int]) -> dict[str, str]:
    """Where the set goes and where it is, as HEARTBEAT and END name them: so that an
    incomplete receiver's resend command is right."""
    host, port = address
    return {
        "to": f"[{host}]:{port}" if ":" in host else f"{host}:{port}",
        "set": str(set_dir.resolve()),
    }


def send(
    set_dir: Path,
    table: Table,
    address: tuple[str, int],
    room: int,
    *,
    passes: int = 1,
    rate: float | None = None,
    depth: int = DEFAULT_DEPTH,
    heartbeat: float = 1.0,
    only: Only | None = None,
    on_progress: Callable[[int], None] | None = None,
) -> SendStats:
    """Send `passes` passes of the set to `address` over UDP (module docstring)."""
    stats = SendStats()
    bucket = TokenBucket(rate)
    said = _named(set_dir, address)
    family, address = resolve(*address, "--to")
    with socket.socket(family, socket.SOCK_DGRAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 * 1024 * 1024)
        sendto = sock.sendto
        beats = _Every(heartbeat)
        reader = file_reader(set_dir, table)
        for number in range(1, passes + 1):
            datagrams = pass_datagrams(table, reader, room, depth=depth, only=only)

            def beat(number: int = number) -> None:
                if on_progress is not None:
                    on_progress(stats.datagrams)
                if beats.due():
                    body = {"pass": number, "passes": passes, "sent": stats.datagrams, **said}
                    _control(sendto, table, Kind.HEARTBEAT, number, body, address, stats)

            _send_pass(datagrams, sendto, address, bucket, stats, beat)
            for _ in range(END_REPEAT):
                end = {"pass": number, "passes": passes, **said}
                _control(sendto, table, Kind.END, number, end, address, stats)
            stats.passes = number
    return stats


def _send_pass(
    datagrams: Iterator[bytes],
    sendto: Callable[[bytes, tuple[str, int]], int],
    address: tuple[str, int],
    bucket: TokenBucket,
    stats: SendStats,
    beat: Callable[[], None],
) -> None:
    """Every datagram of a pass, the rate paid BATCH datagrams at a time (one clock read for
    them, not one each) and `beat` called every 64: this loop runs a few hundred thousand
    times a pass, so it does as little a datagram as Python allows."""
    owed = 0
    for datagram in datagrams:
        try:
            sendto(datagram, address)
        except OSError as exc:
            _send_again(sendto, datagram, address, exc)
        owed += len(datagram)
        stats.datagrams += 1
        if stats.datagrams % BATCH == 0:
            stats.wire_bytes += owed
            bucket.take(owed)
            owed = 0
            if stats.datagrams % 64 == 0:
                beat()
    stats.wire_bytes += owed
    bucket.take(owed)


def _send_again(
    sendto: Callable[[bytes, tuple[str, int]], int],
    datagram: bytes,
    address: tuple[str, int],
    exc: OSError,
) -> None:
    """After a send failed with `exc`: a refusal the network reported back loses the
    datagram (as the diode would), a full queue waits and sends it again (`_send_one`)."""
    if isinstance(exc, ConnectionRefusedError):
        return
    if exc.errno not in (errno.ENOBUFS, errno.EAGAIN):
        raise exc
    time.sleep(0.0002)
    _send_one(sendto, datagram, address)


def _send_one(
    sendto: Callable[[bytes, tuple[str, int]], int], datagram: bytes, address: tuple[str, int]
) -> None:
    """One datagram; a full interface queue (ENOBUFS) waits and tries again, an error the
    network reports back (a refused port on a two-way test network) loses the datagram,
    as the diode would."""
    while True:
        try:
            sendto(datagram, address)
            return
        except ConnectionRefusedError:
            return
        except OSError as exc:
            if exc.errno not in (errno.ENOBUFS, errno.EAGAIN):
                raise
            time.sleep(0.0002)


def _control(
    sendto: Callable[[bytes, tuple[str, int]], int],
    table: Table,
    kind: Kind,
    number: int,
    body: Mapping[str, object],
    address: tuple[str, int],
    stats: SendStats,
) -> None:
    datagram = build(kind, table.session, number, 0, 0, json.dumps(body).encode())
    _send_one(sendto, datagram, address)
    stats.datagrams += 1
    stats.wire_bytes += len(datagram)
