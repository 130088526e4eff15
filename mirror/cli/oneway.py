"""`mirror transfer send|receive`: a transfer set over a one-way link (a data diode).

Only parses, calls mirror.oneway (and the ordinary verify and import) and prints.
"""

from __future__ import annotations

import math
import shlex
import signal
import socket
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import click

from mirror.cli.common import SIZE, CliContext, pass_cli
from mirror.cli.transfer import (
    _progress,
    _require,
    _trusted,
    _trusted_key_option,
    transfer_import,
)
from mirror.errors import ConfigError, IntegrityError, TemporaryFailure
from mirror.logs import setup_logging, writing_logs_only
from mirror.units import format_size

if TYPE_CHECKING:
    from mirror.oneway.metrics import ReceiverMetrics
    from mirror.oneway.receiver import Outcome, Receiver
    from mirror.oneway.sender import SendStats
    from mirror.oneway.table import Table
    from mirror.transferset.keys import PublicKey


def _address(value: str, option: str) -> tuple[str, int]:
    host, _, port = value.rpartition(":")
    if not host or not port.isdigit() or not 0 <= int(port) < 65536:
        raise ConfigError(f"{option} {value!r} is not HOST:PORT")
    return host.strip("[]"), int(port)


def _only(values: tuple[str, ...], table: Table) -> dict[int, frozenset[int] | None]:
    """`--only FILE` or `--only FILE:0-3,7` -> file index -> blocks (None: all); a block
    the file does not have is a mistake, never a silent nothing sent."""
    names = [f.name for f in table.files]
    chosen: dict[int, frozenset[int] | None] = {}
    for value in values:
        name, _, spec = value.partition(":")
        if name not in names:
            raise ConfigError(f"--only {name}: not a file of the set")
        index = names.index(name)
        count = table.block_count(index)
        blocks: set[int] = set()
        try:
            for piece in filter(None, spec.split(",")):
                first, _, last = piece.partition("-")
                low, high = int(first), int(last or first)
                if not 0 <= low <= high < count:
                    raise ConfigError(
                        f"--only {value}: {name} has blocks 0-{count - 1}, not {piece}"
                        if count
                        else f"--only {value}: {name} is empty and has no blocks"
                    )
                blocks.update(range(low, high + 1))
        except ValueError:
            raise ConfigError(f"--only {value}: blocks are like 0-3,7") from None
        chosen[index] = frozenset(blocks) if spec else None
    return chosen


def _positive(_ctx: click.Context, _param: click.Parameter, value: int | None) -> int | None:
    if value is not None and value <= 0:
        raise click.BadParameter("a rate above 0 (leave --rate out for no cap)")
    return value


def _redundancy(value: str) -> float:
    try:
        share = float(value.rstrip("%")) / (100 if value.endswith("%") else 1)
    except ValueError:
        raise click.BadParameter(f"{value!r} is not a share like 9% or 0.09") from None
    if not 0 <= share <= 4:
        raise click.BadParameter(f"{value!r}: between 0% and 400%")
    return share


@click.command("send")
@click.argument("set_dir", metavar="SET", type=click.Path(file_okay=False, path_type=Path))
@click.option("--to", "to", required=True, metavar="HOST:PORT", help="The receiver's address.")
@click.option(
    "--rate", type=SIZE, default=None, callback=_positive, help="Cap in bytes a second, e.g. 40MiB."
)
@click.option("--passes", type=click.IntRange(min=1), default=1, help="Times to send it all.")
@click.option(
    "--mtu", type=click.IntRange(min=576, max=65535), default=1500, help="IPv4 MTU of the link."
)
@click.option("--redundancy", default="9%", help="Repair symbols per block [9%].")
@click.option("--depth", type=click.IntRange(min=1), default=16, help="Blocks interleaved.")
@click.option(
    "--only",
    multiple=True,
    metavar="FILE[:BLOCKS]",
    help="Send just this file (or its blocks, e.g. 0-3,7): what an incomplete receiver names.",
)
@pass_cli
def transfer_send(
    cli: CliContext,
    set_dir: Path,
    to: str,
    rate: int | None,
    passes: int,
    mtu: int,
    redundancy: str,
    depth: int,
    only: tuple[str, ...],
) -> None:
    """Send a transfer set over a one-way link (UDP, FEC, nothing acknowledged).

    The set is recorded as sent, not delivered, until its receipt comes back
    (`mirror transfer ack`) when it was packed here."""
    from mirror.oneway.sender import send
    from mirror.oneway.table import read_table
    from mirror.oneway.wire import payload_room

    address = _address(to, "--to")
    room = payload_room(mtu)
    table = read_table(set_dir, symbol_size=room - 4, redundancy=_redundancy(redundancy))
    chosen = _only(only, table)
    with _progress(cli, "sending") as (on_progress,):
        stats = send(
            set_dir,
            table,
            address,
            room,
            passes=passes,
            rate=rate,
            depth=depth,
            only=chosen,
            on_progress=_datagram_bytes(on_progress, mtu),
        )
    recorded = _record(cli, set_dir, to)
    if not cli.as_json and cli.verbosity >= 0:  # no JSON document (docs/json.md)
        click.echo(f"{_sent_line(table, to, stats)}\n{recorded}")


