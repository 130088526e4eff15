"""The one-way receiver's memory with many incomplete sessions (issue 38): `python -m bench
oneway_sessions` (loopback, no root).

A real `mirror transfer receive` service; datagrams sent to it on loopback, paced by its own
--metrics (no more than 8 MiB in its queue), then its peak RSS (VmHWM) read. Cases, each for
MIRROR_BENCH_SESSIONS (default 30,200) sessions:

- no table, 1500-byte datagrams: 2,048 DATA datagrams (about 2.9 MiB) per session whose
  table never arrives (the issue's case: 30 such sessions were 429 MiB before the bounds);
- no table, jumbo datagrams: DATA of the largest IPv4 datagram (64 KiB) until 5 MiB per
  session (over the 4 MiB a session may hold);
- tables, blocks begun: a good table per session and one packet of each of 8 blocks,
  so every session has blocks being decoded (32 at most across them all);
- one table of the largest blocks (issue 38 trial, O17): one forged valid table of 32
  files of one 16 MiB block each (symbols of 64 KiB) and half of each block's symbols,
  4,096 datagrams, whatever the number of sessions (the blocks being decoded hold at most
  assembly.MAX_DECODING_BYTES of packets).

MIRROR_BENCH_CASES (words of the case names, comma-separated) runs only the cases named.

The receiver holds at most 16 sessions, 4 MiB and 2,048 datagrams before the table each,
and 32 blocks being decoded: the README's bound, which the table printed is held to.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from mirror.oneway import fec, wire
from mirror.oneway.table import MAX_BLOCK_BYTES, MAX_SYMBOL_SIZE
from tests.fixtures.cli import cli_env, mirror_argv
from tests.fixtures.forged import SYMBOL, forged_table, packet, sha, table_datagrams
from tests.fixtures.s3 import free_port
from tests.fixtures.udp import free_udp_port, wait_bound

SESSIONS = [int(n) for n in os.environ.get("MIRROR_BENCH_SESSIONS", "30,200").split(",")]
IN_FLIGHT = 8 * 1024 * 1024
JUMBO = wire.payload_room(65535)


def no_table(session: int, size: int, count: int) -> Iterator[bytes]:
    for number in range(count):
        yield wire.build(wire.Kind.DATA, session, 0, number % 7, number, bytes(size))


def with_table(seed: int) -> Iterator[bytes]:
    session, data = forged_table(seed, [["x", 8 * 200 * SYMBOL, sha(seed + 1)]])
    yield from table_datagrams(session, data)
    for block in range(8):
        yield wire.build(wire.Kind.DATA, session, 1, block, 0, packet())


def largest_blocks(seed: int) -> Iterator[bytes]:
    symbol = MAX_SYMBOL_SIZE
    count = MAX_BLOCK_BYTES // symbol
    files = [[f"f{n}", count * symbol, sha(seed + n)] for n in range(32)]
    session, data = forged_table(seed, files, symbol_size=symbol, block_symbols=count)
    yield from table_datagrams(session, data)
    body = bytes(fec.packet_size(symbol) - 4)
    for esi in range(count // 2):
        for file in range(1, 33):
            payload = b"\0" + esi.to_bytes(3, "big") + body
            yield wire.build(wire.Kind.DATA, session, file, 0, esi, payload)


CASES = {
    "no table, 1500-byte datagrams": lambda n: no_table(n + 1, wire.payload_room(1500), 2048),
    "no table, 64 KiB datagrams": lambda n: no_table(n + 1, JUMBO, 5 * 1024 * 1024 // JUMBO),
    "tables, 8 blocks begun each": lambda n: with_table(10_000 + n),
    "one table of 32 blocks of 16 MiB": lambda n: largest_blocks(20_000) if n == 0 else iter(()),
}
WANTED = [w for w in os.environ.get("MIRROR_BENCH_CASES", "").split(",") if w]


def received(metrics_port: int) -> int:
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/", timeout=30) as answer:
        text = answer.read().decode()
    total = 0.0
    for line in text.splitlines():
        if line.startswith(
            ("mirror_oneway_datagrams_total{", "mirror_oneway_corrupt_datagrams_total ")
        ):
            total += float(line.split()[-1])
    return int(total)


def peak_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return 0.0


def run_case(work: Path, key: Path, sessions: int, make: object) -> tuple[float, float, int]:
    """(peak RSS at start, peak RSS after, datagrams sent)."""
    port, metrics_port = free_udp_port(), free_port()
    argv = mirror_argv("--defaults", "transfer", "receive", str(work / "spool"), "--listen",
                       f"127.0.0.1:{port}", "--metrics", f"127.0.0.1:{metrics_port}",
                       "--trusted-key", str(key))  # fmt: skip
    process = subprocess.Popen(argv, env=cli_env(), stderr=subprocess.DEVNULL)
    try:
        wait_bound(port)
        start = peak_mib(process.pid)
        sent = sent_bytes = 0
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 * 1024 * 1024)
            for number in range(sessions):
                for datagram in make(number):  # type: ignore[operator]
                    sock.sendto(datagram, ("127.0.0.1", port))
                    sent += 1
                    sent_bytes += len(datagram)
                    if sent_bytes > IN_FLIGHT:
                        while received(metrics_port) < sent:
                            time.sleep(0.01)
                        sent_bytes = 0
        deadline = time.monotonic() + 120
        while received(metrics_port) < sent and time.monotonic() < deadline:
            time.sleep(0.05)
        return start, peak_mib(process.pid), sent
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(60)


def main() -> None:
    from mirror.transferset.keys import generate_keypair

    print(f"{'case':<34} {'sessions':>8} {'datagrams':>10} {'RSS at start':>13} {'peak RSS':>9}")
    for name, make in CASES.items():
        if WANTED and not any(word in name for word in WANTED):
            continue
        for sessions in SESSIONS:
            with tempfile.TemporaryDirectory(prefix="mirror-bench-sessions-") as tmp:
                work = Path(tmp)
                key = generate_keypair(work / "k").public_path
                start, peak, sent = run_case(work, key, sessions, make)
            print(f"{name:<34} {sessions:>8} {sent:>10} {start:>9.0f} MiB {peak:>5.0f} MiB")


if __name__ == "__main__":
    main()
