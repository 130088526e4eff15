"""The splice recipe (mirror/transferset/delta/_recipe.py): a spliced archive recorded as the base's
bytes it copies and the literals it adds, replayed over the base into the same bytes. The
bases are the splice's real tar.gz streams (zlib at several levels, multi-member); every
recording is checked against the splice's own output, byte for byte (whose tree the
splice's tests check)."""

from __future__ import annotations

import hashlib
import io
import json

import pytest
from hypothesis import given

from mirror.errors import IntegrityError
from mirror.transferset.delta._recipe import PIECE, RecipeWriter, Segments, read_segments, replay
from mirror.transferset.delta._splice import splice_tree
from tests.fixtures.splicing import FAST, MTIME, Plan, plans, spliced, text
from tests.fixtures.splicing import base_gz as _base


def _recorded(base: bytes, plan: Plan, *, level: int = 6) -> tuple[bytes, bytes, str, int]:
    """The recipe's segments and literals, and the archive's sha256 and size."""
    segments, literals = io.BytesIO(), io.BytesIO()
    writer = RecipeWriter(segments, literals)
    pieces = (base[i : i + 65536] for i in range(0, len(base), 65536))
    splice_tree(
        pieces, plan, writer.write, mtime=MTIME, level=level, label="base", copied=writer.copied
    )
    digest = writer.finish()
    return segments.getvalue(), literals.getvalue(), digest.sha256, digest.size


def _replayed(base: bytes, segments: Segments, literals: bytes, *, chunk: int = 65536) -> bytes:
    out = bytearray()
    pieces = (base[i : i + chunk] for i in range(0, len(base), chunk))
    for piece in replay(pieces, segments, io.BytesIO(literals)):
        out += piece
    return bytes(out)


def _segments(data: bytes, base: bytes, literals: bytes, size: int) -> Segments:
    return read_segments(
        data, base_size=len(base), literal_size=len(literals), size=size, label="item"
    )


@FAST
@given(plans())
def test_a_recorded_splice_replays_to_the_splices_own_bytes(case: tuple[str, Plan, int]) -> None:
    name, plan, level = case
    base = _base(name)
    expected = spliced(base, plan, level=level)
    plan.asked.clear()
    data, literals, sha256, size = _recorded(base, plan, level=level)
    assert (sha256, size) == (hashlib.sha256(expected).hexdigest(), len(expected))
    segments = _segments(data, base, literals, size)
    for chunk in (1, 4096, 1 << 30):
        assert _replayed(base, segments, literals, chunk=chunk) == expected


def test_one_changed_page_is_a_few_segments_and_little_literal() -> None:
    """Copies that continue one another are one segment: a base block boundary inside a
    copied run costs nothing."""
    base = _base("level 6 small blocks")
    plan = Plan(decisions={"site/docs/page-10.html": b"<html>changed</html>\n"})
    data, literals, _, size = _recorded(base, plan)
    segments = _segments(data, base, literals, size)
    assert len(segments) <= 6
    assert len(literals) < size * 0.2
    assert json.loads(data)["format"] == 1


def test_nothing_changed_is_one_copy_of_the_base_but_its_last_blocks() -> None:
    """The last block or two hold the end-of-archive, written again (test_splice)."""
    base = _base("level 6 small blocks")
    data, literals, _, size = _recorded(base, Plan())
    segments = _segments(data, base, literals, size)
    assert [copy > 0 for _, _, copy in segments][:1] == [True] and len(segments) <= 2
    assert sum(copy for _, _, copy in segments) >= len(base) * 0.9


@pytest.mark.parametrize(
    ("segments", "message"),
    [
        ([[0, 10, 5], [0, 12, 1]], "forward"),
        ([[0, 0, 10_000_000]], "forward"),
        ([[0, -1, 1]], "three counts"),
        ([[0, 1]], "three counts"),
        ([[0, True, 1]], "three counts"),
        ([[0, 1.5, 1]], "not valid strict JSON"),
        ([[3, 0, 4]], "make 7 bytes with 3 literal"),
    ],
)
def test_segments_that_do_not_read_the_base_forward_or_add_up_are_refused(
    segments: list[list[object]], message: str
) -> None:
    data = json.dumps({"format": 1, "segments": segments}).encode()
    with pytest.raises(IntegrityError, match=message):
        read_segments(data, base_size=100, literal_size=4, size=9, label="item")


@pytest.mark.parametrize(
    "document",
    [b'{"format":2,"segments":[]}', b'{"segments":[]}', b"[]", b'{"format":1,"segments":{}}'],
)
def test_a_document_of_another_shape_is_refused(document: bytes) -> None:
    with pytest.raises(IntegrityError, match="not a format 1 recipe"):
        read_segments(document, base_size=0, literal_size=0, size=0, label="item")


def test_literals_or_a_base_shorter_than_the_recipe_are_refused() -> None:
    base = _base("level 1")
    plan = Plan(decisions={"site/docs/big-one.html": text(5000, 3)})
    data, literals, _, size = _recorded(base, plan)
    segments = _segments(data, base, literals, size)
    with pytest.raises(IntegrityError, match="recipe/literals ends before its recipe"):
        _replayed(base, segments, literals[:-1])
    with pytest.raises(IntegrityError, match="base object ends before its recipe"):
        _replayed(base[: len(base) // 2], segments, literals)


def test_a_replay_reads_the_base_to_its_end() -> None:
    """The caller hashes the base as it passes: every byte must pass, the ones no copy
    takes included."""
    base = _base("level 6 small blocks")
    data, literals, _, size = _recorded(base, Plan())
    segments = _segments(data, base, literals, size)
    seen = bytearray()

    def pieces() -> object:
        for i in range(0, len(base), 4096):
            seen.extend(base[i : i + 4096])
            yield base[i : i + 4096]

    for _ in replay(pieces(), segments, io.BytesIO(literals)):  # type: ignore[arg-type]
        pass
    assert bytes(seen) == base


def test_a_long_literal_run_is_replayed_in_pieces_of_at_most_piece_bytes() -> None:
    """A new file of hundreds of MiB is one literal run (everything written between two
    copies): memory must hold a piece of it, not all of it, at either side."""
    base = b"b" * 100
    literal = bytes(range(256)) * ((3 * PIECE + 5) // 256 + 1)
    data = json.dumps({"format": 1, "segments": [[len(literal), 10, 50], [7, 60, 0]]}).encode()
    literals = literal + b"literal"
    segments = _segments(data, base, literals, len(literals) + 50)
    pieces = list(replay(iter([base]), segments, io.BytesIO(literals)))
    assert b"".join(pieces) == literal + base[10:60] + b"literal"
    assert max(len(piece) for piece in pieces) <= PIECE
