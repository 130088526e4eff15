"""mirror.heap on the real C allocator, each case in a process of its own."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

MiB = 1024 * 1024

# A 24 MiB block freed raises glibc's own threshold to 24 MiB; three 8 MiB parts (an
# upload's) are then carved from the heap, where they stay once freed, unless told.
PARTS_FREED = """
import sys
from mirror import heap
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


def test_exit_freezes_the_heap_after_later_handlers_and_still_flushes(tmp_path: Path) -> None:
    """Frozen at exit, after the handlers registered later (they still see a live heap),
    before the interpreter's collections; a file left open is still flushed."""
    out = tmp_path / "out"
    script = f"""
import atexit, gc
from mirror import heap
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
