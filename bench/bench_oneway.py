"""A transfer set through a one-way link (issue 23): `python -m bench oneway` (root).

Packs a set of MIRROR_BENCH_ONEWAY_MIB (default 1024) MiB from a real store, then for each
impairment (5% random loss; bursts of 50 lost datagrams in every 1000) runs the real
`mirror transfer receive --once` and `mirror transfer send` in the two namespaces of
tests/fixtures/diode.py and reports: landed or not, seconds from the first datagram to the
landed (verified) set, MiB/s of the set, and the bytes on the wire (nftables' count of IP
bytes into the receiver, lost ones included) against the set's size; the UDP payload share
is that less 28 bytes of IPv4 and UDP headers per datagram.

Knobs: MIRROR_BENCH_ONEWAY_RATE (the sender's --rate, default 40MiB),
MIRROR_BENCH_ONEWAY_CASES (comma-separated: random,burst).
"""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from bench.common import MiB, _high_water_mib, machine
from tests.fixtures.diode import Link, close_link, mirror_bin, open_link, require_root

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


def run_case(name: str, set_dir: Path, key: Path, work: Path) -> str:
    link = open_link()
    spool = work / f"spool-{name}"
    try:
        link.impair(**CASES[name])
        receiver = subprocess.Popen(
            link.in_receiver(mirror_bin(), "--defaults", "transfer", "receive", str(spool),
                             "--listen", link.to, "--key", str(key), "--once",
                             "--idle-timeout", "20"),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        time.sleep(3)
        peak = [0.0]
        sampler = threading.Thread(target=_sample, args=(receiver, peak), daemon=True)
        sampler.start()
        started = time.monotonic()
        before = _children_cpu()
        sent = subprocess.run(
            link.in_sender(mirror_bin(), "--defaults", "transfer", "send", str(set_dir),
                           "--to", link.to, "--rate", RATE),
            capture_output=True, text=True,
        )  # fmt: skip
        sent_s = time.monotonic() - started
        sender_cpu = _children_cpu() - before
        out, err = receiver.communicate(timeout=3600)
        took = time.monotonic() - started
        receiver_cpu = _children_cpu() - before - sender_cpu
        packets, wire = link.counter("wire")
        lost = link.counter("lost")[0]
        back = link.counter("back")[0] + link.counter("arrived_back", side="sender")[0]
        overflow = rcvbuf_errors(link)
    finally:
        close_link(link)
        shutil.rmtree(spool, ignore_errors=True)
    size = sum(p.stat().st_size for p in set_dir.rglob("*") if p.is_file())
    payload = wire - 28 * packets
    outcome = "landed" if receiver.returncode == 0 else f"exit {receiver.returncode}"
    return (
        f"{name:7} {outcome:8} set {size / MiB:7.1f} MiB in {took:6.1f}s "
        f"({size / MiB / took:5.1f} MiB/s; sender done after {sent_s:5.1f}s)  "
        f"wire {wire / size:.3f}x of the set (UDP payload {payload / size:.3f}x), "
        f"{packets} datagrams, {lost} lost by nft, {overflow} by the receiver's full queue, "
        f"{back} back; receiver peak RSS {peak[0]:.0f} MiB; per CPU second: sender "
        f"{size / MiB / sender_cpu:.0f} MiB, receiver {size / MiB / receiver_cpu:.0f} MiB  "
        f"{(out + err).strip().splitlines()[-1] if receiver.returncode else ''}"
        + (f" sender: {sent.stderr.strip()}" if sent.returncode else "")
    )


def _children_cpu() -> float:
    """CPU seconds (user + system) of every child reaped so far: a sender's or receiver's
    own cost, whatever else the shared machine is doing."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _sample(process: subprocess.Popen[str], peak: list[float]) -> None:
    """The receiver's peak RSS (`ip netns exec` execs it: same pid), sampled till it exits."""
    while process.poll() is None:
        peak[0] = max(peak[0], _high_water_mib(process.pid))
        time.sleep(0.2)


def rcvbuf_errors(link: Link) -> int:
    """UDP datagrams the receiver's namespace dropped because its socket queue was full."""
    snmp = subprocess.run(
        link.in_receiver("cat", "/proc/net/snmp"), capture_output=True, text=True
    ).stdout.splitlines()
    names, values = [line.split() for line in snmp if line.startswith("Udp:")][:2]
    return int(values[names.index("RcvbufErrors")])


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


if __name__ == "__main__":
    main()
