"""The one-way receiver against forged sessions (issue 38 trial 3: W2, W6, W9, G1, G2, O20):
a forged table for a session in progress, forged tables of many files, an END or HEARTBEAT
for a session never heard, a resend command a forger writes, a table of the largest blocks,
and the rest of a refused set's passes. In one process with the real receiver, the real
sender's datagrams and real RaptorQ, as tests/faults/test_oneway_forged.py."""

from __future__ import annotations

import json
import math
import resource
import signal
import socket
import time
from pathlib import Path
from typing import Any

from mirror.oneway import fec, wire
from mirror.oneway.assembly import INODE_BYTES, MAX_DECODING_BYTES, SESSION_INODES
from mirror.oneway.receiver import Outcome, Receiver, run
from mirror.oneway.table import (
    DEFAULT_REDUNDANCY,
    MAX_BLOCK_BYTES,
    MAX_SYMBOL_SIZE,
    SEND_BLOCK_BYTES,
    Table,
    read_table,
)
from tests.fixtures.forged import (
    SYMBOL,
    dropped,
    forged_table,
    packet,
    real_pass,
    sha,
    status,
    table_datagrams,
)
from tests.oneway.conftest import badly_signed_copy, packed_set, same_tree  # noqa: F401  (the fixture)

Kind = wire.Kind
END = {"pass": 1, "passes": 1}


def ended(receiver: Receiver, datagrams: list[bytes]) -> list[Outcome]:
    return [o for o in map(receiver.handle, datagrams) if o is not None]


def sets(receiver: Receiver, outcome: str) -> float:
    value = receiver.metrics.registry.get_sample_value(
        "mirror_oneway_sets_total", {"outcome": outcome}
    )
    return value or 0.0


def on_disk(spool: Path) -> list[Path]:
    """Files and folders held for sessions not landed."""
    return [p for p in (spool / ".oneway").rglob("*") if "landed" not in p.parts]


# W9 and G1: a session only heard of is no set


def test_an_end_or_heartbeat_for_a_session_never_heard_is_no_set(
    tmp_path: Path, trusted: Any
) -> None:
    """W9: one forged END ended `receive --once` (exit 75) with a resend command naming
    the forger's directory and address, and counted an incomplete set (G1)."""
    receiver = Receiver(tmp_path / "spool", trusted)
    forged = {**END, "to": "10.66.6.6:7400", "set": "/srv/sets/secret-set-99"}
    assert receiver.handle(status(Kind.END, 0x4B4AEC4CE5FD2490, forged)) is None
    beat = {"pass": 1, "passes": 2, "sent": 1, "set": "/tmp/$(touch x)"}
    assert receiver.handle(status(Kind.HEARTBEAT, 0x1234, beat)) is None
    assert receiver.idle(0) == []
    assert sets(receiver, "incomplete") == 0


def test_receive_once_goes_on_past_a_forged_end(tmp_path: Path, trusted: Any) -> None:
    """W9 through `run(once=True)`, what `transfer receive --once` calls: the forged END is
    read and the command has not ended."""
    receiver = Receiver(tmp_path / "spool", trusted)
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    sock.setblocking(False)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sender:
        sender.sendto(status(Kind.END, 0x4B4AEC4CE5FD2490, END), sock.getsockname())
    sample = receiver.metrics.registry.get_sample_value
    read = lambda: (sample("mirror_oneway_datagrams_total", {"kind": "end"}) or 0) >= 1  # noqa: E731
    deadline = time.monotonic() + 60  # generous: the END is in the socket's queue already
    outcomes = run(
        receiver,
        sock,
        once=True,
        idle_timeout=None,
        on_outcome=lambda o: None,
        should_stop=lambda: read() or time.monotonic() > deadline,
    )
    sock.close()
    assert read() and outcomes == []