def _sent_line(table: Table, to: str, stats: SendStats) -> str:
    """What `transfer send` sent: the set, its size, and what went on the wire."""
    return (
        f"sent {table.name} to {to}: {len(table.files)} file(s), {format_size(table.total_bytes)} "
        f"in {stats.datagrams} datagrams, {format_size(stats.wire_bytes)} on the wire, "
        f"{stats.passes} pass(es)"
    )


def _datagram_bytes(
    on_progress: Callable[[int], None] | None, mtu: int
) -> Callable[[int], None] | None:
    """The sender counts datagrams; the bar counts bytes on the wire."""
    if on_progress is None:
        return None
    last = [0]

    def advance(datagrams: int) -> None:
        on_progress((datagrams - last[0]) * mtu)
        last[0] = datagrams

    return advance


def _record(cli: CliContext, set_dir: Path, to: str) -> str:
    """Mark the set sent (not delivered) in the index, when it was packed here."""
    from mirror.outbound.sent import record_sent

    cli.read_only = True  # a host without a store (a relay) gets none made by a send
    try:
        sequence = record_sent(cli.app, set_dir, to)
    except Exception as exc:  # a sender without an index (a relay host) still sends
        return f"note: not recorded as sent ({exc})"
    if sequence is None:
        return "note: this set was not packed here; nothing recorded"
    return (
        f"set {sequence} recorded as sent, not delivered: "
        "carry its receipt back to `mirror transfer ack`"
    )


@click.command("receive")
@click.argument("spool", metavar="DIR", type=click.Path(file_okay=False, path_type=Path))
@click.option("--listen", required=True, metavar="HOST:PORT", help="Address to bind.")
@click.option("--once", is_flag=True, help="Exit after one set ends (landed or incomplete).")
@click.option("--import", "do_import", is_flag=True, help="Import each landed set at once.")
@click.option(
    "--idle-timeout",
    type=float,
    callback=lambda _ctx, _param, value: _positive_seconds(value),
    default=None,
    help="Seconds of silence after which a set in progress is reported incomplete.",
)
@click.option(
    "--rcvbuf",
    type=SIZE,
    default="32MiB",
    help="Socket receive buffer (capped by net.core.rmem_max without CAP_NET_ADMIN) [32MiB].",
)
@click.option("--metrics", "metrics_at", metavar="HOST:PORT", default=None, help="Serve counters.")
@_trusted_key_option
@click.pass_context
def transfer_receive(
    ctx: click.Context,
    spool: Path,
    listen: str,
    once: bool,
    do_import: bool,
    idle_timeout: float | None,
    rcvbuf: int,
    metrics_at: str | None,
    keys: tuple[Path, ...],
) -> None:
    """Receive transfer sets from a one-way link into DIR; this end never sends a packet.

    A set that arrives whole and verifies lands in DIR/NAME; an incomplete one stays in
    DIR/.oneway/ and the command to resend what it lacks is printed. With --import and
    without --once a set the import refuses is kept in DIR/refused/ with its reason, and
    one the store cannot take now is imported when it is back."""
    from mirror.oneway.metrics import ReceiverMetrics
    from mirror.oneway.receiver import open_socket

    cli: CliContext = ctx.obj
    if not once:
        setup_logging(cli.verbosity, service=True)  # its INFO lines; off a terminal only JSON
    host, port = _address(listen, "--listen")
    _require(cli, "import" if do_import else "verify", keys)
    trusted = _trusted(cli.settings, keys)
    metrics = ReceiverMetrics()
    if metrics_at is not None:
        metrics.serve(*_address(metrics_at, "--metrics"))
    stopping: list[int] = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(1))
    sock = open_socket(host, port, rcvbuf)
    with sock, _progress(cli, "receiving") as (on_block,):
        budget = cli.settings.transfer.spool_budget
        receiver = _receiver(spool, trusted, metrics, on_block, budget=budget, once=once)
        outcomes = _serve(
            ctx, receiver, sock, listen, keys, once, do_import, idle_timeout, stopping
        )
    if once and outcomes:
        _fail_unless_landed(outcomes[-1], listen)


