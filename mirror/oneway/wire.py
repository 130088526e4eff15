"""The datagram format of a one-way link; the one owner of its bytes (docs/architecture.md).

Every datagram is `HEADER | payload | crc32`, big-endian:

    magic "MD" (2) | version (1) | kind (1) | session (8) | file (4) | block (4) | symbol (4)

- DATA: payload is one RaptorQ packet (its own 4-byte payload id, then one symbol) of
  block `block` of file `file`; `symbol` is the packet's symbol number (ESI).
- TABLE: payload is fragment `block` of `symbol` fragments of the file table (JSON).
- HEARTBEAT: payload is JSON {"pass", "passes", "sent"}: the sender is alive; `file`
  is the pass number.
- END: payload is JSON {"pass", "passes"}: a pass is over (`file` is the pass number).

Promises: `parse` returns None for anything that is not a whole, undamaged datagram of
this version (wrong magic, version, kind, length or CRC): a corrupt datagram is dropped,
never used. A whole datagram is still unauthenticated (anyone on the link can make one
with a right CRC), so every field is held to a bound before it is used: `table_error` for
a TABLE's fragment numbers (1 to MAX_TABLE_FRAGMENTS fragments), `parse_status` for the
JSON of a HEARTBEAT or END (an object whose pass and passes are 1 <= pass <= passes <
2**32; `to` and `set` kept only when they look like an address and an absolute path),
`Table.decode` and `Table.data_error` (mirror.oneway.table) for the rest. The CRC only
guards against damage in transit; integrity is the set's own signature and hashes, checked
by `transfer verify` once the set is assembled.
"""

from __future__ import annotations

import json
import re
import socket
import struct
import zlib
from enum import IntEnum
from typing import NamedTuple, TypeGuard

from mirror.errors import ConfigError, TemporaryFailure

MAGIC = b"MD"
VERSION = 1
HEADER = struct.Struct("!2sBBQIII")
CRC = struct.Struct("!I")
_NUMBERS = struct.Struct("!III")  # file, block, symbol: the header's end
_FIXED = HEADER.size - _NUMBERS.size
OVERHEAD = HEADER.size + CRC.size
IPV4_UDP = 28
DEFAULT_MTU = 1500
MIN_MTU = 576
MAX_TABLE_FRAGMENTS = 4096
"""The receiver also holds at most 4 MiB of a table (receiver.HELD_BYTES): some 40,000
files."""
MAX_PASSES = (1 << 32) - 1
_ADDRESS = re.compile(r"[A-Za-z0-9._:\[\]-]{1,255}:[0-9]{1,5}")


class Kind(IntEnum):
    DATA = 1
    TABLE = 2
    HEARTBEAT = 3
    END = 4


class Datagram(NamedTuple):
    """One parsed datagram (a tuple: made once per datagram, so as cheap as Python allows)."""

    kind: Kind
    session: int
    file: int
    block: int
    symbol: int
    payload: bytes


def payload_room(mtu: int) -> int:
    """Bytes of payload a datagram carries within an IPv4 MTU."""
    if mtu < MIN_MTU:
        raise ValueError(f"an MTU of {mtu} is below the minimum of {MIN_MTU}")
    return mtu - IPV4_UDP - OVERHEAD


def build(kind: Kind, session: int, file: int, block: int, symbol: int, payload: bytes) -> bytes:
    head = HEADER.pack(MAGIC, VERSION, kind, session, file, block, symbol)
    return head + payload + CRC.pack(zlib.crc32(payload, zlib.crc32(head)))


class Builder:
    """`build` for one kind and session, as the sender makes a datagram a few hundred
    thousand times a pass: the fixed part of the header packed once, the rest in one
    `pack_into` of a reused buffer, the CRC chained from the fixed part's (the same bytes
    as `build`'s)."""

    def __init__(self, kind: Kind, session: int) -> None:
        self._fixed = HEADER.pack(MAGIC, VERSION, kind, session, 0, 0, 0)[:_FIXED]
        self._crc = zlib.crc32(self._fixed)

    def __call__(self, file: int, block: int, symbol: int, payload: bytes) -> bytes:
        tail = _NUMBERS.pack(file, block, symbol)
        crc = zlib.crc32(payload, zlib.crc32(tail, self._crc))
        return b"".join((self._fixed, tail, payload, CRC.pack(crc)))


def parse(data: bytes | memoryview) -> Datagram | None:
    """The datagram, or None when it is not a whole, undamaged one of this version."""
    if len(data) < OVERHEAD:
        return None
    magic, version, kind, session, file, block, symbol = HEADER.unpack_from(data)
    if magic != MAGIC or version != VERSION or kind not in _KINDS:
        return None
    view = memoryview(data)
    (crc,) = CRC.unpack_from(view, len(view) - CRC.size)
    if zlib.crc32(view[: len(view) - CRC.size]) != crc:
        return None
    payload = bytes(view[HEADER.size : -CRC.size])
    return Datagram(_KIND_OF[kind], session, file, block, symbol, payload)


def table_error(datagram: Datagram) -> str | None:
    """Why a TABLE datagram's fragment numbers are impossible (None: they are not)."""
    count, index = datagram.symbol, datagram.block
    if not 1 <= count <= MAX_TABLE_FRAGMENTS:
        return f"a table of {count} fragments (1 to {MAX_TABLE_FRAGMENTS})"
    if index >= count:
        return f"fragment {index} of {count}"
    return None


class Status(NamedTuple):
    """A HEARTBEAT's or END's body: the sender's pass, and (when given and well formed) its
    `--to` and the set's absolute directory, which a resend command names."""

    number: int
    passes: int
    to: str | None
    set_dir: str | None


def parse_status(payload: bytes) -> Status | None:
    """The body of a HEARTBEAT or END, or None when it is not one (module docstring)."""
    try:
        body = json.loads(payload)
    except (ValueError, RecursionError):
        return None
    if not isinstance(body, dict):
        return None
    number, passes = body.get("pass"), body.get("passes")
    if not (_whole(number) and _whole(passes) and 1 <= number <= passes <= MAX_PASSES):
        return None
    to, where = body.get("to"), body.get("set")
    return Status(
        number,
        passes,
        to if isinstance(to, str) and _ADDRESS.fullmatch(to) else None,
        where
        if isinstance(where, str)
        and where.startswith("/")
        and where.isprintable()
        and len(where) < 4096
        else None,
    )


def _whole(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


_KINDS = frozenset(int(k) for k in Kind)
_KIND_OF = {int(k): k for k in Kind}


def resolve(host: str, port: int, option: str) -> tuple[socket.AddressFamily, tuple[str, int]]:
    """The address family and socket address of HOST:PORT, looked up once (a name given to
    `sendto` would be looked up for every datagram); a name that does not resolve is one
    line: exit 2, or 75 when the resolver could not answer now."""
    try:
        found = socket.getaddrinfo(host, port, type=socket.SOCK_DGRAM)
    except socket.gaierror as exc:
        if exc.errno == socket.EAI_AGAIN:
            raise TemporaryFailure(f"{option} {host}: the name cannot be looked up now") from None
        raise ConfigError(f"{option} {host}:{port}: {exc.strerror}") from None
    family, _, _, _, address = found[0]
    return family, (str(address[0]), int(address[1]))