def test_a_resend_command_says_what_the_datagrams_named_and_keeps_the_tables_name(
    packed_set: Path,  # noqa: F811
    tmp_path: Path,
    trusted: Any,
) -> None:
    """G1: the directory and address of a resend command come from HEARTBEAT and END
    bodies nobody signed: the outcome says so (its reason and `resend_unauthenticated`),
    and a directory that is not the table's set is not named."""
    table, real = real_pass(packed_set)
    receiver = Receiver(tmp_path / "spool", trusted)
    ended(receiver, real[: len(real) // 3])
    forged = {**END, "to": "10.66.6.6:7400", "set": "/srv/sets/secret-set-99"}
    (outcome,) = ended(receiver, [status(Kind.END, table.session, forged)])
    assert outcome.name == "set-1" and outcome.missing
    command = outcome.resend_command("10.0.0.1:7400")
    assert command[3:6] == ["set-1", "--to", "10.66.6.6:7400"], command
    assert outcome.hearsay == ("address",) and "not authenticated" in outcome.reason
    assert outcome.as_dict("x")["resend_unauthenticated"] == ["address"]
    # a session that brought DATA but no table: named from the END, and said so
    session, _ = forged_table(70, [["x", 3, sha(71)]])
    early = wire.build(Kind.DATA, session, 1, 0, 0, packet())
    said = {**END, "to": "10.0.0.2:7400", "set": "/usb/set-7"}
    (tableless,) = ended(receiver, [early, status(Kind.END, session, said)])
    assert tableless.tableless and tableless.hearsay == ("directory", "address")
    assert "not authenticated" in tableless.reason
    assert sets(receiver, "incomplete") == 2


# O20: the rest of a refused set's passes


def test_the_rest_of_a_refused_sets_passes_is_not_reported_again(
    packed_set: Path,  # noqa: F811
    tmp_path: Path,
    trusted: Any,
) -> None:
    """O20: after a copy whose signature does not verify was refused, its second pass and
    END were reported "incomplete: its file table never arrived" with a resend command for
    the bad copy. Now nothing; the genuine set sent next lands."""
    bad = badly_signed_copy(packed_set, tmp_path / "badsig")
    spool = tmp_path / "spool"
    receiver = Receiver(spool, trusted)
    _, bad_pass = real_pass(bad)
    end = status(Kind.END, read_table(bad, symbol_size=SYMBOL).session, {"pass": 2, "passes": 2})
    (refused,) = ended(receiver, bad_pass)
    assert refused.error and refused.name == "badsig"
    data_first = [d for d in bad_pass if d[3] == Kind.DATA][:50]  # DATA before its table
    assert ended(receiver, data_first + bad_pass + [end]) == []
    assert receiver.idle(0) == []
    assert sets(receiver, "incomplete") == 0 and sets(receiver, "refused") == 1
    _, real = real_pass(packed_set)
    assert [o.landed for o in ended(receiver, real)] == [spool / "set-1"]


# W2: a forged table for a session in progress


def forged_copy(table: Table, **changes: Any) -> list[bytes]:
    """The real table as seen on the link, changed: what the trial's forger sent."""
    document = table.as_dict()
    document.update(changes)
    return table_datagrams(table.session, json.dumps(document).encode())


def test_a_forged_table_for_a_live_session_gives_way_to_the_real_one(
    packed_set: Path,  # noqa: F811
    tmp_path: Path,
    trusted: Any,
) -> None:
    """W2: the real set's table with manifest.json's sha256 cut to the session id's 16
    digits and zeros, sent first, kept the real set out for as long as the receiver ran.
    The real manifest that arrives contradicts it: the real table heard next takes its
    place, the set lands, and the forged table repeated is dropped."""
    table, real = real_pass(packed_set)
    files = [list(f) for f in table.as_dict()["files"]]  # type: ignore[union-attr]
    files[0][2] = files[0][2][:16] + "0" * 48
    spool = tmp_path / "spool"
    receiver = Receiver(spool, trusted)
    forged = forged_copy(table, files=files)
    assert ended(receiver, forged) == []
    assert receiver.sessions[table.session].table != table  # the forged one was taken
    assert ended(receiver, real) == []  # pass 1: every block, the manifest contradicts it
    # the pass's closing tables took its place, and the manifest that came is remembered
    assert receiver.sessions[table.session].table == table
    assert receiver.proven[table.session] == table.files[0].sha256
    # one DATA that fits no block throws doubt on the real table: the forgery still fails
    doubt = wire.build(Kind.DATA, table.session, 0, 0, 0, b"x")
    assert ended(receiver, [doubt, *forged]) == []
    assert dropped(receiver.metrics, "table") == 1
    assert receiver.sessions[table.session].table == table
    outcomes = ended(receiver, forged + real)  # pass 2, the forger still at it
    assert [o.landed for o in outcomes] == [spool / "set-1"], outcomes
    assert same_tree(packed_set, spool / "set-1")


def test_a_forged_table_with_another_files_digest_gives_way_to_the_real_one(
    packed_set: Path,  # noqa: F811
    tmp_path: Path,
    trusted: Any,
) -> None:
    """W2 with the manifest's digest kept right and another file's forged: that file hashes
    otherwise when the pass is over, and the real table heard next takes the place."""
    table, real = real_pass(packed_set)
    files = [list(f) for f in table.as_dict()["files"]]  # type: ignore[union-attr]
    files[-1][2] = "0" * 64
    spool = tmp_path / "spool"
    receiver = Receiver(spool, trusted)
    ended(receiver, forged_copy(table, files=files))
    outcomes = ended(receiver, real + real)
    assert [o.landed for o in outcomes] == [spool / "set-1"], outcomes


def test_a_forged_table_of_another_geometry_gives_way_to_the_real_one(
    packed_set: Path,  # noqa: F811
    tmp_path: Path,
    trusted: Any,
) -> None:
    """W2, a forged table whose blocks are not the real ones: the real DATA does not fit
    it (dropped, reason `data`), which contradicts it, and the real table takes its place."""
    table, real = real_pass(packed_set)
    spool = tmp_path / "spool"
    receiver = Receiver(spool, trusted)
    ended(receiver, forged_copy(table, symbol_size=SYMBOL - 64))
    outcomes = ended(receiver, real + real)
    assert dropped(receiver.metrics, "data") > 0
    assert [o.landed for o in outcomes] == [spool / "set-1"], outcomes


# W6: inodes


def test_forged_tables_of_many_files_make_no_files(tmp_path: Path, trusted: Any) -> None:
    """W6: 10 forged tables of 30,000 empty files made 300,036 files in DIR/.oneway. A
    table alone makes nothing on disk now: files are made as their blocks arrive."""
    spool = tmp_path / "spool"
    receiver = Receiver(spool, trusted)
    for seed in range(10):
        more = [[f"d{n % 7}/f{n}", 0, sha(0)] for n in range(3000)]
        session, data = forged_table(400 + seed, more)
        assert ended(receiver, table_datagrams(session, data)) == []
        assert receiver.sessions[session].table is not None
    assert on_disk(spool) == []
    assert len(receiver.idle(0)) == 10  # each is still reported (it had a table) ...
    assert on_disk(spool) == []  # ... and nothing is kept for it
    # a block written: the state, which holds the table, is charged to the budget too
    receiver.handle(wire.build(Kind.DATA, session, 0, 0, 0, packet()))
    assert receiver.budget.used[session] >= len(data) + 100
    assert receiver.budget.entries[session] == 1 + SESSION_INODES


def test_files_a_forger_makes_are_charged_and_bounded(tmp_path: Path, trusted: Any) -> None:
    """W6: forged tables of many 1-byte files, each file's one block sent: each file and
    folder is charged a file system block to the spool budget and counted against the
    bound on files and folders; the oldest sessions are removed to stay within both."""
    spool = tmp_path / "spool"
    receiver = Receiver(spool, trusted, budget=1024 * 1024)
    receiver.budget.max_entries = 300
    for seed in range(6):
        more = [[f"d/f{n}", 1, sha(n)] for n in range(120)]
        session, data = forged_table(500 + seed, more)
        made = table_datagrams(session, data)
        made += [wire.build(Kind.DATA, session, n, 0, 0, packet()) for n in range(1, 121)]
        ended(receiver, made)
        assert len(on_disk(spool)) <= 300
    assert receiver.metrics.registry.get_sample_value("mirror_oneway_blocks_total") == 720
    assert (
        receiver.metrics.registry.get_sample_value("mirror_oneway_removed_sessions_total") or 0
    ) >= 3
    receiver.close()  # the state files written: on disk, what was charged
    held = sum(receiver.budget.entries.values())
    assert len(on_disk(spool)) == held <= 300 and receiver.budget.total <= 1024 * 1024
    assert held % (120 + 1 + SESSION_INODES) == 0  # each session: 120 files, d/, its own 3
    again = Receiver(spool, trusted, budget=1024 * 1024)  # a restart counts the same
    assert sum(again.budget.entries.values()) == held
    assert again.budget.total >= INODE_BYTES * held


def test_a_file_the_spool_cannot_hold_drops_its_session_not_the_receiver(
    packed_set: Path,  # noqa: F811
    tmp_path: Path,
    trusted: Any,
) -> None:
    """Files are made when their blocks come, so what the spool's file system cannot hold
    (here a file size over RLIMIT_FSIZE: EFBIG, as a file over the file system's largest)
    is met on a DATA datagram, not the table: the session is dropped and removed (reason
    `table`), the receiver goes on and the real set lands."""
    spool = tmp_path / "spool"
    receiver = Receiver(spool, trusted)
    session, data = forged_table(700, [["x", 100 * SYMBOL, sha(701)]], block_symbols=1)
    ended(receiver, table_datagrams(session, data))
    far = wire.build(Kind.DATA, session, 1, 99, 0, packet())  # one symbol: a whole block
    limit = resource.getrlimit(resource.RLIMIT_FSIZE)
    handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024, limit[1]))
    try:
        outcome = receiver.handle(far)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, limit)
        signal.signal(signal.SIGXFSZ, handler)
    assert outcome is None and dropped(receiver.metrics, "table") == 1
    assert session not in receiver.sessions and on_disk(spool) == []
    _, real = real_pass(packed_set)
    assert [o.landed for o in ended(receiver, real)] == [spool / "set-1"]


