"""The spliced gzip (transferset/delta/_splice.py): a new version's archive made of its base's
compressed blocks. Every base is a real tar.gz made here (tarfile, zlib at several levels and
memory levels, multi-member streams); every output is read back by Python's `gzip` and
`tarfile`, and its blocks by `GzipBlocks`, to see what was copied."""

from __future__ import annotations

import gzip
import hashlib
import io
import itertools
import random
import subprocess
import tarfile
from collections import Counter, deque
from pathlib import Path

import deflate
import pytest
from hypothesis import given
from hypothesis import strategies as st

from mirror.errors import IntegrityError
from mirror.sim.site import SiteSpec, build_bundle
from mirror.transferset.delta._formats import member_header
from mirror.transferset.delta._inflate import Block, GzipBlocks
from mirror.transferset.delta._padding import padding
from mirror.transferset.delta._splice import BitWriter, Edit, NewFile, Splicer, splice_tree
from tests.fixtures.archives import EPOCH, Entry, tar_bytes
from tests.fixtures.splicing import (
    BASES,
    FAST,
    MTIME,
)
from tests.fixtures.splicing import Plan as _Plan
from tests.fixtures.splicing import base_gz as _base
from tests.fixtures.splicing import gzipped as _gzip
from tests.fixtures.splicing import plans as _plans
from tests.fixtures.splicing import site as _site
from tests.fixtures.splicing import site_tar as _site_tar
from tests.fixtures.splicing import spliced as _spliced
from tests.fixtures.splicing import text as _text

Member = tuple[str, str, int, bytes | str]


def _members(gz: bytes) -> list[Member]:
    """(name, kind, mtime, content or link target) of each member, as tarfile reads them."""
    found: list[Member] = []
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(gz)), mode="r:") as tar:
        for info in tar:
            if info.isreg():
                handle = tar.extractfile(info)
                assert handle is not None
                found.append((info.name, "file", int(info.mtime), handle.read()))
            else:
                kind = "dir" if info.isdir() else "link" if info.issym() else "other"
                found.append((info.name, kind, int(info.mtime), info.linkname))
    return found


def _expected(base: list[Member], plan: _Plan) -> list[Member]:
    """The tree `splice_tree` promises: the base's members in order as `plan` says, then the
    added files, each after its parent directories the archive does not hold yet."""
    out: list[Member] = []
    for name, kind, mtime, content in base:
        decision = plan.decisions.get(name, True) if kind == "file" else True
        if decision is True:
            out.append((name, kind, mtime, content))
        elif isinstance(decision, bytes):
            out.append((name, "file", MTIME, decision))
    directories = {name for name, kind, _, _ in base if kind == "dir"}
    for path, data in plan.new:
        parts = path.split("/")
        for depth in range(1, len(parts)):
            directory = "/".join(parts[:depth])
            if directory not in directories:
                directories.add(directory)
                out.append((directory, "dir", MTIME, ""))
        out.append((path, "file", MTIME, data))
    return out


def _check(spliced: bytes, base: bytes, plan: _Plan) -> None:
    """The output is one well-formed gzip member holding exactly the expected tree, padded
    to a 10240-byte record; the plan was asked about each base file once, in order."""
    tar = gzip.decompress(spliced)  # checks the CRC-32 and length trailer
    assert len(tar) % 10240 == 0 and tar.endswith(b"\0" * 1024)
    assert spliced[:10] == b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"
    blocks = list(GzipBlocks([spliced], label="spliced"))
    assert {b.member_start for b in blocks} == {0}
    base_members = _members(base)
    assert _members(spliced) == _expected(base_members, plan)
    files = [(name, len(content)) for name, kind, _, content in base_members if kind == "file"]
    assert plan.asked == files
    kept = {
        name: (hashlib.sha256(content).hexdigest(), len(content))
        for name, kind, _, content in base_members
        if kind == "file" and isinstance(content, bytes) and plan.decisions.get(name, True) is True
    }
    assert plan.kept_digests == kept


def _key(block: Block) -> tuple[int, bytes | int]:
    """What a copied block keeps: a stored block's bytes, or a coded block's bits (its final
    flag aside)."""
    if block.kind == 0:
        return (0, block.data)
    bits = (int.from_bytes(block.raw, "little") >> block.shift) & ((1 << block.bits) - 1)
    return (block.bits, bits & ~1)


