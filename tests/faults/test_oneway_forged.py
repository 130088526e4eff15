"""The one-way receiver against forged datagrams: whole, a right CRC, and a field out of its
bounds in every way reading each parser suggested (issue 38, class 1). Each is dropped and
counted by reason, the receiver goes on, and the real set sent next lands; memory is held to
the stated bounds whatever arrives (sessions, datagrams held per session, blocks decoded).

In one process with the real receiver, the real sender's datagrams and real RaptorQ; the
command itself meets the same datagrams in test_oneway_service.py."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

from mirror.oneway import wire
from mirror.oneway.metrics import ReceiverMetrics
from mirror.oneway.receiver import HELD_BYTES, MAX_SESSIONS, WAITING, Receiver
from mirror.oneway.table import MAX_FILE_SIZE
from tests.fixtures.forged import (
    SYMBOL,
    dropped,
    filler,
    forged_table,
    real_pass,
    sha,
    status,
    table_datagrams,
)
from tests.oneway.conftest import packed_set, same_tree  # noqa: F401  (the fixture)

Kind = wire.Kind


def forged(seed: int, more: list[list[Any]], **fields: Any) -> list[bytes]:
    return table_datagrams(*forged_table(seed, more, **fields))


def with_table(seed: int, *datagrams: tuple[int, int, int, bytes]) -> list[bytes]:
    """A forged session's good table (one file `x` of 3 blocks), then DATA (file, block,
    symbol, payload) of it."""
    session, data = forged_table(seed, [["x", 3 * 200 * SYMBOL, sha(seed + 1)]])
    made = [wire.build(Kind.DATA, session, *fields) for fields in datagrams]
    return table_datagrams(session, data) + made


PACKET = b"\0\0\0\0" + bytes(SYMBOL)
NESTED = b"[" * 100_000 + b"]" * 100_000
CASES: dict[str, tuple[str, list[bytes]]] = {
    "fragment index past its count": (
        "table_fragment",
        [wire.build(Kind.TABLE, 1, 0, 5, 2, b"{}"), wire.build(Kind.TABLE, 1, 0, 0, 2, b"{")],
    ),
    "no fragments": ("table_fragment", [wire.build(Kind.TABLE, 2, 0, 0, 0, b"")]),
    "2**32-1 fragments": ("table_fragment", [wire.build(Kind.TABLE, 3, 0, 0, 2**32 - 1, b"{")]),
    "a file of size -1": ("table", forged(4, [["x", -1, sha(5)]])),
    "a file of size 2**60": ("table", forged(6, [["x", 2**60, sha(7)]])),
    "a size of Infinity": ("table", forged(8, [["x", float("inf"), sha(9)]])),
    "a size of true": ("table", forged(10, [["x", True, sha(11)]])),
    "symbol_size 70000": ("table", forged(12, [], symbol_size=70000)),
    "symbol_size 0": ("table", forged(13, [], symbol_size=0)),
    "block_symbols 10**6": ("table", forged(14, [], block_symbols=10**6)),
    "16 TiB in 1-symbol blocks": (
        "table",
        forged(15, [["x", MAX_FILE_SIZE, sha(16)]], block_symbols=1, symbol_size=516),
    ),
    "a redundancy of NaN": ("table", forged(17, [], redundancy=float("nan"))),
    "a redundancy of 400 digits": ("table", forged(38, [], redundancy=10**400 - 1)),
    "a and a/b in one table": ("table", forged(18, [["a", 1, sha(19)], ["a/b", 1, sha(20)]])),
    "a name twice": ("table", forged(21, [["a", 1, sha(22)], ["a", 1, sha(23)]])),
    "a name of 300 characters": ("table", forged(24, [["x" * 300, 1, sha(25)]])),
    "a lone surrogate in a name": ("table", forged(26, [["\udc80", 1, sha(27)]])),
    "a newline in a name": ("table", forged(28, [["a\nb", 1, sha(29)]])),
    "a set named x/y": ("table", forged(30, [], name="x/y")),
    "a set named .oneway": ("table", forged(31, [], name=".oneway")),
    "a sha256 that is not one": ("table", forged(32, [["x", 1, "nope"]])),
    "files that are not a list": ("table", forged(33, [], files={"a": 1})),
    "a session of -1": ("table", forged(34, [], session="-1")),
    "another session's manifest": ("table", forged(35, [], files=[["manifest.json", 1, sha(1)]])),
    "a table nested 100,000 deep": ("table", table_datagrams(36, NESTED)),
    "a table that is a list": ("table", table_datagrams(37, b"[1,2,3]")),
    "DATA of a file past the table": ("data", with_table(40, (5, 0, 0, PACKET))),
    "DATA of a block past the file": ("data", with_table(41, (1, 3, 0, PACKET))),
    "an empty DATA packet": ("data", with_table(42, (1, 0, 0, b""))),
    "a DATA packet of 3 bytes": ("data", with_table(43, (1, 0, 0, b"abc"))),
    "a DATA packet of source block 5": ("data", with_table(44, (1, 0, 0, b"\5" + PACKET[1:]))),
    "a DATA packet too long": ("data", with_table(45, (1, 0, 0, PACKET + b"x"))),
    "an END that is a list": ("status", [status(Kind.END, 50, [1, 1])]),
    "an END of pass Infinity": ("status", [status(Kind.END, 51, {"pass": 1e999, "passes": 1})]),
    "a HEARTBEAT nested deep": ("status", [status(Kind.HEARTBEAT, 52, NESTED)]),
    "a HEARTBEAT of pass 0": ("status", [status(Kind.HEARTBEAT, 53, {"pass": 0, "passes": 1})]),
}  # fmt: skip


@pytest.mark.parametrize("case", list(CASES))
def test_a_forged_datagram_is_dropped_and_counted_and_the_real_set_lands(
    case: str,
    packed_set: Path,  # noqa: F811
    tmp_path: Path,
    trusted: Any,
) -> None:
    spool = tmp_path / "spool"
    reason, datagrams = CASES[case]
    receiver = Receiver(spool, trusted)
    for datagram in datagrams:
        assert receiver.handle(datagram) is None
    assert dropped(receiver.metrics, reason) >= 1, case
    _, real = real_pass(packed_set)
    outcomes = [o for o in map(receiver.handle, real) if o is not None]
    assert [o.landed for o in outcomes] == [spool / "set-1"], outcomes
    assert same_tree(packed_set, spool / "set-1")


def test_a_drop_is_said_once_a_minute_per_reason_with_the_count_unsaid(
    caplog: pytest.LogCaptureFixture, tmp_path: Path, trusted: Any
) -> None:
    spool = tmp_path / "spool"
    now = [0.0]
    metrics = ReceiverMetrics(clock=lambda: now[0])
    receiver = Receiver(spool, trusted, metrics=metrics)
    flood = wire.build(Kind.TABLE, 1, 0, 9, 2, b"{}")
    with caplog.at_level(logging.WARNING, "mirror.oneway.receiver"):
        for _ in range(100):
            receiver.handle(flood)
        now[0] = 59.0
        receiver.handle(flood)
        now[0] = 60.0
        receiver.handle(flood)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2, lines
    assert "fragment 9 of 2" in lines[0] and "(100 more since the last line)" in lines[1]
    assert dropped(metrics, "table_fragment") == 102


def test_sessions_past_the_bound_put_the_least_recently_heard_out_and_it_resumes(
    packed_set: Path,  # noqa: F811
    tmp_path: Path,
    trusted: Any,
) -> None:
    spool = tmp_path / "spool"
    table, real = real_pass(packed_set)
    receiver = Receiver(spool, trusted)
    half = len(real) // 2
    for datagram in real[:half]:
        assert receiver.handle(datagram) is None
    receiver.save()
    # a flood of new sessions, each one DATA datagram: the real one is put out of memory
    for number in range(3 * MAX_SESSIONS):
        receiver.handle(wire.build(Kind.DATA, 1000 + number, 0, 0, 0, PACKET))
    assert len(receiver.sessions) == MAX_SESSIONS and table.session not in receiver.sessions
    evicted = receiver.metrics.registry.get_sample_value("mirror_oneway_evicted_sessions_total")
    assert evicted == 2 * MAX_SESSIONS + 1
    # its blocks stayed on disk: the rest of the pass (its tables come again) completes it
    state = json.loads((spool / ".oneway" / f"{table.session:016x}" / "state.json").read_bytes())
    assert state["done"]
    outcomes = [o for o in map(receiver.handle, real[half:] + real) if o is not None]
    assert [o.landed for o in outcomes] == [spool / "set-1"], outcomes


def test_datagrams_held_before_a_table_stay_within_the_session_budget(
    tmp_path: Path, trusted: Any
) -> None:
    spool = tmp_path / "spool"
    receiver = Receiver(spool, trusted)
    jumbo = bytes(wire.payload_room(65535))  # the largest datagram one can send
    for number in range(MAX_SESSIONS):
        for _ in range(200):
            receiver.handle(wire.build(Kind.DATA, number, 0, 0, 0, jumbo))
        for index in range(3100):  # 4.3 MB of a table: over the budget
            receiver.handle(wire.build(Kind.TABLE, number, 0, index, 4096, jumbo[:1400]))
    for session in receiver.sessions.values():
        held = sum(len(d.payload) for d in session.waiting)
        held += sum(map(len, session.fragments.values()))
        assert held == session.held <= HELD_BYTES and len(session.waiting) <= WAITING
    assert dropped(receiver.metrics, "waiting") > 0
    assert dropped(receiver.metrics, "table_fragment") > 0


def test_a_table_takes_the_place_of_the_data_held_before_it(tmp_path: Path, trusted: Any) -> None:
    spool = tmp_path / "spool"
    receiver = Receiver(spool, trusted)
    session, data = forged_table(200, [["x", 3 * 200 * SYMBOL, sha(201)]])
    jumbo = bytes(wire.payload_room(65535))
    for _ in range(100):  # a session's budget of DATA before its table, and more
        receiver.handle(wire.build(Kind.DATA, session, 1, 0, 0, jumbo))
    room = HELD_BYTES - receiver.sessions[session].held
    receiver.handle(wire.build(Kind.DATA, session, 1, 0, 0, bytes(room - 10)))  # to the brim
    assert receiver.sessions[session].held == HELD_BYTES - 10
    for datagram in table_datagrams(session, data):
        receiver.handle(datagram)
    assert receiver.sessions[session].table is not None  # the table came in all the same
    assert dropped(receiver.metrics, "waiting") == 100 - HELD_BYTES // len(jumbo) + 1


def test_blocks_decoded_at_once_are_bounded_across_sessions(tmp_path: Path, trusted: Any) -> None:
    spool = tmp_path / "spool"
    receiver = Receiver(spool, trusted, max_decoders=8)
    for seed in range(4):  # four sessions, each with 3 blocks of a file begun
        for datagram in with_table(100 + seed, *((1, b, 0, PACKET) for b in range(3))):
            receiver.handle(datagram)
    assert len(receiver.sessions) == 4
    assert len(receiver.decoders.held) == 8


def on_disk(root: Path) -> int:
    """Bytes the files under `root` take on disk (sparse files: what was written)."""
    return sum(p.stat().st_blocks * 512 for p in root.rglob("*") if p.is_file())


BLOCK = 200 * SYMBOL
BUDGET = 4 * 1024 * 1024


def test_forged_blocks_stay_within_the_spool_budget_and_the_real_set_lands(
    packed_set: Path,  # noqa: F811  (about 3 MiB: within the budget)
    tmp_path: Path,
    trusted: Any,
) -> None:
    """W1: forged DATA for forged files filled the spool without bound and nothing removed
    it. Eight forged sessions of 4 garbage blocks (9 MiB) against a 4 MiB budget: the disk
    held stays within it, the oldest sessions' files are removed, then the real set lands."""
    spool = tmp_path / "spool"
    receiver = Receiver(spool, trusted, budget=BUDGET)
    sessions = []
    for seed in range(8):
        session, datagrams = filler(300 + seed, blocks=4)
        sessions.append(session)
        assert [receiver.handle(d) for d in datagrams] == [None] * len(datagrams)
        receiver.save()
        assert on_disk(spool / ".oneway") <= BUDGET + 64 * 1024  # the state files besides
    sample = receiver.metrics.registry.get_sample_value
    assert sample("mirror_oneway_blocks_total") == 32  # every forged block was written
    assert (sample("mirror_oneway_removed_sessions_total") or 0) >= 4
    assert not (spool / ".oneway" / f"{sessions[0]:016x}").exists()
    assert sessions[0] not in receiver.sessions and sessions[0] not in receiver.budget.used
    _, real = real_pass(packed_set)
    outcomes = [o for o in map(receiver.handle, real) if o is not None]
    assert [o.landed for o in outcomes] == [spool / "set-1"], outcomes
    assert same_tree(packed_set, spool / "set-1")
    assert on_disk(spool / ".oneway") <= BUDGET + 64 * 1024


