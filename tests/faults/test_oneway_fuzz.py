"""A bounded fuzz of the one-way receiver's datagram parsing (issue 38, class 1): a seeded
random loop (the same datagrams every run, a few seconds in all) over every header field at
its boundary values, every field of a file table and of a HEARTBEAT or END replaced by a
hostile value, and random bytes with a right CRC. After each datagram no exception has left
the receiver and its memory is within the stated bounds; every datagram was counted as
taken or corrupt; and the real set sent after all of it lands."""

from __future__ import annotations

import json
import random
import zlib
from pathlib import Path
from typing import Any

from mirror.oneway import fec, wire
from mirror.oneway.receiver import HELD_BYTES, MAX_SESSIONS, Receiver
from mirror.oneway.sender import file_reader, pass_datagrams
from mirror.oneway.table import read_table
from tests.fixtures.forged import ROOM, SYMBOL, forged_table, sha, status, table_datagrams
from tests.oneway.conftest import packed_set, same_tree  # noqa: F401  (the fixture)

SEED = 38
ROUNDS = 3000
WORDS = [0, 1, 2, 3, 199, 200, 201, 4095, 4096, 4097, 2**31, 2**32 - 2, 2**32 - 1]
HOSTILE: list[Any] = [
    -1, 0, 1, 2**31, 2**63, 2**64, 1e308, float("inf"), float("nan"), "", "x", None, [], {},
    True, "a/../b", "/abs", "a" * 300, "\udc80", [[["x"]]], "0" * 16, "f" * 64,
    10**400, -(10**400), 2**1024, 10**4000, "9" * 400, 1.5, -0.0, 4.000001, [1], {"a": 1},
]  # fmt: skip
"""Boundary values, integers past every float (`float(10**400)` raises OverflowError) and
past the 64-bit ones, and every JSON type where another is wanted."""
FIELDS = ["session", "name", "symbol_size", "block_symbols", "redundancy", "files"]


def header_fuzz(rng: random.Random, sessions: list[int]) -> bytes:
    """Every header field at a boundary (or at random), a payload of a telling length."""
    kind = rng.choice([1, 2, 3, 4, 1, 2, 0, 5, 255])
    packet = fec.packet_size(SYMBOL)
    length = rng.choice([0, 1, 3, 4, 5, packet - 1, packet, packet + 1, rng.randrange(2000)])
    payload = rng.randbytes(length)
    if kind == 1 and payload and rng.random() < 0.5:
        payload = bytes([rng.choice([0, 0, 1, 255])]) + payload[1:]  # source block 0 mostly
    fields = [rng.choice(WORDS) if rng.random() < 0.8 else rng.randrange(2**32) for _ in "fbs"]
    head = wire.HEADER.pack(wire.MAGIC, wire.VERSION, kind, rng.choice(sessions), *fields)
    return head + payload + wire.CRC.pack(zlib.crc32(head + payload))


def table_fuzz(rng: random.Random, seed: int) -> list[bytes]:
    """A forged table with one field, or one part of one file entry, made hostile."""
    more = [["x", rng.choice([0, 1, 200 * SYMBOL, 2**40]), sha(seed + 1)], ["y/z", 3, sha(seed)]]
    session, data = forged_table(seed, more)
    document = json.loads(data)
    value = rng.choice(HOSTILE)
    if rng.random() < 0.5:
        document[rng.choice(FIELDS)] = value
    else:
        entry = rng.choice(document["files"])
        entry[rng.randrange(3)] = value
    return table_datagrams(session, json.dumps(document).encode())


def status_fuzz(rng: random.Random, session: int) -> bytes:
    body = {"pass": 1, "passes": 1, "to": "127.0.0.1:7400", "set": "/srv/sets/set-1"}
    body[rng.choice(list(body))] = rng.choice(HOSTILE)
    kind = rng.choice([wire.Kind.HEARTBEAT, wire.Kind.END])
    return status(kind, session, body if rng.random() < 0.8 else rng.choice(HOSTILE))


def test_every_table_field_at_every_hostile_value_is_dropped_or_taken_never_fatal(
    tmp_path: Path, trusted: Any
) -> None:
    """The sweep the random loop may miss (issue 38 trial, W1: a redundancy of 400 digits
    ended the service): each top-level field and each part of a file entry of a good forged
    table, set to each HOSTILE value in turn. Each table is dropped (reason `table`) or,
    when the value happens to be valid, taken: never an exception."""
    receiver = Receiver(tmp_path / "spool", trusted, max_sessions=4)
    sent = taken = 0
    for number, (where, value) in enumerate(
        [(field, value) for field in [*FIELDS, 0, 1, 2] for value in HOSTILE]
    ):
        session, data = forged_table(5000 + number, [["x", 3, sha(number)]])
        document = json.loads(data)
        if isinstance(where, int):
            document["files"][1][where] = value
        else:
            document[where] = value
        for datagram in table_datagrams(session, json.dumps(document).encode()):
            receiver.handle(datagram)
        sent += 1
        held = receiver.sessions.get(session)
        taken += held is not None and held.table is not None
    dropped = receiver.metrics.registry.get_sample_value(
        "mirror_oneway_dropped_datagrams_total", {"reason": "table"}
    )
    assert (dropped or 0) + taken == sent and taken < sent / 10, (dropped, taken, sent)


def test_fuzzed_datagrams_never_stop_the_receiver_and_the_real_set_lands(
    packed_set: Path,  # noqa: F811
    tmp_path: Path,
    trusted: Any,
) -> None:
    table = read_table(packed_set, symbol_size=SYMBOL, block_symbols=200)
    real = list(pass_datagrams(table, file_reader(packed_set, table), ROOM))
    receiver = Receiver(tmp_path / "spool", trusted)
    rng = random.Random(SEED)
    forged = [forged_table(seed, [["x", 200 * SYMBOL, sha(seed)]]) for seed in range(3)]
    sessions = [table.session, 0, 2**64 - 1, *(session for session, _ in forged)]
    for session, data in forged:  # sessions with a good table, for DATA to hit
        for datagram in table_datagrams(session, data):
            receiver.handle(datagram)
    handled = 0
    for number in range(ROUNDS):
        pick = number % 3
        if pick == 0:
            made = [header_fuzz(rng, sessions)]
        elif pick == 1:
            made = table_fuzz(rng, 1000 + number)
        else:
            made = [status_fuzz(rng, rng.choice(sessions))]
        for datagram in made:
            receiver.handle(datagram)  # raises nothing, whatever it is
            handled += 1
        assert len(receiver.sessions) <= MAX_SESSIONS
        assert all(s.held <= HELD_BYTES for s in receiver.sessions.values())
        assert len(receiver.decoders.held) <= receiver.decoders.limit
    sample = receiver.metrics.registry.get_sample_value
    kinds = [{"kind": kind.name.lower()} for kind in wire.Kind]
    taken = sum(sample("mirror_oneway_datagrams_total", kind) or 0 for kind in kinds)
    corrupt = sample("mirror_oneway_corrupt_datagrams_total") or 0
    assert taken + corrupt == handled + sum(len(table_datagrams(*f)) for f in forged)
    # garbage fed to the real session's blocks may cost it a pass (its hashes catch it)
    outcomes = [o for o in map(receiver.handle, real * 3) if o is not None]
    assert [o.landed for o in outcomes if o.landed] == [tmp_path / "spool" / "set-1"], outcomes
    assert same_tree(packed_set, tmp_path / "spool" / "set-1")