def _copied(base: bytes, spliced: bytes) -> tuple[int, int]:
    """(how many of the base's non-empty blocks appear in the output as they were, of how
    many)."""
    base_blocks = [b for b in GzipBlocks([base], label="base") if b.data]
    out = Counter(_key(b) for b in GzipBlocks([spliced], label="spliced"))
    return sum(1 for b in base_blocks if out[_key(b)] > 0), len(base_blocks)


# ---- random plans -------------------------------------------------------------------------


@FAST
@given(_plans())
def test_a_random_plan_gives_exactly_the_planned_tree(case: tuple[str, _Plan, int]) -> None:
    name, plan, level = case
    base = _base(name)
    _check(_spliced(base, plan, level=level), base, plan)


@pytest.mark.parametrize("name", sorted(BASES))
def test_every_base_kept_whole_is_its_own_blocks_again(name: str) -> None:
    """Nothing changed: every block of the base but the last one or two (which hold its
    end-of-archive, written again) is copied, so the output is the base's size, give or take
    the recompressed tail: a level-1 splice of a level-9 base is as small as the base."""
    base = _base(name)
    plan = _Plan()
    spliced = _spliced(base, plan, level=1)
    _check(spliced, base, plan)
    copied, total = _copied(base, spliced)
    assert copied >= total - 2 and total >= 2
    assert len(spliced) <= len(base) * 1.01 + 200


def test_one_changed_page_leaves_the_rest_copied() -> None:
    base = _base("level 6 small blocks")
    page = "site/docs/page-10.html"
    plan = _Plan(decisions={page: b"<html>changed</html>\n"})
    spliced = _spliced(base, plan)
    _check(spliced, base, plan)
    copied, total = _copied(base, spliced)
    assert total > 500 and copied > total * 0.85


def test_the_same_inputs_give_the_same_bytes_whatever_the_chunking() -> None:
    base = _base("three members")
    plan = _Plan(
        decisions={"site/docs/page-03.html": False, "site/docs/big-one.html": _text(9_999, 5)},
        new=[("brand/new/x.html", b"x" * 70_000)],
    )
    first = _spliced(base, plan, chunk=65536)
    for base_chunk, content_chunk in ((1000, 4096), (1 << 30, 1), (65536, 1 << 20)):
        plan.asked.clear()
        plan.chunk = content_chunk
        assert _spliced(base, plan, chunk=base_chunk) == first


@pytest.mark.parametrize(
    ("tar_format", "pax_headers"),
    [
        (tarfile.GNU_FORMAT, None),
        (tarfile.USTAR_FORMAT, None),
        (tarfile.PAX_FORMAT, {"comment": "a global header, as git archive writes"}),
    ],
    ids=["gnu", "ustar", "pax global"],
)
def test_bases_of_each_tar_format_splice_to_the_planned_tree(
    tar_format: int, pax_headers: dict[str, str] | None
) -> None:
    long_name = "site/" + "l" * 120 + "/page.html"
    entries = [e for e in _site() if tar_format != tarfile.USTAR_FORMAT or e.name.isascii()]
    if tar_format != tarfile.USTAR_FORMAT:
        entries.append(Entry(long_name, _text(5_000, 9)))
    tar = tar_bytes(entries, tar_format=tar_format, pax_headers=pax_headers)
    base = _gzip(tar, 6, 2)
    plan = _Plan(
        decisions={"site/docs/page-04.html": False, "site/docs/big-one.html": b"short now"},
        new=[("site/docs/new.html", b"new"), ("other/" + "d" * 150 + "/x.html", b"deep")],
    )
    if tar_format != tarfile.USTAR_FORMAT:
        plan.decisions[long_name] = _text(7_000, 10)
    spliced = _spliced(base, plan)
    _check(spliced, base, plan)
    assert _copied(base, spliced)[0] > 20


def test_a_base_padded_with_zeros_after_its_gzip_stream_splices_alike() -> None:
    base = _base("level 9")
    plan = _Plan(decisions={"site/last.html": b"changed"})
    first = _spliced(base, plan)
    plan.asked.clear()
    assert _spliced(base + b"\0" * 10240, plan) == first


