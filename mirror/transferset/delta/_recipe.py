"""The splice recipe: a spliced archive as the base object's bytes it copies and the bytes it adds.

The pack holds a spliced delta's base bundle, so it makes the spliced archive itself (with
`transferset/delta/_splice.py`, the code and the pinned libdeflate the import's splice uses) and
records it as segments: each is `literal` bytes, taken in order from the literals, then
`copy` bytes of the base object from its offset `offset`. The signed manifest names the base
object's and the archive's sha256 and size (`DeltaEntry.recipe`). An import whose base
object is those bytes publishes the archive by replaying the recipe: one read of the base
and byte copies, no inflate and no file hashed, the archive proved by its signed digest. Any
other base object takes the splice, proved file by file (`mirror.airgap.publish`).

This module alone owns the format. Two members of the delta blob (`transferset/delta/_formats.py`),
before its file list: `recipe/segments`, canonical JSON
``{"format": 1, "segments": [[literal, offset, copy], ...]}``, and `recipe/literals`, the
literals' bytes.

Promises:
- `RecipeWriter` takes a `Splicer`'s output (`write` and `copied`) and records it as it
  comes: the literals to one file, the segments to another (memory holds neither the archive
  nor its segments), a copy that continues the previous one merged into it; `finish` gives
  the archive's sha256 and size.
- `read_segments` accepts only segments that read the base forward (each copy at or past the
  end of the one before, inside the base) and whose literals and copies add up to the sizes
  given; anything else is IntegrityError (exit 5) naming the recipe.
- `replay` gives the archive from the base's chunks, the segments and the literals, in
  pieces of at most `PIECE` bytes (or a base chunk's size: a long literal run, a new file
  of hundreds of MiB, is read and given a piece at a time), and reads the base to its end
  (the caller checks the digests: the base's, and the archive's signed one).
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Iterator
from typing import IO, Any

from mirror.errors import IntegrityError
from mirror.integrity import Digest, HashingWriter
from mirror.transferset.delta._formats import RECIPE_LITERALS as LITERALS_NAME
from mirror.transferset.delta._formats import RECIPE_SEGMENTS as SEGMENTS_NAME
from mirror.transferset.format import parse_strict_json

FORMAT = 1
MAX_SEGMENTS_BYTES = 64 * 1024 * 1024
PIECE = 1024 * 1024


class RecipeWriter:
    """Records a Splicer's output (module docstring): pass `write` and `copied` to it."""

    def __init__(self, segments: IO[bytes], literals: IO[bytes]) -> None:
        self._segments = segments
        self._literals = literals
        self._archive = HashingWriter()
        self._literal = 0  # literal bytes not in a segment yet
        self._open: list[int] | None = None  # the segment whose copy may still grow
        self._end = 0  # where the last copy ended in the base
        self._count = 0
        segments.write(b'{"format":%d,"segments":[' % FORMAT)

    def write(self, data: bytes) -> None:
        self._archive.write(data)
        self._literals.write(data)
        self._close()
        self._literal += len(data)

    def copied(self, offset: int, data: bytes) -> None:
        self._archive.write(data)
        if self._open is not None and offset == self._open[1] + self._open[2]:
            self._open[2] += len(data)
            return
        self._close()
        self._open = [self._literal, offset, len(data)]
        self._literal = 0

    def finish(self) -> Digest:
        """The segments closed; the archive's sha256 and size."""
        self._close()
        if self._literal:
            self._emit([self._literal, self._end, 0])
        self._segments.write(b"]}")
        return self._archive.result

    def _close(self) -> None:
        if self._open is not None:
            self._emit(self._open)
            self._end = self._open[1] + self._open[2]
            self._open = None

    def _emit(self, segment: list[int]) -> None:
        literal, offset, copy = segment
        comma = b"," if self._count else b""
        self._segments.write(comma + b"[%d,%d,%d]" % (literal, offset, copy))
        self._count += 1