def _serve(
    ctx: click.Context,
    receiver: Receiver,
    sock: socket.socket,
    listen: str,
    keys: tuple[Path, ...],
    once: bool,
    do_import: bool,
    idle_timeout: float | None,
    stopping: list[int],
) -> list[Outcome]:
    """Each set's ending reported; with --import each landed set imported (as a service,
    through the queue that keeps refused sets aside and retries the store's outages)."""
    from mirror.oneway.imports import ImportQueue
    from mirror.oneway.receiver import run

    def do(set_dir: Path) -> None:
        ctx.invoke(transfer_import, set_dir=set_dir, keys=keys)

    queue = ImportQueue(receiver.spool, do, receiver.metrics) if do_import and not once else None

    def ended(outcome: Outcome) -> None:
        # the receiver's log record says it (mirror.oneway.receiver.log_outcome); a person
        # reads this, unless the process writes only log records or is a service with --json
        if not writing_logs_only() and (once or not ctx.obj.as_json):
            _report(ctx.obj, outcome, listen, logged=not once)
        if outcome.landed is not None and do_import:
            (do if queue is None else queue.landed)(outcome.landed)

    return run(
        receiver,
        sock,
        once=once,
        idle_timeout=idle_timeout,
        on_outcome=ended,
        should_stop=lambda: bool(stopping),
        on_tick=queue.retry if queue is not None else lambda: None,
    )


def _receiver(
    spool: Path,
    trusted: Mapping[str, PublicKey],
    metrics: ReceiverMetrics,
    on_block: Callable[[int], None] | None,
    *,
    budget: int,
    once: bool,
) -> Receiver:
    """The receiver on its spool, made if missing; a spool that cannot be written is one line.
    `--once` stops on a full disk (exit 75); a service removes what it must and goes on."""
    from mirror.oneway.receiver import Receiver, spool_error

    try:
        spool.mkdir(parents=True, exist_ok=True)
        return Receiver(
            spool, trusted, metrics=metrics, on_block=on_block, budget=budget, stop_when_full=once
        )
    except OSError as exc:
        raise spool_error(spool, exc) from None


_REMOVED = "what arrived was removed: a good copy of the set sent next lands"


def _report(cli: CliContext, outcome: Outcome, to: str, *, logged: bool = False) -> None:
    """What a person reads of a set that ended (stdout; stderr with --json); a refusal is
    an error line on stderr unless the log said it (`logged`: a service's log)."""
    if outcome.landed is not None:
        if cli.verbosity >= 0:
            click.echo(
                f"landed {outcome.name} in {outcome.landed} "
                f"(verified; {outcome.repaired} block(s) repaired)",
                err=cli.as_json,
            )
        return
    if outcome.error is not None:
        if not logged:
            click.echo(f"mirror: {outcome.name}: {outcome.error}; {_REMOVED}", err=True)
        return
    lines = [
        f"incomplete {outcome.name}: {outcome.reason}"
        if outcome.tableless
        else f"incomplete {outcome.name}: {outcome.reason}; "
        f"{format_size(outcome.missing_bytes)} missing, kept in {outcome.kept}"
    ]
    for item in outcome.missing:
        lines.append(
            f"  {item.name}: {len(item.blocks)} of {item.block_count} block(s), "
            f"{format_size(item.bytes)} missing"
        )
    lines.append(f"on the connected side run: {shlex.join(outcome.resend_command(to))}")
    print("\n".join(lines), file=sys.stderr if cli.as_json else sys.stdout, flush=True)


def _fail_unless_landed(outcome: Outcome, to: str) -> None:
    if outcome.landed is not None:
        return
    if outcome.error is not None:
        raise IntegrityError(f"{outcome.name}: {outcome.error}", hint=_REMOVED)
    what = (
        "its file table never arrived"
        if outcome.tableless
        else f"{len(outcome.missing)} file(s), {format_size(outcome.missing_bytes)} missing"
    )
    raise TemporaryFailure(
        f"set {outcome.name} is incomplete: {what}",
        hint=f"on the connected side run: {shlex.join(outcome.resend_command(to))}",
    )


def _positive_seconds(value: float | None) -> float | None:
    if value is not None and not (math.isfinite(value) and value > 0):
        raise click.BadParameter(f"{value} is not a positive number of seconds")
    return value