def test_a_simulator_site_spliced_to_its_next_export_is_that_export(tmp_path: Path) -> None:
    """The vendor simulator's site (pages, CSS, JS, images) and its next export, 5% of the
    pages changed: the base spliced under the plan of the two versions holds the next
    export's tree, at the size of the vendor's own archive of it."""
    bundles = [
        build_bundle(
            SiteSpec(
                domain="docs.example.com", export_number=n, site_size=2 << 20, change_share=0.05
            ),
            tmp_path / f"{n}.tar.gz",
        ).path.read_bytes()
        for n in (0, 1)
    ]
    old, new = ({m[0]: m[3] for m in _members(b) if m[1] == "file"} for b in bundles)
    plan = _Plan(
        decisions={p: new.get(p, False) for p in old if new.get(p) != old[p]},
        new=[(p, data) for p, data in new.items() if p not in old],
    )
    assert 0 < len(plan.decisions) < len(new) // 10
    spliced = _spliced(bundles[0], plan)
    assert {m[0]: m[3] for m in _members(spliced) if m[1] == "file"} == new
    listed = subprocess.run(["tar", "-tzf", "-"], input=spliced, capture_output=True, check=True)
    assert {n for n in listed.stdout.decode().splitlines() if not n.endswith("/")} == set(new)
    assert len(spliced) < len(bundles[1]) * 1.02
    copied, total = _copied(bundles[0], spliced)
    assert copied >= total * 0.75


# ---- the golden: pinned bytes ----------------------------------------------------------------


def _golden_base() -> bytes:
    """A base built only by code whose output is pinned: the tar by `member_header` (this
    project's own ustar writer) and the gzip members by libdeflate (`deflate`, pinned in
    pyproject.toml), not by the system's zlib, whose output may change between versions.
    Block boundaries are then a property of those bytes (RFC 1951), and the spliced output
    depends only on this project's code and the pinned libdeflate."""
    tar = bytearray()
    for n in range(12):
        data = _text(1_500 + 4_000 * n, seed=n)
        tar += member_header(f"site/page-{n:02d}.html", len(data), EPOCH, directory=False)
        tar += data + b"\0" * (-len(data) % 512)
    tar += b"\0" * 1024
    tar += b"\0" * (-len(tar) % 10240)
    third = len(tar) // 3
    return b"".join(
        bytes(deflate.gzip_compress(bytes(tar[a : a + third]), level))
        for a, level in zip(range(0, len(tar), third), (6, 0, 9, 1), strict=False)
    )


GOLDEN_BASE = "47cc8b996981b19423180544a7330ad45326333407ece3ca5824a145603deaaf"
GOLDEN = "cbe19172e90a935538a0f0dee86a9750e47e814bfe3c77ba126fb5c3e4ee2c08"


def test_the_spliced_bytes_of_a_fixed_base_and_plan_are_pinned() -> None:
    base = _golden_base()
    assert hashlib.sha256(base).hexdigest() == GOLDEN_BASE
    plan = _Plan(
        decisions={"site/page-03.html": False, "site/page-07.html": _text(5_000, seed=77)},
        new=[("site/new/page.html", b"<html>new</html>\n")],
    )
    spliced = _spliced(base, plan, level=6)
    _check(spliced, base, plan)
    assert _copied(base, spliced) == (7, 16)
    assert hashlib.sha256(spliced).hexdigest() == GOLDEN


# ---- refusals -------------------------------------------------------------------------------


@pytest.mark.parametrize("given_size", [0, 99, 101, 5_000])
@pytest.mark.parametrize("where", ["in place", "added"])
def test_new_content_of_another_length_than_its_size_is_refused(
    given_size: int, where: str
) -> None:
    class Lying(_Plan):
        def _file(self, path: str, data: bytes) -> NewFile:
            return NewFile(path, 100, lambda: iter([data[:50], data[50:given_size]]))

    content = _text(given_size, 1)
    if where == "in place":
        plan = Lying(decisions={"site/docs/page-02.html": content})
    else:
        plan = Lying(new=[("site/new.html", content)])
    with pytest.raises(IntegrityError, match=rf"holds {given_size} bytes, .* says 100"):
        _spliced(_base("level 1"), plan)


