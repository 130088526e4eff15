"""mirror.cli.heap on the real C allocator, each case in a process of its own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.cli import cli_env, write_config
from tests.fixtures.versions import add_version, open_app

MiB = 1024 * 1024

# A 24 MiB block freed raises glibc's own threshold to 24 MiB; three 8 MiB parts (an
# upload's) are then carved from the heap, where they stay once freed, unless told.
PARTS_FREED = """
import sys
from mirror.cli import heap
if sys.argv[1] == "told":
    assert heap.return_large_blocks()
def rss():
    return int(open("/proc/self/statm").read().split()[1]) * 4096
large = b"x" * (24 << 20)
del large
before = rss()
parts = [b"x" * (8 << 20) for _ in range(3)]
del parts
print(rss() - before)
"""


def _kept_after_freeing(mode: str) -> int:
    done = subprocess.run(
        [sys.executable, "-c", PARTS_FREED, mode], capture_output=True, text=True, check=True
    )
    return int(done.stdout)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's allocator")
def test_large_blocks_go_back_to_the_system_once_freed() -> None:
    assert _kept_after_freeing("untold") >= 20 * MiB  # what the heap kept without it
    assert _kept_after_freeing("told") < 2 * MiB


# glibc's own account of its heap (mallinfo2, glibc 2.33+), for the scripts below.
MALLINFO = """
import ctypes, sys
from mirror.cli import heap
class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]
libc = ctypes.CDLL(None)
libc.mallinfo2.restype = MallInfo2
"""

# Whether the heap keeps a freed 1 MiB block's pages for the next read (glibc's heap size,
# mallinfo2's `arena`, glibc 2.33+), or trims them and faults them in again next time.
READ_FREED = (
    MALLINFO
    + """
if sys.argv[1] == "told":
    assert heap.return_large_blocks()
else:
    libc.mallopt(-3, heap.MMAP_THRESHOLD)  # the mmap threshold alone
read = b"x" * (1 << 20)
grown = libc.mallinfo2().arena
del read
print(libc.mallinfo2().arena >= grown - (64 << 10))
"""
)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's allocator")
def test_a_freed_read_stays_in_the_heap_for_the_next() -> None:
    """Fixing the mmap threshold alone fixes the trim threshold at 128 KiB: every 1 MiB read
    freed was trimmed, and the next one faulted its pages in again."""
    kept = [
        subprocess.run(
            [sys.executable, "-c", READ_FREED, mode], capture_output=True, text=True, check=True
        ).stdout.split()
        for mode in ("told", "threshold alone")
    ]
    assert kept == [["True"], ["False"]]


# Whether a 1 MiB block is mapped apart (glibc's count of such bytes, mallinfo2, glibc 2.33+):
# under a 512 KiB threshold it is; under MMAP_THRESHOLD it is carved from the heap.
ONE_MIB_MAPPED = (
    MALLINFO
    + """
told = heap.return_large_blocks()
block = bytearray(1 << 20)
print(told, libc.mallinfo2().hblkhd >= 1 << 20)
"""
)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's allocator")
@pytest.mark.parametrize(
    "setting",
    [
        {"MALLOC_MMAP_THRESHOLD_": "524288"},
        {"GLIBC_TUNABLES": "glibc.malloc.mmap_threshold=524288"},
        {"MALLOC_TRIM_THRESHOLD_": "262144"},
    ],
)
def test_a_threshold_set_in_the_environment_is_kept(setting: dict[str, str]) -> None:
    """An operator's tuning, or a measurement of another threshold, was silently replaced
    by MMAP_THRESHOLD at every command's start."""
    env = {**os.environ, **setting}
    done = subprocess.run(
        [sys.executable, "-c", ONE_MIB_MAPPED], capture_output=True, text=True, env=env
    )
    assert done.stdout.split() == ["False", "True"], done.stderr
    alone = {k: v for k, v in env.items() if k not in setting}
    done = subprocess.run(
        [sys.executable, "-c", ONE_MIB_MAPPED], capture_output=True, text=True, env=alone
    )
    assert done.stdout.split() == ["True", "False"], done.stderr