def test_a_table_claiming_more_than_the_spool_budget_is_dropped(
    tmp_path: Path, trusted: Any
) -> None:
    spool = tmp_path / "spool"
    receiver = Receiver(spool, trusted, budget=BUDGET)
    session, datagrams = filler(320, blocks=2, claim=1 << 30)  # the trial's 1 GiB file
    for datagram in datagrams:
        receiver.handle(datagram)
    assert dropped(receiver.metrics, "table") == 1
    assert not (spool / ".oneway" / f"{session:016x}").exists()
    assert on_disk(spool) < 64 * 1024


def test_sessions_an_earlier_run_left_count_against_the_budget(
    tmp_path: Path, trusted: Any
) -> None:
    spool = tmp_path / "spool"
    first = Receiver(spool, trusted, budget=BUDGET)
    old, datagrams = filler(330, blocks=3)
    for datagram in datagrams:
        first.handle(datagram)
    first.close()
    again = Receiver(spool, trusted, budget=BUDGET)
    assert again.budget.used[old] >= 3 * BLOCK
    for datagram in filler(331, blocks=12)[1]:  # 12 more: 15 blocks of 286 KiB exceed 4 MiB
        again.handle(datagram)
    assert not (spool / ".oneway" / f"{old:016x}").exists()
    assert on_disk(spool / ".oneway") <= BUDGET + 64 * 1024