def test_a_plan_refusing_a_kept_file_stops_the_splice_before_the_end() -> None:
    """What the plan's `kept` raises (the import: the base holds another content at that
    path) ends the splice: no end-of-stream is written after it."""

    class Doubting(_Plan):
        def kept(self, path: str, sha256: str, size: int) -> None:
            if path == "site/docs/page-10.html":
                raise IntegrityError(f"{path}: not the content the file list names")
            super().kept(path, sha256, size)

    base, plan, out = _base("level 6 small blocks"), Doubting(), bytearray()
    with pytest.raises(IntegrityError, match=r"page-10\.html: not the content"):
        splice_tree([base], plan, out.extend, mtime=MTIME, level=6, label="base")
    assert "site/docs/page-10.html" not in plan.kept_digests and plan.kept_digests
    with pytest.raises(EOFError):
        gzip.decompress(bytes(out))


def test_a_base_without_end_of_archive_blocks_is_refused() -> None:
    tar = _site_tar()
    with tarfile.open(fileobj=io.BytesIO(tar)) as archive:
        archive.getmembers()
        end = archive.offset
    for cut in (tar[:end], tar[: end - 512]):
        with pytest.raises(IntegrityError, match=r"^base: its tar stream has no end-of-archive"):
            _spliced(gzip.compress(cut, mtime=0), _Plan())


def test_a_base_that_is_not_a_gzip_stream_is_refused_by_its_label() -> None:
    with pytest.raises(IntegrityError, match=r"^base: not a gzip stream"):
        _spliced(_site_tar(), _Plan())
    broken = bytearray(_base("level 6 small blocks"))
    broken[-6] ^= 1
    with pytest.raises(IntegrityError, match=r"^base: a gzip member's CRC-32 or length"):
        _spliced(bytes(broken), _Plan())


def test_a_base_member_with_an_unsafe_name_is_refused() -> None:
    base = gzip.compress(tar_bytes([Entry("site/a.html", b"a"), Entry("../evil", b"e")]))
    with pytest.raises(IntegrityError, match="evil"):
        _spliced(base, _Plan())


# ---- the Splicer alone: edits over a gzip stream -------------------------------------------


