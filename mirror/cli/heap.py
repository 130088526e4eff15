"""The process's heap: what the C allocator and the interpreter's collector are told once, at
the start of every command (the daemon's included), so memory follows the work.

Promises:
- `return_large_blocks`: a block of MMAP_THRESHOLD bytes or more (an upload's 8 MiB parts,
  a rebuild's pieces) goes back to the system when it is freed. glibc otherwise raises its
  threshold to the largest block freed, up to 32 MiB, and carves the next such blocks from
  the heap, where they stay once freed: the 200,000-file rebuild peaked 16 MiB higher
  (bench/RESULTS.md). Smaller blocks (1 MiB reads) keep glibc's fast reuse: the heap's top
  is trimmed only past TRIM_THRESHOLD (glibc's own rule, twice the mmap threshold, which a
  fixed threshold otherwise turns off: trimming at 128 KiB made every 1 MiB read fault its
  pages in again, 0.3 CPU s a GiB). Without glibc's `mallopt` (musl, another system), or
  with a threshold set in the environment, nothing is changed.
- `skip_the_exit_collections`: at exit, after every other exit handler, the heap is frozen,
  so the interpreter's last two collections do not walk every object the imports made
  (SQLAlchemy, pydantic, botocore: 0.2-0.3 s a command on 2 cores). What is still alive is
  torn down by reference counting as before (files flushed and closed), except what only
  those collections reach: an object in a reference cycle, alive (held by a module) or
  garbage, is never finalized, so a buffered file held through one is not flushed. Hence
  every file mirror writes is closed by its owner before exit (`with`, `close`); at exit
  only the standard streams are open (flushed by the interpreter itself) and logging's
  handlers are flushed by its own exit handler. The memory goes back with the process.
- `no_collections_from_now`: no collection of reference cycles for the rest of the process,
  for a command whose start-up and work make objects that all live until it exits (`store
  verify`: its imports make tens of thousands, and every collection walked them again for
  nothing: 160 collections, 0.06 s of CPU while its blobs hash). Cyclic garbage made after
  it goes back with the process, so it is for a command's last stretch, never a loop.
"""

from __future__ import annotations

import atexit
import ctypes
import gc
import os

MMAP_THRESHOLD = 4 * 1024 * 1024
TRIM_THRESHOLD = 2 * MMAP_THRESHOLD
_M_TRIM_THRESHOLD = -1  # glibc's malloc.h
_M_MMAP_THRESHOLD = -3
_SETTINGS = {
    "mmap_threshold": (_M_MMAP_THRESHOLD, MMAP_THRESHOLD),
    "trim_threshold": (_M_TRIM_THRESHOLD, TRIM_THRESHOLD),
}


def return_large_blocks() -> bool:
    """Fix glibc's mmap and trim thresholds at MMAP_THRESHOLD and TRIM_THRESHOLD; False where
    there is no glibc to tell, or where the environment already set either
    (MALLOC_MMAP_THRESHOLD_, MALLOC_TRIM_THRESHOLD_, or the same in GLIBC_TUNABLES): an
    operator's or a measurement's setting is kept, not silently replaced."""
    tunables = os.environ.get("GLIBC_TUNABLES", "")
    if any(f"MALLOC_{name.upper()}_" in os.environ or name in tunables for name in _SETTINGS):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (AttributeError, OSError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return all(mallopt(option, value) for option, value in _SETTINGS.values())


def skip_the_exit_collections() -> None:
    """Freeze the heap at exit (registered now, so it runs after every handler registered
    later)."""
    atexit.register(gc.freeze)


def no_collections_from_now() -> None:
    """Turn the collector off; it stays off until the process ends (the exit freeze stands)."""
    gc.disable()