# G2: memory a forged table of the largest blocks can make the receiver hold


def test_blocks_being_decoded_hold_a_bounded_number_of_bytes(tmp_path: Path, trusted: Any) -> None:
    """G2: one forged table of 32 blocks of 16 MiB and half of each block's symbols made
    the receiver reach 386 MiB. The decoders' packets are held to a byte bound (the oldest
    block given up first); here 8 MiB, to keep the test small."""
    symbol = MAX_SYMBOL_SIZE
    session, data = forged_table(600, [["x", 32 * 256 * symbol, sha(601)]],
                                 symbol_size=symbol, block_symbols=256)  # fmt: skip
    receiver = Receiver(tmp_path / "spool", trusted)
    receiver.decoders.max_bytes = 8 * 1024 * 1024
    ended(receiver, table_datagrams(session, data))
    body = bytes(fec.packet_size(symbol))
    for block in range(32):
        for esi in range(8):
            payload = b"\0" + esi.to_bytes(3, "big") + body[4:]
            receiver.handle(wire.build(Kind.DATA, session, 1, block, esi, payload))
            assert receiver.decoders.total <= 8 * 1024 * 1024
    assert receiver.decoders.total == sum(receiver.decoders.fed.values())
    assert len(receiver.decoders.held) < 32


def test_a_sender_of_a_large_mtu_makes_blocks_its_depth_of_which_the_receiver_holds(
    packed_set: Path,  # noqa: F811
) -> None:
    """G2's other half: this release's sender cuts blocks of at most 4 MiB, so its 16
    blocks at a time (with their repair symbols) fit the receiver's byte bound."""
    table = read_table(packed_set, symbol_size=MAX_SYMBOL_SIZE)
    assert table.block_bytes <= SEND_BLOCK_BYTES
    packets = table.block_symbols + table.repair_count(table.block_bytes)
    assert 16 * packets * fec.packet_size(table.symbol_size) <= MAX_DECODING_BYTES
    # an earlier sender's 16 MiB blocks fit at the --depth 4 the README tells it to use
    largest = MAX_BLOCK_BYTES // MAX_SYMBOL_SIZE
    packets = largest + math.ceil(largest * DEFAULT_REDUNDANCY)
    assert 4 * packets * fec.packet_size(MAX_SYMBOL_SIZE) <= MAX_DECODING_BYTES
