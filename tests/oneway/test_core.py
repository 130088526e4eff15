"""The one-way link's pure cores, end to end in one process with losses chosen by the test:
the real sender's datagrams (real RaptorQ) into the real receiver (real files, real verify)."""

from __future__ import annotations

import logging
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mirror.errors import IntegrityError
from mirror.oneway import wire
from mirror.oneway.assembly import ranges
from mirror.oneway.receiver import Outcome, Receiver
from mirror.oneway.sender import file_reader, pass_datagrams
from mirror.oneway.table import Table, read_table, safe_name
from tests.oneway.conftest import badly_signed_copy, same_tree

ROOM = wire.payload_room(1500)
SYMBOL = ROOM - 4


def table_of(set_dir: Path, **kwargs: Any) -> Table:
    # small blocks so a 5 MiB set has many of them
    return read_table(set_dir, symbol_size=SYMBOL, block_symbols=kwargs.pop("block", 200), **kwargs)


def one_pass(set_dir: Path, table: Table, **kwargs: Any) -> Iterator[bytes]:
    return pass_datagrams(table, file_reader(set_dir, table), ROOM, **kwargs)


def deliver(receiver: Receiver, datagrams: Iterator[bytes], keep: Any) -> Outcome | None:
    ended = None
    for number, datagram in enumerate(datagrams):
        if keep(number):
            ended = receiver.handle(datagram) or ended
    return ended


def test_a_datagram_round_trips_and_damage_is_dropped() -> None:
    data = wire.build(wire.Kind.DATA, 7, 1, 2, 3, b"payload")
    parsed = wire.parse(data)
    assert parsed == wire.Datagram(wire.Kind.DATA, 7, 1, 2, 3, b"payload")
    for broken in (data[:-1], data[:10], b"XX" + data[2:], data[:30] + b"Q" + data[31:]):
        assert wire.parse(broken) is None
    assert wire.payload_room(1500) == 1500 - 28 - 28
    with pytest.raises(ValueError):
        wire.payload_room(500)


@pytest.mark.parametrize(
    ("session", "file", "block", "symbol", "payload"),
    [
        (7, 1, 2, 3, b"payload"),
        (2**64 - 1, 2**32 - 1, 0, 2**32 - 1, b""),
        (0, 0, 0, 0, b"x" * 1444),
    ],
)
def test_the_senders_builder_makes_the_bytes_build_makes(
    session: int, file: int, block: int, symbol: int, payload: bytes
) -> None:
    """`wire.Builder` (the header's fixed part packed once, its CRC chained) is `build`."""
    made = wire.Builder(wire.Kind.DATA, session)(file, block, symbol, payload)
    assert made == wire.build(wire.Kind.DATA, session, file, block, symbol, payload)
    assert wire.parse(made) == wire.Datagram(wire.Kind.DATA, session, file, block, symbol, payload)


@pytest.mark.parametrize("name", ["../x", "/etc/passwd", "a//b", "a/./b", "", "a\\b"])
def test_unsafe_names_in_a_table_are_refused(name: str) -> None:
    with pytest.raises(IntegrityError, match="unsafe file name"):
        safe_name(name)


def test_block_ranges_are_compact() -> None:
    assert ranges((0, 1, 2, 3, 7, 9, 10)) == "0-3,7,9-10"
    assert ranges((5,)) == "5"


def test_a_set_through_5_percent_random_loss_lands_verified(
    packed_set: Path, spool: Path, trusted: Any
) -> None:
    table = table_of(packed_set)
    receiver = Receiver(spool, trusted)
    lose = random.Random(5)
    ended = deliver(receiver, one_pass(packed_set, table), lambda n: lose.random() >= 0.05)
    assert ended is not None and ended.landed == spool / "set-1", ended
    assert ended.repaired > 0
    sample = receiver.metrics.registry.get_sample_value
    assert sample("mirror_oneway_repaired_blocks_total") == ended.repaired
    assert sample("mirror_oneway_sets_total", {"outcome": "complete"}) == 1
    assert (sample("mirror_oneway_datagrams_total", {"kind": "data"}) or 0) > 100
    assert same_tree(packed_set, spool / "set-1")
    assert not (spool / ".oneway" / f"{table.session:016x}").exists()
    # later passes of a landed set are ignored, not assembled again
    assert deliver(Receiver(spool, trusted), one_pass(packed_set, table), lambda n: True) is None


