"""The receiving end: a socket that is only ever bound (it never sends, never connects),
sessions assembled on disk, complete sets verified and landed, incomplete ones reported.

Promises:
- Not one packet leaves this end: the socket is bound and read, nothing else
  (tests/oneway prove it with a counter on the reverse path).
- A complete set is landed only after every file matches the table's sha256 and the
  ordinary `verify_set` (signature, chain fields, every hash) passes; it is moved into
  DIR/NAME with one rename. An incomplete set stays in DIR/.oneway/SESSION with what it
  has (within the disk budget below).
- A set ends incomplete when the sender's last pass is over (END) or nothing arrived for
  `idle_timeout` seconds; `Outcome` then names each missing file, its missing blocks and
  bytes, and `resend_command` is what to run on the connected side.
- Heartbeats tell "the sender is quiet" (its last END) from "the link is down" (no
  datagram, no END): `Outcome.reason` says which.
- Datagrams are not authenticated (the set's signature is), so no datagram can stop the
  receiver: every field is checked against its bound before it is used (mirror.oneway.wire,
  table), and what fails is dropped and counted by reason (`ReceiverMetrics.drop`).
- Memory is bounded whatever arrives: at most MAX_SESSIONS sessions are held (the one
  heard from least recently is put out of memory for a new one; its blocks on disk are
  kept and it resumes when heard again); each holds at most WAITING datagrams and
  HELD_BYTES bytes of table fragments and DATA that came before its table (a table's
  fragments take the place of the oldest such DATA, so a table always fits); at most
  MAX_DECODERS blocks are decoded at once across all of them (assembly.DecoderPool).
- Disk is bounded too (mirror.oneway.budget): the blocks of sessions not yet landed take at
  most the spool budget; the sessions written to least recently are removed (files and
  state) to make room, and a table claiming more than the budget is dropped. A full disk
  removes the oldest other session; with none left, a service (`stop_when_full` False)
  removes the session that met it and goes on (said in the log), `--once` stops (exit 75).
- A set that arrives whole but does not verify is reported and its session removed (state
  and files): the same set sent again, or the genuine one after a bad copy, starts afresh;
  the rest of the bad copy's passes is not reported again.
- Only a session that brought a table or DATA is a set (`_Session.is_set`): a HEARTBEAT or
  END alone is reported and counted never, and does not end `--once`. What a resend command
  takes from HEARTBEAT/END bodies is named (`Outcome.hearsay`) and said in its reason.
- A table that what arrives contradicts (a file hashing otherwise, DATA fitting none of its
  blocks) gives way to the next other table heard, and a table naming another manifest
  than the one that arrived for its session is dropped (docs/architecture.md, one-way
  link datagrams): a forged table costs a set in progress a pass at most.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import select
import shlex
import shutil
import socket
import time
from collections import OrderedDict
from collections.abc import Callable, Container, Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from mirror.errors import ConfigError, IntegrityError, MirrorError, TemporaryFailure
from mirror.fsutil import disk_full, fsync_dir, is_disk_full
from mirror.integrity import hash_bytes, hash_file
from mirror.oneway import fec
from mirror.oneway.assembly import (
    INODE_BYTES,
    MAX_DECODERS,
    NOTHING,
    Assembly,
    DecoderPool,
    Missing,
    landed_marker,
    ranges,
    work_root,
)
from mirror.oneway.budget import SPOOL_BUDGET, SpoolBudget
from mirror.oneway.metrics import ReceiverMetrics
from mirror.oneway.table import Table
from mirror.oneway.wire import Datagram, Kind, Status, parse, parse_status, resolve, table_error
from mirror.transferset.format import MANIFEST
from mirror.transferset.keys import PublicKey
from mirror.transferset.reader import verify_set
from mirror.units import format_size

log = logging.getLogger(__name__)
SAVE_EVERY = 1.0
RECV_SIZE = 65536
WAITING = 2048
"""DATA datagrams held before the table: the sender repeats its table every 1024."""
HELD_BYTES = 4 * 1024 * 1024
"""Bytes of table fragments and early DATA held per session."""
MAX_SESSIONS = 16
MAX_REFUSED = 64
"""Refused sets whose later passes are ignored (a digest of each one's files)."""
WAIT = 0.2
_UNHOLDABLE = {errno.EFBIG, errno.ENAMETOOLONG, errno.EEXIST, errno.ENOTDIR, errno.EISDIR}
"""A table the spool's file system cannot make (its limits, not a fault of the spool)."""
_KIND_NAMES = {kind: kind.name.lower() for kind in Kind}


@dataclass
class Outcome:
    """How a session ended: landed, incomplete (what is missing) or refused (why)."""

    name: str
    session: int
    landed: Path | None = None
    kept: Path | None = None
    missing: list[Missing] = field(default_factory=list)
    reason: str = ""
    error: str | None = None
    repaired: int = 0
    sent_to: str | None = None
    """The sender's own `--to` and set directory (its HEARTBEAT and END name them): the
    resend command is then right even when this end listens on 0.0.0.0."""
    sent_from: str | None = None
    hearsay: tuple[str, ...] = ()
    """What of the resend command only a HEARTBEAT or END said (not authenticated: anyone
    on the link can send one); said in `reason` and `as_dict`."""
    tableless: bool = False
    """Datagrams came but never the whole file table: nothing could be kept, and the whole
    set is to be sent again."""

    @property
    def missing_bytes(self) -> int:
        return sum(m.bytes for m in self.missing)

    def resend_command(self, to: str) -> list[str]:
        """What to run on the connected side, in the directory holding the set."""
        argv = [
            "mirror",
            "transfer",
            "send",
            self.sent_from or self.name,
            "--to",
            self.sent_to or to,
        ]
        for item in self.missing:
            partial = len(item.blocks) < item.block_count
            argv += ["--only", f"{item.name}:{ranges(item.blocks)}" if partial else item.name]
        return argv

    def as_dict(self, to: str) -> dict[str, object]:
        return {
            "name": self.name,
            "session": f"{self.session:016x}",
            "complete": self.landed is not None,
            "landed": str(self.landed) if self.landed else None,
            "kept": str(self.kept) if self.kept else None,
            "missing": [m.as_dict() for m in self.missing],
            "missing_bytes": self.missing_bytes,
            "reason": self.reason,
            "error": self.error,
            "repaired_blocks": self.repaired,
            "resend_unauthenticated": list(self.hearsay),
            "resend": (
                shlex.join(self.resend_command(to)) if self.missing or self.tableless else None
            ),
        }


class _Session:
    def __init__(self) -> None:
        self.fragments: dict[int, bytes] = {}
        self.fragment_count = 0
        self.fragment_bytes = 0
        self.waiting_bytes = 0
        self.table: Table | None = None
        self.assembly: Assembly | None = None
        self.ended = False
        self.heard: tuple[int, int] | None = None
        self.sent_to: str | None = None
        self.sent_from: str | None = None
        """(pass, passes) of the sender's last HEARTBEAT or END: where it was when last heard."""
        self.waiting: list[Datagram] = []
        """DATA that came before the table (a receiver started mid-pass, a table lost):
        kept, up to WAITING datagrams and HELD_BYTES, and placed once the table is known."""
        self.data = False
        """DATA came for it: with a table, what makes it a set to report (anyone can send
        a HEARTBEAT or END; a session heard of only by them is none)."""
        self.refused = False
        """Its table is of a set refused already: the rest of its passes say nothing."""
        self.doubted = False
        """Its table was contradicted (a file's bytes hash otherwise, DATA that does not
        fit it): the next different table heard takes its place (docs/architecture.md)."""

    @property
    def is_set(self) -> bool:
        """A set to report when it ends: it brought a table or DATA, and is not refused."""
        return not self.refused and (self.assembly is not None or self.data)

    @property
    def held(self) -> int:
        """Bytes of fragments and waiting DATA held (at most HELD_BYTES)."""
        return self.fragment_bytes + self.waiting_bytes

    def hear(self, datagram: Datagram, metrics: ReceiverMetrics) -> Status | None:
        """A HEARTBEAT's or END's body, noted (None: not one, dropped and counted)."""
        status = parse_status(datagram.payload)
        if status is None:
            metrics.drop("status", f"a {datagram.kind.name} whose body is not one")
            return None
        self.heard = (status.number, status.passes)
        self.sent_to = status.to or self.sent_to
        self.sent_from = status.set_dir or self.sent_from
        return status

    def refuse(self, why: str, metrics: ReceiverMetrics) -> None:
        """Its table is of a set refused already: what it holds let go, the rest unsaid."""
        self.refused, self.data = True, False
        self.waiting.clear()
        self.waiting_bytes = 0
        metrics.drop("table", why)

    def forget_fragments(self) -> None:
        self.fragments.clear()
        self.fragment_bytes = 0

    def wait(self, datagram: Datagram, metrics: ReceiverMetrics) -> None:
        """Hold DATA that came before the table, within the session's budget."""
        if self.refused:
            metrics.drop("waiting", "DATA of a set refused already")
            return
        self.data = True
        size = len(datagram.payload)
        if len(self.waiting) >= WAITING or self.held + size > HELD_BYTES:
            metrics.drop("waiting", "DATA before its table, over the session's budget")
            return
        self.waiting.append(datagram)
        self.waiting_bytes += size

    def fragment(self, datagram: Datagram, metrics: ReceiverMetrics) -> bytes | None:
        """Hold one TABLE fragment (a bad one dropped, counted); the table's bytes once
        every fragment is here."""
        error = table_error(datagram)
        if error is None and datagram.symbol != self.fragment_count:  # another table
            self.forget_fragments()
            self.fragment_count = datagram.symbol
        size = len(datagram.payload)
        new = datagram.block not in self.fragments
        if error is None and new and self.fragment_bytes + size > HELD_BYTES:
            error = f"a table of more than {HELD_BYTES} bytes"
        if error is not None:
            metrics.drop("table_fragment", error)
            return None
        if new:
            for _ in range(self.make_room(size)):
                metrics.drop("waiting", "DATA before its table, making room for the table")
            self.fragments[datagram.block] = datagram.payload
            self.fragment_bytes += size
        if len(self.fragments) < self.fragment_count:
            return None
        data = b"".join(self.fragments[i] for i in range(self.fragment_count))
        self.forget_fragments()
        return data

    def make_room(self, size: int) -> int:
        """Drop the oldest DATA waiting until `size` more bytes of table fit: the table is
        what lets every datagram be placed. The number dropped."""
        dropped = 0
        while self.waiting and self.held + size > HELD_BYTES:
            self.waiting_bytes -= len(self.waiting.pop(0).payload)
            dropped += 1
        return dropped


class _Held:
    """The sessions a receiver holds, in memory and on disk, within their bounds: looked
    up or made (the least recently heard evicted), saved, removed or reset (files, state,
    decoders, budget), and what a full or unholdable disk does to them (module docstring).
    """

    def __init__(
        self,
        spool: Path,
        max_decoders: int,
        max_sessions: int,
        metrics: ReceiverMetrics | None,
        budget: int,
        stop_when_full: bool,
    ) -> None:
        self.spool = spool
        self.decoders = DecoderPool(max_decoders)
        self.max_sessions = max_sessions
        self.metrics = metrics or ReceiverMetrics()
        self.sessions: OrderedDict[int, _Session] = OrderedDict()
        """Least recently heard first."""
        self.landed: dict[int, str] = {}
        """Sessions landed, by number: the name their set landed as."""
        self.stop_when_full = stop_when_full
        work_root(spool).mkdir(parents=True, exist_ok=True)
        self.budget = SpoolBudget(spool, budget)

    def _session(self, number: int) -> _Session | None:
        """The session `number` (None: landed already), made when new, the least recently
        heard put out of memory when MAX_SESSIONS are held."""
        session = self.sessions.get(number)
        if session is not None:
            self.sessions.move_to_end(number)
            return session
        if number in self.landed or landed_marker(self.spool, number).exists():
            self._sent_again(number)
            return None
        while len(self.sessions) >= self.max_sessions:
            oldest, evicted = self.sessions.popitem(last=False)
            if evicted.assembly is not None:
                evicted.assembly.close()
            self.metrics.evict(oldest)
        session = self.sessions[number] = _Session()
        return session

    def _sent_again(self, number: int) -> None:
        """A datagram of a session that landed already: dropped and counted (the rest of
        its passes, or the set sent again), and the log says where its set is, once a
        minute: an operator resending a set the import refused, over a link with no way
        back, is told how to import it again instead of hearing nothing."""
        if number not in self.landed:
            with contextlib.suppress(OSError, UnicodeDecodeError):
                self.landed[number] = landed_marker(self.spool, number).read_text().strip()
            self.landed.setdefault(number, "?")
        name = self.landed[number]
        spool = self.spool.absolute()
        where = shlex.quote(str(spool / name)) if name != "?" else f"{shlex.quote(str(spool))}/NAME"
        self.metrics.drop(
            "landed",
            f"session {number:016x} landed already as {name!r} (the rest of its passes, or the "
            f"set sent again: a set is landed once); to import it again: mirror transfer "
            f"import {where} (when the import refused it: its copy under {spool}/refused/)",
        )

    def save(self) -> None:
        for number, session in list(self.sessions.items()):
            if session.assembly is not None and session.assembly.dirty:
                self._guarded(number, session.assembly.save)

    def _guarded(self, number: int, step: Callable[[], Outcome | None]) -> Outcome | None:
        """What `step` for session `number` gives; None when the disk was full (`_full`)."""
        try:
            return step()
        except OSError as exc:
            if exc.errno in _UNHOLDABLE:  # files are made as blocks come (assembly)
                self.metrics.drop("table", f"the spool cannot hold it: {exc.strerror}")
                self._remove(number, "the spool cannot hold its files")
                return None
            if not is_disk_full(exc):
                raise
            self._full(number, exc)
            return None

    def _full(self, number: int, exc: OSError) -> None:
        """The disk is full while session `number` wrote: the oldest other session is
        removed; with none left, `--once` stops (exit 75) and a service removes this one
        and goes on (a forged session must not stop it)."""
        other = self.budget.oldest_other(number)
        if other is not None:
            self._remove(other, "the disk holding the spool is full")
        elif self.stop_when_full:
            raise exc
        else:
            self._remove(number, "the disk holding the spool is full (no other session to remove)")

    def _remove(self, number: int, why: str) -> None:
        """Put session `number` out of memory and remove its files and state (not landed,
        not verified): a later table for it starts afresh."""
        self._reset(number, self.sessions.pop(number, None))
        self.metrics.remove(number, why)

    def _reset(self, number: int, session: _Session | None) -> None:
        """Session `number`'s files, state and decoders removed: it starts afresh."""
        if session is not None and session.assembly is not None:
            session.assembly.discard()
        self.decoders.forget(number)
        self.budget.forget(number)
        shutil.rmtree(work_root(self.spool) / f"{number:016x}", ignore_errors=True)

    def close(self) -> None:
        """Save and close every session (one the full disk cannot save keeps its last state)."""
        for session in self.sessions.values():
            if session.assembly is not None:
                session.assembly.close(or_discard=not self.stop_when_full)


class Receiver(_Held):
    """Lands every set arriving on one UDP port into a spool directory (module docstring)."""

    def __init__(
        self,
        spool: Path,
        trusted: Mapping[str, PublicKey],
        *,
        max_decoders: int = MAX_DECODERS,
        max_sessions: int = MAX_SESSIONS,
        metrics: ReceiverMetrics | None = None,
        on_block: Callable[[int], None] | None = None,
        budget: int = SPOOL_BUDGET,
        stop_when_full: bool = False,
    ) -> None:
        super().__init__(spool, max_decoders, max_sessions, metrics, budget, stop_when_full)
        self.trusted = trusted
        self.on_block = on_block
        self.refused: OrderedDict[str, None] = OrderedDict()
        self.proven: OrderedDict[int, str] = OrderedDict()  # manifests (_hashes_hold)
        self.last_seen = time.monotonic()

    def handle(self, data: bytes | memoryview) -> Outcome | None:
        """Take one datagram; an Outcome when a session ended with it."""
        datagram = parse(data)
        if datagram is None:
            self.metrics.corrupt.inc()
            return None
        self.last_seen = time.monotonic()
        self.metrics.by_kind[_KIND_NAMES[datagram.kind]].inc()
        session = self._session(datagram.session)
        if session is None:
            return None
        return self._guarded(datagram.session, lambda: self._dispatch(session, datagram))

    def _dispatch(self, session: _Session, datagram: Datagram) -> Outcome | None:
        if datagram.kind is Kind.DATA:
            return self._data(session, datagram)
        if datagram.kind is Kind.TABLE:
            return self._table(session, datagram)
        if datagram.kind is Kind.END:
            return self._end(session, datagram)
        session.hear(datagram, self.metrics)
        return None

    def _data(self, session: _Session, datagram: Datagram) -> Outcome | None:
        assembly = session.assembly
        if assembly is None:
            session.wait(datagram, self.metrics)
            return None
        error = assembly.table.data_error(datagram.file, datagram.block, datagram.payload)
        if error is not None:
            self.metrics.drop("data", error)
            session.doubted = True
            return None
        session.ended = False
        repaired = assembly.repaired
        length = assembly.table.block_length(datagram.file, datagram.block)
        made = NOTHING
        if (datagram.file, datagram.block) not in assembly.done:
            made = assembly.cost(datagram.file)
            for victim in self.budget.victims(datagram.session, length, *made):
                self._remove(victim, "to keep within the spool budget")
        if assembly.add(datagram.file, datagram.block, datagram.payload):
            self.budget.wrote(datagram.session, length, *made)
            self.metrics.blocks.inc()
            self.metrics.repaired.inc(assembly.repaired - repaired)
            if self.on_block is not None:
                self.on_block(length)
            if assembly.complete:
                return self._finish(session)
        return None

    def _table(self, session: _Session, datagram: Datagram) -> Outcome | None:
        if session.table is not None and not session.doubted:
            return None
        data = session.fragment(datagram, self.metrics)
        if data is None:
            return None
        assembly = self._assembly(data, session, datagram.session)
        if assembly is None:
            return None
        session.table, session.assembly = assembly.table, assembly
        session.refused = session.doubted = False
        if assembly.complete:
            return self._finish(session)
        waiting, session.waiting = session.waiting, []
        session.waiting_bytes = 0
        for early in waiting:
            outcome = self._data(session, early)
            if outcome is not None:
                return outcome
        return None

    def _assembly(self, data: bytes, session: _Session, number: int) -> Assembly | None:
        """The session's assembly from its table's bytes; None (dropped, counted) for a
        table that breaks a bound, is another session's, of a set refused already (the
        session then says nothing more), the one in place (contradicted: another is waited
        for), or the spool cannot hold. A table that takes a contradicted one's place
        starts the session afresh."""
        try:
            table = _table_of(data, number, self.budget, self.refused, self.proven.get(number))
            if table == session.table:
                return None
            if session.assembly is not None:
                self._reset(number, session)
                self.metrics.remove(number, "its table was contradicted; another table came")
            return Assembly(self.spool, table, pool=self.decoders)
        except _RefusedAlready as exc:
            session.refuse(str(exc), self.metrics)
        except IntegrityError as exc:
            self.metrics.drop("table", str(exc))
        except OSError as exc:
            if exc.errno not in _UNHOLDABLE:
                raise
            self.metrics.drop("table", f"the spool cannot hold it: {exc.strerror}")
        return None

    def _end(self, session: _Session, datagram: Datagram) -> Outcome | None:
        status = session.hear(datagram, self.metrics)
        if status is None or status.number != status.passes:
            return None
        if session.ended or not session.is_set:
            return None
        session.ended = True
        return self._incomplete(session, "the sender's last pass is over")

    def idle(self, idle_timeout: float) -> list[Outcome]:
        """Sessions to report when nothing arrived for `idle_timeout` seconds: those with a
        table, and those that brought DATA and whose sender was heard (a HEARTBEAT or END)
        but not their table; never one only heard of (`_Session.is_set`)."""
        if time.monotonic() - self.last_seen < idle_timeout:
            return []
        found = []
        for session in list(self.sessions.values()):
            reportable = session.assembly is not None or session.heard
            if not session.ended and session.is_set and reportable:
                session.ended = True
                found.append(self._incomplete(session, _silent(session, idle_timeout)))
        return found

    def _incomplete(self, session: _Session, reason: str) -> Outcome:
        self.metrics.sets.labels("incomplete").inc()
        assembly = session.assembly
        if assembly is None:
            number = next(n for n, held in self.sessions.items() if held is session)
            return _tableless(number, session, reason)
        self._guarded(assembly.table.session, assembly.save)
        return _kept(session, assembly, reason)

    def _finish(self, session: _Session) -> Outcome | None:
        assembly = session.assembly
        assert assembly is not None
        table = assembly.table
        assembly.close()
        assembly.materialise()
        if not _hashes_hold(assembly, self.proven):
            session.doubted = True
            assembly.save()
            return None
        outcome = Outcome(table.name, table.session, repaired=assembly.repaired)
        try:
            verify_set(assembly.set_dir, self.trusted)
        except MirrorError as exc:
            self.metrics.sets.labels("refused").inc()
            outcome.error = str(exc)
            outcome.reason = "the set arrived whole but does not verify"
            self._remove(table.session, "its set does not verify")
            _remember(self.refused, table)
            return outcome
        outcome.landed = _land(self.spool, assembly)
        self.metrics.sets.labels("complete").inc()
        del self.sessions[table.session]
        self.budget.forget(table.session)
        self.landed[table.session] = outcome.landed.name if outcome.landed else "?"
        return outcome


def _hashes_hold(assembly: Assembly, proven: OrderedDict[int, str]) -> bool:
    """Whether every file of a complete assembly hashes as its table says; each that does
    not is to be fetched again, and the table is contradicted. A manifest whose sha256
    starts with the session id is the session's: its digest is remembered in `proven`."""
    table = assembly.table
    for index, entry in enumerate(table.files):
        sha256 = hash_file(assembly.set_dir / entry.name).sha256
        if index == 0 and sha256.startswith(f"{table.session:016x}"):
            proven[table.session] = sha256
            while len(proven) > MAX_REFUSED:
                proven.popitem(last=False)
        if sha256 != entry.sha256:
            log.warning("%s: hash differs from the file table; fetching it again", entry.name)
            assembly.forget_file(index)
    return assembly.complete


def _kept(session: _Session, assembly: Assembly, reason: str) -> Outcome:
    """An incomplete set whose blocks are kept: what is missing, and where. The sender's
    directory is named only when it is the table's set (its last component)."""
    sent_from = session.sent_from
    if sent_from is not None and PurePosixPath(sent_from).name != assembly.table.name:
        sent_from = None
    hearsay = _hearsay(sent_from, session.sent_to)
    return Outcome(
        assembly.table.name,
        assembly.table.session,
        kept=assembly.dir,
        missing=assembly.missing(),
        reason=reason + _hearsay_note(hearsay),
        repaired=assembly.repaired,
        sent_to=session.sent_to,
        sent_from=sent_from,
        hearsay=hearsay,
    )


def _tableless(number: int, session: _Session, reason: str) -> Outcome:
    """An incomplete set whose file table never arrived: the whole set to send again."""
    name = Path(session.sent_from).name if session.sent_from else f"session {number:016x}"
    hearsay = _hearsay(session.sent_from, session.sent_to)
    return Outcome(
        name,
        number,
        reason=f"{reason}, and its file table never arrived (nothing of it could be kept)"
        + _hearsay_note(hearsay),
        sent_to=session.sent_to,
        sent_from=session.sent_from,
        hearsay=hearsay,
        tableless=True,
    )


def _hearsay(sent_from: str | None, sent_to: str | None) -> tuple[str, ...]:
    return tuple(what for what, said in (("directory", sent_from), ("address", sent_to)) if said)


def _hearsay_note(hearsay: tuple[str, ...]) -> str:
    """What the printed resend command took from unauthenticated datagrams, said."""
    if not hearsay:
        return ""
    return (
        f" (the resend command's {' and '.join(hearsay)} are as the sender's heartbeats "
        "said: datagrams are not authenticated, check them before running it)"
    )


def _silent(session: _Session, idle_timeout: float) -> str:
    """Why a session ended when nothing arrived: the link or the sender, and where it was."""
    where = (
        f", last heard in pass {session.heard[0]} of {session.heard[1]}" if session.heard else ""
    )
    return (
        f"nothing arrived for {idle_timeout:g}s mid-pass, not even a heartbeat "
        f"(the link is down or the sender died{where})"
    )


def _remember(refused: OrderedDict[str, None], table: Table) -> None:
    """A refused set's files, the oldest forgotten past MAX_REFUSED."""
    refused[_files_digest(table)] = None
    while len(refused) > MAX_REFUSED:
        refused.popitem(last=False)


def _files_digest(table: Table) -> str:
    """What a set's verification depends on in its table: its files, sizes and hashes."""
    return hash_bytes(json.dumps(table.as_dict()["files"]).encode())


class _RefusedAlready(IntegrityError):
    """A table of a set refused already: the rest of its passes."""


def _table_of(
    data: bytes, session: int, budget: SpoolBudget, refused: Container[str], proven: str | None
) -> Table:
    """The table in `data`, if it is session `session`'s, names the manifest that arrived
    for it (`proven`, when one did), is not of a set refused already (the same files: the
    rest of its passes) and the spool budget can hold its set, files and bytes
    (IntegrityError: dropped)."""
    table = Table.decode(data)
    if table.session != session:
        raise IntegrityError(f"the table of session {table.session:016x}")
    if proven is not None and table.files[0].sha256 != proven:
        raise IntegrityError(
            f"a table of session {session:016x} naming another {MANIFEST} than the one that "
            f"arrived for it (sha256 {proven})"
        )
    if _files_digest(table) in refused:
        raise _RefusedAlready(f"the table of {table.name}, the same files as a set refused already")
    if len(table.files) > budget.max_entries:
        raise IntegrityError(f"a set of {len(table.files)} files, over {budget.max_entries}")
    if table.total_bytes + len(table.files) * INODE_BYTES > budget.limit:
        raise IntegrityError(
            f"a set of {format_size(table.total_bytes)}, over the spool budget of "
            f"{format_size(budget.limit)} (transfer.spool_budget)"
        )
    return table


def _land(spool: Path, assembly: Assembly) -> Path:
    """Move a verified set to DIR/NAME (DIR/NAME.SESSION when taken) in one rename, mark
    its session landed (later passes ignored) and remove its work directory."""
    table = assembly.table
    target = spool / table.name
    if target.exists():
        target = spool / f"{table.name}.{table.session:016x}"
    os.rename(assembly.set_dir, target)
    fsync_dir(spool)
    marker = landed_marker(spool, table.session)
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.write_text(target.name + "\n")
    shutil.rmtree(assembly.dir, ignore_errors=True)
    return target


def open_socket(host: str, port: int, rcvbuf: int | None) -> socket.socket:
    """The receiver's socket: bound, never connected, never written to. The receiver's first
    step: on a host without the erasure code it stops here, before binding (fec.require)."""
    fec.require()
    family, address = resolve(host, port, "--listen")
    sock = socket.socket(family, socket.SOCK_DGRAM)
    if rcvbuf is not None:
        _set_rcvbuf(sock, rcvbuf)
    try:
        sock.bind(address)
    except OSError as exc:
        sock.close()
        where = f"{host}:{port}"
        if exc.errno == errno.EADDRINUSE:
            raise TemporaryFailure(
                f"UDP {where} is in use: another receiver (or a service) holds it",
                hint="stop it, or listen on another port",
            ) from None
        raise ConfigError(f"cannot listen on UDP {where}: {exc.strerror}") from None
    sock.setblocking(False)
    return sock


def _set_rcvbuf(sock: socket.socket, size: int) -> None:
    """A deep kernel queue rides out the moments the receiver is off the CPU (the commonest
    loss). With CAP_NET_ADMIN it may exceed net.core.rmem_max; without, it is capped there,
    and a smaller queue than asked is logged with the sysctl to raise."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, getattr(socket, "SO_RCVBUFFORCE", 33), size)
    except OSError:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, size)
    got = sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF) // 2  # Linux reports double
    if got < size:
        log.warning(
            "the socket receive buffer is %d bytes, not the %d asked: raise it with "
            "`sysctl -w net.core.rmem_max=%d`",
            got,
            size,
            size,
        )


def run(
    receiver: Receiver,
    sock: socket.socket,
    *,
    once: bool,
    idle_timeout: float | None,
    on_outcome: Callable[[Outcome], None],
    should_stop: Callable[[], bool] = lambda: False,
    on_tick: Callable[[], None] = lambda: None,
) -> list[Outcome]:
    """Read datagrams until a set ends (`once`) or `should_stop`; each ending to `on_outcome`,
    and `on_tick` about once a second (what a service does between sets)."""
    host, port = sock.getsockname()[:2]
    where = f"[{host}]:{port}" if ":" in str(host) else f"{host}:{port}"
    log.info("receiving on %s into %s", where, receiver.spool, extra={"listen": where})

    def ended(outcome: Outcome) -> None:
        log_outcome(outcome, where)
        on_outcome(outcome)

    try:
        outcomes = _run(receiver, sock, once, idle_timeout, ended, should_stop, on_tick)
    except OSError as exc:
        raise spool_error(receiver.spool, exc) from None
    log.info("stopped after %d set(s) ended", len(outcomes), extra={"sets": len(outcomes)})
    return outcomes


def log_outcome(outcome: Outcome, to: str) -> None:
    """One log line per set that ended, its fields named (`set`, `outcome`, ...), for the
    journal's JSON lines (an incomplete set's with the files it lacks, `missing_files`, and
    the command that resends them, `resend`); what a person reads is printed by the
    command."""
    fields: dict[str, object] = {"set": outcome.name, "session": f"{outcome.session:016x}"}
    if outcome.landed is not None:
        extra = {**fields, "outcome": "complete", "repaired": outcome.repaired}
        log.info("landed %s in %s", outcome.name, outcome.landed, extra=extra)
    elif outcome.error is not None:
        extra = {**fields, "outcome": "refused"}
        log.error("%s: %s; what arrived was removed", outcome.name, outcome.error, extra=extra)
    else:
        extra = {
            **fields,
            "outcome": "incomplete",
            "missing_bytes": outcome.missing_bytes,
            "missing_files": [item.name for item in outcome.missing],
            "resend": shlex.join(outcome.resend_command(to)),
        }
        log.warning("incomplete %s: %s", outcome.name, outcome.reason, extra=extra)


def spool_error(spool: Path, exc: OSError) -> MirrorError | OSError:
    """A spool that filled up (exit 75: what has arrived is kept, state saved each second, and
    the next pass or a resend completes the set) or cannot be written (exit 2)."""
    if is_disk_full(exc):
        kept = f"what has arrived is kept in {work_root(spool)}"
        return disk_full(spool, None, kept, hint="free space there and run the same command again")
    if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
        return ConfigError(f"cannot write the spool {spool}: {exc.strerror}")
    return exc


def _run(
    receiver: Receiver,
    sock: socket.socket,
    once: bool,
    idle_timeout: float | None,
    on_outcome: Callable[[Outcome], None],
    should_stop: Callable[[], bool],
    on_tick: Callable[[], None],
) -> list[Outcome]:
    outcomes: list[Outcome] = []
    buffer = bytearray(RECV_SIZE)
    view = memoryview(buffer)
    next_save = time.monotonic() + SAVE_EVERY
    try:
        while not should_stop():
            ended: list[Outcome] = []
            try:
                size = sock.recv_into(buffer)
            except BlockingIOError:  # queue empty: wait for it (one poll, not one per datagram)
                size = -1 if select.select([sock], [], [], WAIT)[0] else -2
            if size >= 0:
                outcome = receiver.handle(view[:size])
                if outcome is not None:
                    ended.append(outcome)
            if idle_timeout is not None and size == -2:
                ended += receiver.idle(idle_timeout)
            if time.monotonic() >= next_save:
                receiver.save()
                on_tick()
                next_save = time.monotonic() + SAVE_EVERY
            for outcome in ended:
                on_outcome(outcome)
                outcomes.append(outcome)
            if once and ended:
                return outcomes
    finally:
        receiver.close()
    return outcomes