@FAST
@given(st.lists(st.tuples(st.integers(0, 2**40), st.integers(0, 40), st.booleans()), max_size=40))
def test_the_bit_writer_writes_deflate_bit_order(pieces: list[tuple[int, int, bool]]) -> None:
    """Bits least significant first, whole bytes as they fill; `realign` writes the empty
    blocks of `padding` up to a bit of a byte, after which `copy` takes `count` bits from
    that bit of some bytes as they are; `align` pads with zeros to a byte."""
    out = bytearray()
    writer = BitWriter(out.extend)
    reference, length = 0, 0
    for value, count, as_copy in pieces:
        value &= (1 << count) - 1
        if as_copy:
            shift = value % 8
            pad, pad_count = padding(length % 8, shift)
            writer.realign(shift)
            reference |= pad << length
            length += pad_count
            assert writer.held == length % 8 == shift
            raw = (value << shift | 0xFF).to_bytes((count + shift + 7) // 8 + 1, "little")
            clear = value % 3 == 0
            writer.copy(raw, shift, count, clear_final=clear)
            value = (int.from_bytes(raw, "little") >> shift) & ((1 << count) - 1)
            value &= ~1 if clear else -1
        else:
            writer.bits(value, count)
        reference |= value << length
        length += count
        assert len(out) == length // 8
    writer.align()
    assert bytes(out) == reference.to_bytes((length + 7) // 8, "little")


def test_a_copy_is_refused_where_the_output_stands_at_another_bit() -> None:
    writer = BitWriter(bytearray().extend)
    writer.bits(1, 3)
    with pytest.raises(AssertionError, match="realign"):
        writer.copy(b"\xff\xff", 2, 9, clear_final=True)


def _splice_edits(base: bytes, edits: list[Edit], *, level: int, piece: int, eager: bool) -> bytes:
    """Drive a Splicer as `splice_tree` does: edits in base order, each block once the
    edits cover it (`eager`: all edits first), inserts after the last block at the end."""
    out = bytearray()
    splicer = Splicer(out.extend, level=level, piece_size=piece)
    waiting = deque(edits)
    for block in GzipBlocks([base], label="base"):
        while waiting and (eager or splicer.covered < block.end):
            splicer.edit(waiting.popleft())
        splicer.block(block)
    splicer.end_of_blocks()
    for edit in waiting:
        splicer.edit(edit)
    splicer.close()
    return bytes(out)


@st.composite
def _edits(draw: st.DrawFn) -> tuple[str, list[Edit], bytes, int, int]:
    """A base, edits over its whole inflated stream, what they make, a level and a piece
    size."""
    name = draw(st.sampled_from(sorted(BASES)))
    size = len(_site_tar())
    cuts = sorted(set(draw(st.lists(st.integers(0, size), max_size=12))) | {0, size})
    rng = random.Random(draw(st.integers(0, 2**32)))
    tar, edits, expected = _site_tar(), [], bytearray()
    for start, end in itertools.pairwise(cuts):
        if draw(st.booleans()):
            data = rng.randbytes(rng.choice([0, 1, 100, 5_000, 40_000]))
            edits.append(Edit("insert", start, start, data))
            expected += data
        if draw(st.integers(0, 3)):
            edits.append(Edit("keep", start, end))
            expected += tar[start:end]
        else:
            edits.append(Edit("drop", start, end))
    if draw(st.booleans()):
        edits.append(Edit("insert", size, size, b"tail"))
        expected += b"tail"
    return (
        name,
        edits,
        bytes(expected),
        draw(st.sampled_from([0, 1, 6, 9])),
        draw(st.sampled_from([700, 65536, 1 << 20])),
    )


@FAST
@given(_edits())
def test_random_edits_give_their_bytes_in_one_gzip_member(
    case: tuple[str, list[Edit], bytes, int, int],
) -> None:
    name, edits, expected, level, piece = case
    base = _base(name)
    spliced = _splice_edits(base, edits, level=level, piece=piece, eager=False)
    assert gzip.decompress(spliced) == expected
    assert {b.member_start for b in GzipBlocks([spliced], label="out")} == {0}
    assert _splice_edits(base, edits, level=level, piece=piece, eager=True) == spliced


@pytest.mark.parametrize("name", ["level 6 small blocks", "level 1", "five members, small blocks"])
@pytest.mark.parametrize("kind", ["insert", "drop"])
def test_one_edit_anywhere_gives_its_bytes(name: str, kind: str) -> None:
    """One insert (or drop) at offsets spread over the stream, each inside some block: the
    blocks whose 32 KiB window it changed are not copied."""
    base, tar = _base(name), _site_tar()
    for at in range(1_001, len(tar) - 3_000, 23_456):
        if kind == "insert":
            edits = [Edit("insert", at, at, b"new" * 33), Edit("keep", at, len(tar))]
            expected = tar[:at] + b"new" * 33 + tar[at:]
        else:
            edits = [Edit("drop", at, at + 777), Edit("keep", at + 777, len(tar))]
            expected = tar[:at] + tar[at + 777 :]
        edits.insert(0, Edit("keep", 0, at))
        spliced = _splice_edits(base, edits, level=6, piece=65536, eager=False)
        assert gzip.decompress(spliced) == expected, at


@pytest.mark.parametrize("name", ["level 0", "level 9", "three members"])
def test_a_stream_ending_in_a_copied_block_ends_with_an_empty_fixed_block(name: str) -> None:
    base = _base(name)
    size = len(gzip.decompress(base))
    spliced = _splice_edits(base, [Edit("keep", 0, size)], level=6, piece=65536, eager=True)
    assert gzip.decompress(spliced) == _site_tar()
    last = list(GzipBlocks([spliced], label="out"))[-1]
    assert (last.kind, last.data, last.bits) == (1, b"", 10)
    copied, total = _copied(base, spliced)
    assert copied == total


def test_pieces_are_compressed_apart_at_the_piece_size() -> None:
    """Inserted bytes are compressed in pieces of `piece_size`: a stored level gives whole
    stored blocks of at most a piece each."""
    data = random.Random(3).randbytes(10_000)
    base = gzip.compress(b"", mtime=0)
    spliced = _splice_edits(base, [Edit("insert", 0, 0, data)], level=0, piece=3_000, eager=True)
    assert gzip.decompress(spliced) == data
    sizes = [len(b.data) for b in GzipBlocks([spliced], label="out")]
    assert [size for size in sizes if size] == [3_000, 3_000, 3_000, 1_000]