def test_a_set_sent_again_after_it_landed_is_counted_and_the_log_says_how_to_import_it(
    packed_set: Path, spool: Path, trusted: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """Over a link with no way back, an operator whose import was refused sends the set
    again: it is not landed twice, but it is counted and said (trial37 G3: nothing was)."""
    caplog.set_level(logging.INFO, logger="mirror.oneway")
    table = table_of(packed_set)
    assert deliver(Receiver(spool, trusted), one_pass(packed_set, table), lambda n: True)
    caplog.clear()
    again = Receiver(spool, trusted)  # a restarted service: the landed marker tells it
    assert deliver(again, one_pass(packed_set, table), lambda n: True) is None
    sample = again.metrics.registry.get_sample_value
    dropped = sample("mirror_oneway_dropped_datagrams_total", {"reason": "landed"})
    assert dropped is not None and dropped > 100
    said = [r.getMessage() for r in caplog.records if "landed already as 'set-1'" in r.getMessage()]
    assert len(said) == 1, said  # once a minute, not once a datagram
    assert f"mirror transfer import {spool.absolute() / 'set-1'} " in said[0]


def test_the_command_to_import_a_landed_set_again_is_quoted_for_a_shell(
    packed_set: Path, spool: Path, trusted: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """A set's name is not signed (the sender's directory name): one that holds shell syntax
    is quoted in the command the log prints, so pasting it runs nothing else (hostile37)."""
    caplog.set_level(logging.INFO, logger="mirror.oneway")
    table = table_of(packed_set)
    marker = spool / ".oneway" / "landed" / f"{table.session:016x}"
    marker.parent.mkdir(parents=True)
    marker.write_text("x;echo PWNED $(id)\n")
    receiver = Receiver(spool, trusted)
    assert receiver.handle(next(iter(one_pass(packed_set, table)))) is None
    said = [r.getMessage() for r in caplog.records if "landed already" in r.getMessage()]
    assert len(said) == 1, said
    assert f"mirror transfer import '{spool.absolute()}/x;echo PWNED $(id)' " in said[0]


def test_bursts_of_50_lost_datagrams_cost_each_block_little(
    packed_set: Path, spool: Path, trusted: Any
) -> None:
    table = table_of(packed_set)
    receiver = Receiver(spool, trusted)
    # 50 consecutive datagrams lost in every 1000, the first burst taking the table with it
    ended = deliver(receiver, one_pass(packed_set, table), lambda n: n % 1000 >= 50)
    assert ended is not None and ended.landed is not None, ended


def test_30_percent_loss_is_incomplete_named_and_the_resend_completes_it(
    packed_set: Path, spool: Path, trusted: Any
) -> None:
    table = table_of(packed_set)
    receiver = Receiver(spool, trusted)
    lose = random.Random(30)
    deliver(receiver, one_pass(packed_set, table), lambda n: lose.random() >= 0.30)
    (ended,) = receiver.idle(0)
    assert ended.landed is None and ended.missing
    assert ended.kept == spool / ".oneway" / f"{table.session:016x}"
    argv = ended.resend_command("10.0.0.2:7400")
    assert argv[:6] == ["mirror", "transfer", "send", "set-1", "--to", "10.0.0.2:7400"]
    names = [f.name for f in table.files]
    only: dict[int, frozenset[int] | None] = {}
    for item in ended.missing:
        assert "--only" in argv
        only[names.index(item.name)] = frozenset(item.blocks)
    assert len(only) < len(table.files)  # the small files came through
    sent = list(one_pass(packed_set, table, only=only))
    for datagram in map(wire.parse, sent):  # only what is missing goes again
        assert datagram is not None
        if datagram.kind is wire.Kind.DATA:
            assert datagram.block in only[datagram.file]  # type: ignore[operator]
    landed = deliver(receiver, iter(sent), lambda n: True)
    assert landed is not None and landed.landed is not None
    assert same_tree(packed_set, spool / "set-1")


def test_a_receiver_stopped_mid_set_keeps_its_blocks_for_the_next_pass(
    packed_set: Path, spool: Path, trusted: Any
) -> None:
    table = table_of(packed_set)
    first = Receiver(spool, trusted)
    datagrams = list(one_pass(packed_set, table, depth=2))
    deliver(first, iter(datagrams[: len(datagrams) // 2]), lambda n: True)
    first.save()  # what the receiver's loop does every second; a kill loses at most that
    kept = set(first.sessions[table.session].assembly.done)  # type: ignore[union-attr]
    assert kept
    second = Receiver(spool, trusted)

    def not_kept(number: int) -> bool:
        datagram = wire.parse(datagrams[number])
        assert datagram is not None
        return datagram.kind is not wire.Kind.DATA or (datagram.file, datagram.block) not in kept

    # the next pass loses every datagram of the blocks already on disk: they must come from it
    ended = deliver(second, iter(datagrams), not_kept)
    assert ended is not None and ended.landed is not None, ended
    assert same_tree(packed_set, spool / "set-1")


def test_a_whole_set_that_does_not_verify_is_reported_and_removed(
    packed_set: Path, spool: Path, tmp_path: Path
) -> None:
    from mirror.transferset.keys import generate_keypair, load_trusted_keys

    other = generate_keypair(tmp_path / "other")
    receiver = Receiver(spool, load_trusted_keys([other.public_path]))
    table = table_of(packed_set)
    ended = deliver(receiver, one_pass(packed_set, table), lambda n: True)
    assert ended is not None and ended.landed is None and ended.error
    assert not (spool / "set-1").exists()
    # the rest of the pass (and a second one) is not assembled again, and nothing is kept
    deliver(receiver, one_pass(packed_set, table), lambda n: True)
    assert not (spool / ".oneway" / f"{table.session:016x}").exists()
    sample = receiver.metrics.registry.get_sample_value
    assert sample("mirror_oneway_sets_total", {"outcome": "refused"}) == 1


def test_after_a_copy_that_does_not_verify_the_genuine_set_lands_without_a_restart(
    packed_set: Path, spool: Path, tmp_path: Path, trusted: Any
) -> None:
    """W2: a copy with one character of its signature changed has the genuine set's manifest,
    so its session. The genuine set sent next is its own: named in its incomplete report (N3),
    landed when whole, though the receiver was never restarted."""
    bad = badly_signed_copy(packed_set, tmp_path / "badsig")
    receiver = Receiver(spool, trusted)
    refused = deliver(receiver, one_pass(bad, table_of(bad)), lambda n: True)
    assert refused is not None and refused.name == "badsig" and refused.error, refused
    table = table_of(packed_set)
    assert table.session == refused.session
    lose = random.Random(31)
    deliver(receiver, one_pass(packed_set, table), lambda n: lose.random() >= 0.30)
    (incomplete,) = receiver.idle(0)
    assert incomplete.name == "set-1" and incomplete.missing_bytes > 0, incomplete
    ended = deliver(receiver, one_pass(packed_set, table), lambda n: True)
    assert ended is not None and ended.landed == spool / "set-1", ended
    assert same_tree(packed_set, spool / "set-1")


def test_the_receiver_has_no_way_to_send() -> None:
    """No call that could put a packet on the wire anywhere in the receiving end's modules
    (the link tests prove it on the wire: nothing goes back)."""
    import ast

    import mirror.oneway.assembly
    import mirror.oneway.receiver

    sending = {"send", "sendto", "sendall", "sendmsg", "connect", "connect_ex", "sendfile"}
    for module in (mirror.oneway.receiver, mirror.oneway.assembly):
        tree = ast.parse(Path(module.__file__ or "").read_text())
        called = {
            node.func.attr
            for node in ast.walk(tree)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
        }
        assert not called & sending, module.__name__


def test_the_token_bucket_holds_the_rate_and_sleeps_in_batches() -> None:
    from mirror.oneway.rate import TokenBucket

    now = [0.0]
    sleeps: list[float] = []

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        now[0] += seconds

    bucket = TokenBucket(1_000_000, burst=10_000, clock=lambda: now[0], sleep=sleep)
    for _ in range(1000):
        bucket.take(1000)
    # 1 MB at 1 MB/s after a 10 kB burst: 0.99 s, within one slack
    assert 0.985 <= now[0] <= 0.99 + 0.0021
    assert len(sleeps) < 1000 / 2  # not a sleep per datagram
    assert TokenBucket(None).take(10**9) is None  # no cap: never waits


def test_silence_mid_pass_is_told_from_a_finished_sender_by_its_heartbeats(
    packed_set: Path, spool: Path, trusted: Any
) -> None:
    import json

    table = table_of(packed_set)
    receiver = Receiver(spool, trusted)
    datagrams = list(one_pass(packed_set, table))
    beat = json.dumps({"pass": 1, "passes": 2, "sent": 10}).encode()
    receiver.handle(wire.build(wire.Kind.HEARTBEAT, table.session, 1, 0, 0, beat))
    deliver(receiver, iter(datagrams[: len(datagrams) // 3]), lambda n: True)
    assert receiver.idle(3600) == []  # not silent for long enough yet
    (ended,) = receiver.idle(0)
    assert "not even a heartbeat" in ended.reason and "pass 1 of 2" in ended.reason
    # a sender that said its last pass is over: quiet, not a dead link
    other = Receiver(tmp := spool.parent / "other", trusted)
    deliver(other, iter(datagrams[: len(datagrams) // 3]), lambda n: True)
    end = json.dumps({"pass": 1, "passes": 1}).encode()
    finished = other.handle(wire.build(wire.Kind.END, table.session, 1, 0, 0, end))
    assert finished is not None and finished.reason == "the sender's last pass is over"
    assert tmp.is_dir()


def test_a_set_whose_table_never_arrived_ends_and_names_the_whole_set_to_send_again(
    packed_set: Path, spool: Path, trusted: Any
) -> None:
    """At heavy loss every copy of a table fragment can be lost: the last pass's END (or,
    with no END, the idle timeout) still ends the session, and `--once` with it."""
    import json

    table = table_of(packed_set)
    without_table = [
        d
        for d in one_pass(packed_set, table)
        if (parsed := wire.parse(d)) is not None and parsed.kind is not wire.Kind.TABLE
    ]
    status = json.dumps({"pass": 1, "passes": 1, "to": "10.0.0.2:7400", "set": "/usb/set-1"})
    end = wire.build(wire.Kind.END, table.session, 1, 0, 0, status.encode())
    receiver = Receiver(spool, trusted)
    deliver(receiver, iter(without_table), lambda n: True)
    ended = receiver.handle(end)
    assert ended is not None and ended.tableless and ended.landed is None
    assert ended.name == "set-1" and "file table never arrived" in ended.reason
    resend = ["mirror", "transfer", "send", "/usb/set-1", "--to", "10.0.0.2:7400"]
    assert ended.resend_command("x") == resend  # the whole set: no --only
    assert ended.as_dict("x")["resend"] == " ".join(resend)

    silent = Receiver(spool.parent / "silent", trusted)
    beat = json.dumps({"pass": 1, "passes": 2, "sent": 10}).encode()
    silent.handle(wire.build(wire.Kind.HEARTBEAT, table.session, 1, 0, 0, beat))
    deliver(silent, iter(without_table), lambda n: True)
    (idle,) = silent.idle(0)
    assert idle.tableless and "not even a heartbeat" in idle.reason
    assert silent.idle(0) == []  # said once
