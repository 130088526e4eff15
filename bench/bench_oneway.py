"""A transfer set through a one-way link (issue 23): `python -m bench oneway` (root).

Packs a set of MIRROR_BENCH_ONEWAY_MIB (default 1024) MiB from a real store, then for each
impairment (5% random loss; bursts of 50 lost datagrams in every 1000) runs the real
`mirror transfer receive --once` and `mirror transfer send` in the two namespaces of
tests/fixtures/diode.py and reports: landed or not, seconds from the first datagram to the
landed (verified) set, MiB/s of the set, and the bytes on the wire (nftables' count of IP
bytes into the receiver, lost ones included) against the set's size; the UDP payload share
is that less 28 bytes of IPv4 and UDP headers per datagram.

Per CPU second: MiB of the set for each CPU second the sender and the receiver used (their
own user + system time, from the kernel's accounting of each reaped child), which holds on
a shared machine where wall time does not.

Then the peer an operator would use instead: Debian's udpcast, `udp-sender --async --fec
FEC` (no back channel) to `udp-receiver`, the same set as one tar file, through the same
namespaces, impairment and rate cap, once for each FEC of MIRROR_BENCH_UDPCAST_FEC
(default 8x12/128, about our 9% of repair, and 8x20/128): whether the file arrives whole,
MiB/s, the bytes on the wire and the CPU of each end (`run_udpcast`).

Knobs: MIRROR_BENCH_ONEWAY_RATE (the sender's --rate, default 40MiB),
MIRROR_BENCH_ONEWAY_CASES (comma-separated: random,burst).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from bench.common import MiB, _high_water_mib, machine
from mirror.integrity import hash_file
from tests.fixtures.diode import Link, close_link, mirror_bin, open_link, require_root, sh

SIZE = int(os.environ.get("MIRROR_BENCH_ONEWAY_MIB", "1024")) * MiB
RATE = os.environ.get("MIRROR_BENCH_ONEWAY_RATE", "40MiB")
CASES = {"random": {"loss": 5}, "burst": {"burst": 50, "period": 1000}}


def make_set(work: Path) -> tuple[Path, Path]:
    from mirror.config import settings_from_dict
    from mirror.outbound.pack import pack
    from mirror.store.app import App
    from mirror.transferset.keys import generate_keypair
    from tests.fixtures.s3 import transfer_config
    from tests.fixtures.versions import add_version

    (work / "keys").mkdir()
    made = generate_keypair(work / "keys" / "transfer")
    app = App(
        settings_from_dict(transfer_config(work / "store", (made.private_path, made.public_path)))
    )
    try:
        add_version(app, "docs.example.com", "2026-11-20", payload_size=SIZE)
        (work / "sets").mkdir()
        pack(app, work / "sets" / "set", max_size=256 * MiB)
    finally:
        app.close()
    shutil.rmtree(work / "store")  # only the set is needed now: half the disk
    return work / "sets" / "set", made.public_path


class Child:
    """A process whose own end time and CPU seconds are taken when it exits (`os.wait4` on a
    thread: the rusage of that one child, so a receiver that ends before the sender is not
    counted as the sender's), its output in a file."""

    def __init__(self, argv: list[str], log: Path) -> None:
        self.log = log
        with log.open("w") as out:
            self.process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
        self.cpu = self.system = 0.0
        self.ended = 0.0
        self.peak = 0.0
        self._waiter = threading.Thread(target=self._wait, daemon=True)
        self._waiter.start()

    def _wait(self) -> None:
        _, status, usage = os.wait4(self.process.pid, 0)
        self.ended = time.monotonic()
        self.process.returncode = os.waitstatus_to_exitcode(status)
        self.cpu = usage.ru_utime + usage.ru_stime
        self.system = usage.ru_stime

    def sample_peak(self) -> None:
        """Peak RSS (`ip netns exec` execs the command: same pid) till it exits."""
        while self._waiter.is_alive():
            self.peak = max(self.peak, _high_water_mib(self.process.pid))
            time.sleep(0.2)

    def wait(self, timeout: float) -> int:
        self._waiter.join(timeout)
        return self.process.returncode

    def last_line(self) -> str:
        lines = self.log.read_text().strip().splitlines()
        return lines[-1] if lines else ""


def run_case(name: str, set_dir: Path, key: Path, work: Path) -> str:
    link = open_link()
    spool = work / f"spool-{name}"
    try:
        link.impair(**CASES[name])
        receiver = Child(
            link.in_receiver(mirror_bin(), "--defaults", "transfer", "receive", str(spool),
                             "--listen", link.to, "--key", str(key), "--once",
                             "--idle-timeout", "20"),
            work / "receiver.log",
        )  # fmt: skip
        time.sleep(3)
        threading.Thread(target=receiver.sample_peak, daemon=True).start()
        started = time.monotonic()
        sender = Child(
            link.in_sender(mirror_bin(), "--defaults", "transfer", "send", str(set_dir),
                           "--to", link.to, "--rate", RATE),
            work / "sender.log",
        )  # fmt: skip
        sender.wait(3600)
        receiver.wait(3600)
        packets, wire = link.counter("wire")
        lost = link.counter("lost")[0]
        back = link.counter("back")[0] + link.counter("arrived_back", side="sender")[0]
        overflow = rcvbuf_errors(link)
    finally:
        close_link(link)
        shutil.rmtree(spool, ignore_errors=True)
    size = sum(p.stat().st_size for p in set_dir.rglob("*") if p.is_file())
    took, sent_s = receiver.ended - started, sender.ended - started
    payload = wire - 28 * packets
    code = receiver.process.returncode
    return (
        f"{name:7} {'landed' if code == 0 else f'exit {code}':8} set {size / MiB:7.1f} MiB in "
        f"{took:6.1f}s ({size / MiB / took:5.1f} MiB/s; sender done after {sent_s:5.1f}s)  "
        f"wire {wire / size:.3f}x of the set (UDP payload {payload / size:.3f}x), "
        f"{packets} datagrams, {lost} lost by nft, {overflow} by the receiver's full queue, "
        f"{back} back; receiver peak RSS {receiver.peak:.0f} MiB; per CPU second: sender "
        f"{size / MiB / sender.cpu:.0f} MiB ({sender.cpu:.2f} s, {sender.system:.2f} system), "
        f"receiver {size / MiB / receiver.cpu:.0f} MiB ({receiver.cpu:.2f} s, "
        f"{receiver.system:.2f} system)  "
        f"{receiver.last_line() if code else ''}"
        + (f" sender: {sender.last_line()}" if sender.process.returncode else "")
    )


def rcvbuf_errors(link: Link) -> int:
    """UDP datagrams the receiver's namespace dropped because its socket queue was full."""
    snmp = subprocess.run(
        link.in_receiver("cat", "/proc/net/snmp"), capture_output=True, text=True
    ).stdout.splitlines()
    names, values = [line.split() for line in snmp if line.startswith("Udp:")][:2]
    return int(values[names.index("RcvbufErrors")])


UDPCAST_PORT = 9000  # udp-receiver's port (--portbase): the sender's datagrams go there
UDPCAST_FEC = os.environ.get("MIRROR_BENCH_UDPCAST_FEC", "8x12/128,8x20/128").split(",")


def run_udpcast(name: str, fec: str, set_dir: Path, work: Path) -> str:
    """The same set (as one tar file) through the same rig and impairment with Debian's
    udpcast in its one-way mode: `udp-sender --async --fec FEC` at the same rate cap, no
    back channel (the rig drops everything the receiver sends). In async mode udp-receiver
    stops at the first slice its FEC cannot rebuild; whole means the file's sha256 matches."""
    link = open_link()
    source, out = work / "set.tar", work / "udpcast.out"
    try:
        if not source.exists():
            subprocess.run(["tar", "-cf", str(source), "-C", str(set_dir.parent), set_dir.name],
                           check=True)  # fmt: skip
        link.impair(**CASES[name])
        rule = f"ip saddr {link.sender_ip} udp dport {UDPCAST_PORT} counter name wire jump impair"
        sh("ip", "netns", "exec", link.receiver_ns, "nft", f"add rule inet diode input {rule}")
        receiver = Child(
            link.in_receiver("udp-receiver", "--interface", f"{link.name}r", "--file", str(out),
                             "--nokbd", "--portbase", str(UDPCAST_PORT), "--receive-timeout", "20",
                             "--rcvbuf", str(32 * MiB)),  # as `transfer receive`'s default
            work / "udp-receiver.log",
        )  # fmt: skip
        time.sleep(1)
        started = time.monotonic()
        sender = Child(
            link.in_sender("udp-sender", "--async", "--fec", fec, "--max-bitrate", _bits(RATE),
                           "--interface", f"{link.name}s", "--autostart", "1", "--nokbd",
                           "--mcast-data-address", link.receiver_ip, "--mcast-rdv-address",
                           link.receiver_ip, "--portbase", str(UDPCAST_PORT), "--file",
                           str(source)),
            work / "udp-sender.log",
        )  # fmt: skip
        sender.wait(3600)
        receiver.wait(600)
        packets, wire = link.counter("wire")
    finally:
        close_link(link)
    size = source.stat().st_size
    whole = out.exists() and hash_file(out) == hash_file(source)
    out.unlink(missing_ok=True)
    took = max(receiver.ended, sender.ended) - started
    return (
        f"{name:7} udpcast --fec {fec}: {'whole' if whole else 'NOT whole'}, receiver exit "
        f"{receiver.process.returncode}; {size / MiB:.1f} MiB in {took:.1f}s "
        f"({size / MiB / took:.1f} MiB/s); wire {wire / size:.3f}x of the file, {packets} "
        f"datagrams; per CPU second: sender {size / MiB / max(sender.cpu, 0.01):.0f} MiB "
        f"({sender.cpu:.2f} s, {sender.system:.2f} system), receiver "
        f"{size / MiB / max(receiver.cpu, 0.01):.0f} MiB ({receiver.cpu:.2f} s, "
        f"{receiver.system:.2f} system); {receiver.last_line()[:120]}"
    )


def _bits(rate: str) -> str:
    """udp-sender's --max-bitrate (bits/s, m = 10**6) for our --rate in MiB/s."""
    return f"{float(rate.removesuffix('MiB')) * MiB * 8 / 1e6:.0f}m"


def main() -> None:
    if os.geteuid() != 0 or not shutil.which("ip"):
        print("oneway: skipped: the one-way link rig needs root and `ip` (tests/fixtures/diode.py)")
        return
    try:
        require_root()  # installs nftables when missing
    except BaseException as exc:  # pytest's skip outside pytest
        print(f"oneway: skipped: {exc}")
        return
    print(machine(), f"--rate {RATE}", flush=True)
    cases = os.environ.get("MIRROR_BENCH_ONEWAY_CASES", "random,burst").split(",")
    with tempfile.TemporaryDirectory(prefix="bench-oneway-") as temp:
        work = Path(temp)
        set_dir, key = make_set(work)
        for name in cases:
            print(run_case(name, set_dir, key, work), flush=True)
            print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
            if not shutil.which("udp-sender"):
                print("udpcast: skipped (apt-get install udpcast)")
                continue
            for fec in UDPCAST_FEC:
                print(run_udpcast(name, fec, set_dir, work), flush=True)
                print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)


if __name__ == "__main__":
    main()
