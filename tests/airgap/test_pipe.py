"""mirror.airgap.publish._pipe: one producer thread, one reader, bounded, in order."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

from mirror.airgap.publish._pipe import DEPTH, PIECE, Pipe


def _drain(pipe: Pipe) -> list[bytes]:
    try:
        return list(iter(pipe.get, None))
    finally:
        pipe.close()


def test_small_writes_are_gathered_into_pieces_in_order() -> None:
    writes = [bytes([n % 251]) * 1000 for n in range(3000)]

    def produce(put: Callable[[bytes], None]) -> None:
        for data in writes:
            put(data)

    pieces = _drain(Pipe(produce, name="test"))
    assert b"".join(pieces) == b"".join(writes)
    assert all(len(piece) >= PIECE for piece in pieces[:-1]) and len(pieces) < 10


def test_a_large_bytes_passes_uncopied_and_a_bytearray_is_copied() -> None:
    large = bytes(PIECE)
    mutable = bytearray(b"x" * PIECE)

    def produce(put: Callable[[bytes], None]) -> None:
        put(large)
        put(mutable)  # type: ignore[arg-type]  # what a careless producer might hand over
        mutable[:] = b"y" * PIECE

    first, second = _drain(Pipe(produce, name="test"))
    assert first is large
    assert second == b"x" * PIECE


def test_the_producers_exception_is_raised_by_the_reader_after_what_it_put() -> None:
    def produce(put: Callable[[bytes], None]) -> None:
        put(bytes(PIECE))
        raise OSError("the base object stopped")

    pipe = Pipe(produce, name="test")
    assert pipe.get() == bytes(PIECE)
    with pytest.raises(OSError, match="the base object stopped"):
        pipe.get()
    pipe.close()


def test_close_stops_a_producer_waiting_on_a_full_queue() -> None:
    puts = 0
    stopped = threading.Event()

    def produce(put: Callable[[bytes], None]) -> None:
        nonlocal puts
        try:
            while True:
                put(bytes(PIECE))
                puts += 1
        finally:
            stopped.set()

    pipe = Pipe(produce, name="test")
    assert pipe.get() is not None
    pipe.close()
    assert stopped.is_set() and puts <= DEPTH + 1  # bounded: it never ran ahead of the queue