class Segments:
    """Checked segments (`read_segments`), held as one array of integers."""

    def __init__(self, values: array[int]) -> None:
        self._values = values

    def __len__(self) -> int:
        return len(self._values) // 3

    def __iter__(self) -> Iterator[tuple[int, int, int]]:
        values = self._values
        for n in range(0, len(values), 3):
            yield values[n], values[n + 1], values[n + 2]


def _segment_list(data: bytes, where: str) -> list[Any]:
    """The document's list of segments, unchecked: a bounded, strict JSON document of
    this format."""
    if len(data) > MAX_SEGMENTS_BYTES:
        raise IntegrityError(f"{where}: larger than {MAX_SEGMENTS_BYTES} bytes")
    document = parse_strict_json(data, where)
    if (
        not isinstance(document, dict)
        or document.keys() != {"format", "segments"}
        or document["format"] != FORMAT
        or not isinstance(document["segments"], list)
    ):
        raise IntegrityError(f"{where}: not a format {FORMAT} recipe")
    return document["segments"]


def read_segments(
    data: bytes, *, base_size: int, literal_size: int, size: int, label: str
) -> Segments:
    """The segments of `data` (module docstring), checked against the base's size, the
    literals' size and the archive's size."""
    where = f"{label}: {SEGMENTS_NAME}"
    values: array[int] = array("q")
    end = literals = copies = 0
    for segment in _segment_list(data, where):
        if (
            not isinstance(segment, list)
            or len(segment) != 3
            or not all(type(n) is int and 0 <= n < 2**62 for n in segment)
        ):
            raise IntegrityError(f"{where}: a segment is not three counts: {segment!r:.80}")
        literal, offset, copy = segment
        if offset < end or offset + copy > base_size:
            raise IntegrityError(
                f"{where}: a copy of base bytes [{offset}, {offset + copy}) does not read the "
                f"base forward from {end} within its {base_size} bytes"
            )
        end = offset + copy
        literals += literal
        copies += copy
        values.extend(segment)
    if literals != literal_size or literals + copies != size:
        raise IntegrityError(
            f"{where}: its segments make {literals + copies} bytes with {literals} literal, "
            f"the recipe names {size} with {literal_size}"
        )
    return Segments(values)


def replay(base: Iterable[bytes], segments: Segments, literals: IO[bytes]) -> Iterator[bytes]:
    """The archive (module docstring), in pieces of at most `PIECE` bytes."""
    cursor = _Cursor(iter(base))
    out = bytearray()
    for literal, offset, copy in segments:
        while literal:
            data = literals.read(min(literal, PIECE))
            if not data:
                raise IntegrityError(f"{LITERALS_NAME} ends before its recipe")
            literal -= len(data)
            if len(out) + len(data) > PIECE and out:
                yield bytes(out)
                out.clear()
            out += data
        cursor.skip_to(offset)
        for view in cursor.take(copy):
            if len(out) + len(view) > PIECE and out:
                yield bytes(out)
                out.clear()
            if len(view) >= PIECE:
                yield bytes(view)
            else:
                out += view
        if len(out) >= PIECE:
            yield bytes(out)
            out.clear()
    if out:
        yield bytes(out)
    cursor.drain()


class _Cursor:
    """The base's bytes by offset, read forward once."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self._chunks = chunks
        self._view = memoryview(b"")
        self._at = 0  # the base offset of the view's first byte

    def skip_to(self, offset: int) -> None:
        while self._at + len(self._view) < offset:
            self._at += len(self._view)
            self._view = memoryview(self._next())
        self._view = self._view[offset - self._at :]
        self._at = offset

    def take(self, count: int) -> Iterator[memoryview]:
        while count:
            if not self._view:
                self._view = memoryview(self._next())
            view = self._view[:count]
            self._view = self._view[len(view) :]
            self._at += len(view)
            count -= len(view)
            yield view

    def drain(self) -> None:
        for _ in self._chunks:
            pass

    def _next(self) -> bytes:
        chunk = next(self._chunks, None)
        if chunk is None:
            raise IntegrityError("the base object ends before its recipe")
        return chunk