def test_exit_freezes_the_heap_after_later_handlers_and_still_flushes(tmp_path: Path) -> None:
    """Frozen at exit, after the handlers registered later (they still see a live heap),
    before the interpreter's collections; a file left open is still flushed."""
    out = tmp_path / "out"
    script = f"""
import atexit, gc
from mirror.cli import heap
atexit.register(lambda: print("then", gc.get_freeze_count() > 1000))
heap.skip_the_exit_collections()
atexit.register(lambda: print("first", gc.get_freeze_count()))
left_open = open({str(out)!r}, "w")
left_open.write("flushed")
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["first 0", "then True"]
    assert out.read_text() == "flushed"


# `mirror ARGS` run to its real exit, listing what is still open just before the heap is
# frozen (every handler registered later has run): what only the last collections would close.
OPEN_AT_EXIT = """
import atexit, gc, io, json, socket, sqlite3, sys
from mirror.cli import heap
from mirror.cli import main

def still_open():
    found = []
    for item in gc.get_objects():
        if isinstance(item, io.IOBase) and not item.closed and item.fileno() > 2:
            found.append(repr(item))
        elif isinstance(item, socket.socket) and item.fileno() >= 0:
            found.append(repr(item))
        elif isinstance(item, sqlite3.Connection):
            try:
                item.total_changes
            except sqlite3.ProgrammingError:  # closed
                continue
            found.append("an sqlite3 connection")
    print(json.dumps(found), file=sys.__stderr__)

freeze_first = heap.skip_the_exit_collections  # registered first, so run after still_open
heap.skip_the_exit_collections = lambda: (freeze_first(), atexit.register(still_open))
main(sys.argv[1:])
"""


@pytest.mark.parametrize(
    "args", [("store", "verify"), ("--json", "store", "verify"), ("store", "list")]
)
def test_nothing_is_left_for_the_exit_collections_to_close(
    tmp_path: Path, args: tuple[str, ...]
) -> None:
    """The freeze means no finalizer runs for an object in a reference cycle at exit: every
    file, socket and index connection a command opened is closed before, on the error path
    too (a damaged blob: exit 5)."""
    store = tmp_path / "store"
    with open_app(store) as app:
        _, sha256 = add_version(app, "docs.example.com", "2026-11-20")
        add_version(app, "docs.example.com", "2026-11-21")
    damaged = store / "blobs" / "sha256" / sha256[:2] / sha256
    damaged.chmod(0o644)
    damaged.write_bytes(damaged.read_bytes()[::-1])
    config = write_config(tmp_path / "c.toml", {"store": {"path": str(store)}})
    done = subprocess.run(
        [sys.executable, "-c", OPEN_AT_EXIT, "--config", str(config), *args],
        capture_output=True,
        text=True,
        env=cli_env(),
        timeout=120,
    )
    assert done.returncode == (0 if args[-1] == "list" else 5), done.stderr
    assert json.loads(done.stderr.splitlines()[-1]) == [], done.stderr


def test_no_collections_from_now_until_the_process_ends() -> None:
    """After it, no collection runs however much is made (a command's imports: 160 of them in
    `store verify`), and a reference cycle dropped later is left to the process's end."""
    script = """
import gc, weakref
from mirror.cli import heap
ran = []
gc.callbacks.append(lambda phase, info: ran.append(phase))
heap.no_collections_from_now()
class Node:
    pass
made = []
for _ in range(100_000):
    node = Node()
    node.me = node
    made.append(node)
left = weakref.ref(made[0])
del made, node
import decimal, email.message, http.client  # as a command's start-up would
print(ran, left() is not None, gc.isenabled())
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["[]", "True", "False"]
