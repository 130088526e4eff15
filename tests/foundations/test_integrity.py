"""mirror.integrity on real files: the one streaming hash, hashing writer and digest check."""

from __future__ import annotations

import hashlib
import io
import mmap
import os
import random
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from mirror import integrity
from mirror.errors import IntegrityError
from mirror.integrity import (
    CHUNK_SIZE,
    MAP_WINDOW,
    BackgroundSha256,
    Digest,
    HashingWriter,
    hash_bytes,
    hash_file,
    hash_mapped_file,
    hash_stream,
    iter_file,
    mismatch,
    require_digest,
)

DATA = bytes(range(256)) * (CHUNK_SIZE // 256 * 2 + 7)  # two chunks and a bit


def test_hash_stream_copies_what_it_hashes_and_counts_progress(tmp_path: Path) -> None:
    seen: list[int] = []
    target = tmp_path / "copy"
    with target.open("wb") as writer:
        digest = hash_stream(io.BytesIO(DATA), writer=writer, on_progress=seen.append)
    assert digest == Digest(hashlib.sha256(DATA).hexdigest(), len(DATA))
    assert target.read_bytes() == DATA
    assert sum(seen) == len(DATA) and max(seen) <= CHUNK_SIZE


def test_hash_stream_reads_no_more_than_its_limit() -> None:
    source = io.BytesIO(DATA)
    digest = hash_stream(source, limit=CHUNK_SIZE + 10)
    assert digest.size == CHUNK_SIZE + 10
    assert source.tell() == CHUNK_SIZE + 10
    assert digest.sha256 == hash_bytes(DATA[: CHUNK_SIZE + 10])


def test_hash_file_and_iter_file_cover_a_byte_range(tmp_path: Path) -> None:
    path = tmp_path / "blob"
    path.write_bytes(DATA)
    assert hash_file(path) == Digest(hash_bytes(DATA), len(DATA))
    start, length = CHUNK_SIZE - 3, CHUNK_SIZE + 5
    assert hash_file(path, start, length) == Digest(
        hash_bytes(DATA[start : start + length]), length
    )
    assert hash_file(path, len(DATA) - 3, 100) == Digest(hash_bytes(DATA[-3:]), 3)
    assert hash_file(path, len(DATA) + 1) == hash_file(path, 0, 0) == Digest(hash_bytes(b""), 0)
    assert b"".join(iter_file(path, start)) == DATA[start:]
    assert all(len(chunk) <= CHUNK_SIZE for chunk in iter_file(path))


def test_hashing_writer_hashes_exactly_what_reaches_the_file(tmp_path: Path) -> None:
    path = tmp_path / "out"
    with path.open("wb") as handle:
        writer = HashingWriter(handle)
        writer.write(b"abc")
        writer.write(memoryview(b"defg")[1:])
        writer.flush()
    assert path.read_bytes() == b"abcefg"
    assert writer.result == Digest(hash_bytes(b"abcefg"), 6)


def test_hashing_writer_without_a_file_is_a_running_digest() -> None:
    running = HashingWriter()
    for piece in (b"one ", bytearray(b"two "), memoryview(b"three")):
        running.write(piece)
    assert running.result == Digest(hash_bytes(b"one two three"), 13)


def test_background_sha256_matches_hashlib() -> None:
    background = BackgroundSha256()
    for chunk in (DATA[:CHUNK_SIZE], DATA[CHUNK_SIZE:]):
        background.update(chunk)
    assert background.hexdigest() == hash_bytes(DATA)
    background.close()  # closing twice is harmless
    assert background.hexdigest() == hash_bytes(DATA)


def test_require_digest_passes_the_right_bytes_and_names_the_wrong_ones() -> None:
    good = Digest(hash_bytes(b"x"), 1)
    require_digest("blob", good, good.sha256, 1)
    require_digest("blob", good.sha256, good.sha256)
    with pytest.raises(IntegrityError) as wrong:
        require_digest("the blob", good, "f" * 64)
    assert wrong.value.message == f"the blob hashes to {good.sha256[:12]}…, expected ffffffffffff…"
    assert wrong.value.exit_code == 5
    with pytest.raises(IntegrityError, match="the blob is 1 bytes, expected 2"):
        require_digest("the blob", good, good.sha256, 2)


def test_mismatch_is_the_one_wording() -> None:
    error = mismatch("content", "a" * 64, "b" * 64, hint="restore it")
    assert error.message == "content hashes to aaaaaaaaaaaa…, expected bbbbbbbbbbbb…"
    assert error.hint == "restore it"


WINDOWS = bytes(range(251)) * (MAP_WINDOW * 2 // 251 + 3)  # two windows and a bit


@pytest.mark.parametrize("size", [0, 1, MAP_WINDOW - 1, MAP_WINDOW, MAP_WINDOW + 1, len(WINDOWS)])
def test_hash_mapped_file_gives_what_hash_file_gives(tmp_path: Path, size: int) -> None:
    path = tmp_path / "blob"
    path.write_bytes(WINDOWS[:size])
    assert hash_mapped_file(path) == hash_file(path) == Digest(hash_bytes(WINDOWS[:size]), size)


def test_hash_mapped_file_reads_what_the_kernel_will_not_populate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An advice the kernel refuses (EINVAL, as a kernel before 5.14 refuses
    MADV_POPULATE_READ) hashes every window by reading it."""
    path = tmp_path / "blob"
    path.write_bytes(WINDOWS)
    monkeypatch.setattr("mirror.integrity.MADV_POPULATE_READ", 0x7FFF)
    with path.open("rb") as handle:
        mapped = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
    with mapped, pytest.raises(OSError):
        mapped.madvise(0x7FFF)
    assert hash_mapped_file(path) == Digest(hash_bytes(WINDOWS), len(WINDOWS))


@pytest.mark.parametrize("when", ["before its window is mapped", "once its window is mapped"])
def test_a_file_cut_short_while_hashed_is_read_not_a_sigbus(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, when: str
) -> None:
    """Cut short after its size was taken, as if no lease held the truncation off (the
    kernel's EFAULT is also what an I/O error gives, a FUSE file's EIO for one): the second
    window cannot be mapped (Python sees the file is shorter) or, once mapped, populated
    (EFAULT, where touching the pages would have raised SIGBUS). The rest is read: the
    digest of what the file now holds, as `hash_file` gives it."""
    path = tmp_path / "blob"
    path.write_bytes(WINDOWS)
    monkeypatch.setattr(integrity, "_mappable_size", lambda fd: os.fstat(fd).st_size)
    monkeypatch.setattr(integrity, "_lease_held", lambda fd: True)
    cut = MAP_WINDOW + 12345
    populated: list[int] = []

    class CutShort(mmap.mmap):
        def madvise(self, option: int, start: int = 0, length: int = 0) -> None:
            populated.append(len(self))
            if when == "once its window is mapped" and len(populated) == 2:
                os.truncate(path, cut)
            super().madvise(option, start, length or len(self))

    real_window = integrity._hash_window

    def window(fd: int, offset: int, length: int, digest: Any) -> bool:
        if when == "before its window is mapped" and offset == MAP_WINDOW:
            os.truncate(path, cut)
        return real_window(fd, offset, length, digest)

    monkeypatch.setattr(integrity.mmap, "mmap", CutShort)
    monkeypatch.setattr(integrity, "_hash_window", window)
    assert hash_mapped_file(path) == Digest(hash_bytes(WINDOWS[:cut]), cut) == hash_file(path)
    assert len(populated) == (2 if when == "once its window is mapped" else 1)


@pytest.mark.parametrize("kind", ["fifo", "device", "directory"])
def test_hash_mapped_file_refuses_what_is_not_a_regular_file_without_waiting(
    tmp_path: Path, kind: str
) -> None:
    """A FIFO was opened, which waits for a writer (here one comes after 2 s; none would
    under blobs/), a device read (a link to /dev/zero never ends; /dev/null here): both are
    refused before a byte is read, as a directory is."""
    path = tmp_path / "blob"
    writer = threading.Timer(2, lambda: os.close(os.open(path, os.O_WRONLY)))
    writer.daemon = True
    if kind == "fifo":
        os.mkfifo(path)
        writer.start()
    elif kind == "device":
        path.symlink_to("/dev/null")
    else:
        path.mkdir()
    try:
        with pytest.raises(OSError, match="not a regular file"):
            hash_mapped_file(path)
    finally:
        writer.cancel()


# Hashes the file named by argv[1] ten times (a process of its own: SIGBUS kills it).
HASH_TEN_TIMES = """
import sys
from pathlib import Path
from mirror.integrity import hash_mapped_file
for _ in range(10):
    hash_mapped_file(Path(sys.argv[1]))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux's leases")
def test_a_file_rewritten_in_place_while_hashed_waits_for_the_hash(tmp_path: Path) -> None:
    """Another process cuts the file short and writes it again every few ms (`cp` over a
    blob does both): mapped without a lease, 53 of 54 hashing processes died of SIGBUS; with
    it, the writer waits until each hash is done and every hash ends."""
    path = tmp_path / "blob"
    data = os.urandom(64 * 1024 * 1024)
    path.write_bytes(data)
    hashing = subprocess.Popen([sys.executable, "-c", HASH_TEN_TIMES, str(path)])
    deadline = time.monotonic() + 120
    cuts = 0
    while hashing.poll() is None and time.monotonic() < deadline:
        os.truncate(path, random.randrange(len(data)))
        time.sleep(0.002)
        with path.open("r+b") as rewrite:
            rewrite.write(data)
        cuts += 1
    assert hashing.wait(120) == 0 and cuts > 0


# Hashes the file named by argv[1], telling when a window starts and holding it until a writer
# waits (the read lease is being broken; a minute at most), however slowly the writer comes.
SLOW_WINDOWS = """
import fcntl, sys, time
from pathlib import Path
from mirror import integrity
mapped = []
real = integrity._hash_window
def slow(*args):
    mapped.append(args[1])
    print("mapping", flush=True)
    deadline = time.monotonic() + 60
    while fcntl.fcntl(args[0], fcntl.F_GETLEASE) == fcntl.F_RDLCK:
        if time.monotonic() > deadline:
            break
        time.sleep(0.01)
    return real(*args)
integrity._hash_window = slow
digest = integrity.hash_mapped_file(Path(sys.argv[1]))
print(digest.sha256, len(mapped))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux's leases")
def test_once_a_writer_waits_the_rest_is_read_not_mapped(tmp_path: Path) -> None:
    """A writer that waits on the lease longer than lease-break-time (45 s) gets the file
    anyway: a hash still mapping windows then could be cut short under them (SIGBUS). From
    the moment one waits the rest is read; the writer goes on once the hash is done."""
    path = tmp_path / "blob"
    data = os.urandom(16 * MAP_WINDOW)
    path.write_bytes(data)
    hashing = subprocess.Popen(
        [sys.executable, "-c", SLOW_WINDOWS, str(path)], stdout=subprocess.PIPE, text=True
    )
    assert hashing.stdout is not None and hashing.stdout.readline() == "mapping\n"
    os.close(os.open(path, os.O_WRONLY))  # waits for the hash
    out, _ = hashing.communicate(timeout=60)
    sha256, mapped = out.split()[-2:]
    assert sha256 == hash_bytes(data) and hashing.returncode == 0
    assert int(mapped) == 1, out  # of 16 windows: the one under way when the writer came
