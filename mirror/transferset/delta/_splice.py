"""The spliced gzip: a new version's archive made of its base's compressed blocks.

A delta version whose base is a gzip stream is published as the base's archive edited: the
base's deflate blocks whose bytes are unchanged are copied bit for bit, and only what
changed (and up to 32 KiB after it, the reach of a back-reference) is compressed again, by
the pinned libdeflate. Compressing a whole site is what made a delta pack and a delta
import cost several times a full import; this costs one inflate of the base and the
compression of the changed pages, at the base's own ratio.

The bytes (only the importing side makes them: what both sides agree on is the tree):
- one gzip member with fixed header fields (as `transferset/delta/_compression.py`'s pieces) and
  one deflate stream; its CRC-32 and length trailer;
- the uncompressed stream is described by `Edit`s over the base's inflated stream in its
  order: `keep` a range of it, `drop` a range, `insert` new bytes;
- a base block is copied when its bytes and the 32 KiB before it (or back to its gzip
  member's start) are one run of kept bytes with nothing inserted or dropped inside. It is
  copied as bytes, not shifted: where the output does not stand at the bit of a byte at
  which the block began in the base, empty blocks (`transferset/delta/_padding.py`) take it
  there first (once for a run of blocks: they follow each other in both streams), so
  every byte but the first and last is the base's (a stored block's too); the final
  block flag of a copied block is cleared;
- everything else is gathered, in order, and compressed one-shot by libdeflate at `level`
  in pieces of `piece_size` bytes (a shorter piece just before each copied block and at
  the end), each beginning at a byte boundary and its blocks non-final, followed by
  empty blocks to a byte boundary (`compress_piece`); the stream ends with an empty final
  block of fixed codes.

Promises: memory is one base block, one piece and its compressed form; input is read once.
Each base file the plan keeps is hashed as its bytes pass and its digest handed to the plan
(`TreePlan.kept`), so a side that trusts only a signed file list proves what it kept. Given
`listed` (the checked paths of every file the plan writes: the signed list's), a base member
that is neither a regular file nor a directory (a link, a device, a fifo) is IntegrityError,
as a side publishing a bundle's tree must not keep one; so is a directory an archive checked
by `mirror.archive` could not hold beside those files (where a file is, below one, a name
twin). The files themselves were checked with the list.
"""

from __future__ import annotations

import hashlib
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from mirror.archive import ArchiveLimits, TreePaths, file_at_the_root, member_path, tree_hash
from mirror.archive.spill import SpillMap
from mirror.errors import IntegrityError
from mirror.transferset.delta._compression import MEMBER_HEADER
from mirror.transferset.delta._formats import archive_ending, member_header
from mirror.transferset.delta._inflate import Block, GzipBlocks, crc32, final_block
from mirror.transferset.delta._padding import padding
from mirror.transferset.delta._tarunits import MemberData, TarUnits, Unit

WINDOW = 32 * 1024
PIECE_SIZE = 1024 * 1024


@dataclass(frozen=True)
class Edit:
    """`keep` or `drop` the base's inflated bytes [start, end); or `insert` `data` where
    the previous edit ended."""

    kind: Literal["keep", "drop", "insert"]
    start: int
    end: int
    data: bytes | Callable[[], Iterable[bytes]] = b""

    def chunks(self) -> Iterable[bytes]:
        return (self.data,) if isinstance(self.data, bytes) else self.data()


class BitWriter:
    """Deflate's bit order (least significant first) into whole bytes given to `write`;
    base blocks copied as bytes once the output stands at their bit (`realign`)."""

    def __init__(
        self,
        write: Callable[[bytes], object],
        copied: Callable[[int, bytes], object] | None = None,
    ) -> None:
        self._write = write
        self._copied = copied or (lambda _offset, data: write(data))
        self._acc = 0
        self._count = 0

    @property
    def held(self) -> int:
        """Bits written into the byte not given yet (0-7): the stream's bit in its byte."""
        return self._count

    def bits(self, value: int, count: int) -> None:
        self._acc |= value << self._count
        self._count += count
        self._emit()

    def realign(self, shift: int) -> None:
        """Empty blocks (`transferset/delta/_padding.py`) up to bit `shift` of a byte: call only
        between blocks."""
        self.bits(*padding(self._count, shift))

    def copy(
        self, raw: bytes, shift: int, count: int, *, clear_final: bool, offset: int = 0
    ) -> None:
        """`count` bits of `raw` from bit `shift` of its first byte, where the output
        stands at bit `shift` too (`realign`): bytes copied, not shifted. The bytes that
        are `raw`'s own (all but the first, and the first too when it comes out unchanged)
        go to `copied` with their offset, `raw[0]` standing at `offset`."""
        assert self._count == shift, "realign first"
        end = shift + count
        if end < 8:
            self.bits(raw[0] >> shift & ((1 << count) - 1) & ~int(clear_final), count)
            return
        first = raw[0] >> shift & ~int(clear_final)
        whole = end // 8
        head = (self._acc | first << shift) & 0xFF
        if head == raw[0]:
            self._copied(offset, raw[:whole])
        else:
            self._write(bytes((head,)))
            if whole > 1:
                self._copied(offset + 1, raw[1:whole])
        self._count = end % 8
        self._acc = raw[whole] & ((1 << self._count) - 1) if self._count else 0

    def align(self) -> None:
        """Zero bits to the next byte: only after the final block."""
        self._count += -self._count % 8
        self._emit()

    def _emit(self) -> None:
        whole = self._count // 8
        if whole:
            self._write((self._acc & ((1 << (whole * 8)) - 1)).to_bytes(whole, "little"))
            self._acc >>= whole * 8
            self._count -= whole * 8


def compress_piece(piece: bytes, level: int) -> bytes:
    """`piece` compressed one-shot by libdeflate at `level` into non-final blocks, then
    empty blocks to a byte boundary: whole bytes that a deflate stream standing at a byte
    boundary takes as they are."""
    import deflate

    deflated = bytes(deflate.deflate_compress(piece, level))
    try:
        final, end = final_block(deflated)  # libdeflate marks its last block final
    except IntegrityError as exc:  # not the base's fault: no refusal of it
        raise RuntimeError(f"libdeflate's output does not inflate: {exc.message}") from None
    out = bytearray(deflated[: end // 8])
    tail = deflated[end // 8] & ((1 << end % 8) - 1) if end % 8 else 0
    if final // 8 < len(out):
        out[final // 8] &= ~(1 << final % 8)
    else:  # the flag is among the bits of the last byte
        tail &= ~(1 << final % 8)
    writer = BitWriter(out.extend)
    writer.bits(tail, end % 8)
    writer.realign(0)
    return bytes(out)


class Splicer:
    """Writes the spliced gzip (module docstring) of the base's `Block`s under `Edit`s."""

    def __init__(
        self,
        write: Callable[[bytes], object],
        *,
        level: int,
        piece_size: int = PIECE_SIZE,
        copied: Callable[[int, bytes], object] | None = None,
    ) -> None:
        self._write = write
        self._bits = BitWriter(write, copied)
        self._level = level
        self._piece_size = piece_size
        self._pending = bytearray()
        self._crc = 0
        self._size = 0
        self._edits: deque[Edit] = deque()
        self.covered = 0
        self._blocks_ended = False
        self._run_start = 0  # where the current run of kept base bytes began
        write(MEMBER_HEADER)

    def edit(self, edit: Edit) -> None:
        """The next edit, in base order; a block is spliced once the edits cover it."""
        assert not self._blocks_ended or edit.kind == "insert", "only inserts follow the blocks"
        last = self._edits[-1] if self._edits else None
        if last is not None and edit.kind == last.kind == "keep" and last.end == edit.start:
            self._edits[-1] = Edit("keep", last.start, edit.end)  # one run, one edit
        else:
            self._edits.append(edit)
        self.covered = max(self.covered, edit.end)
        if self._blocks_ended:
            self._take_edits(None, gather=None)

    def end_of_blocks(self) -> None:
        """No block follows: edits from now on are applied as they come (inserts at the
        end), so what they insert is not held."""
        self._blocks_ended = True
        self._take_edits(None, gather=None)

    def block(self, block: Block) -> None:
        """Splice one base block: the edits given must cover it (`covered` >= its end)."""
        if not self._copyable(block):
            self._take_edits(block.end, gather=block)
            return
        while self._edits and self._edits[0].kind == "insert":  # at the block's start
            self._run_start = block.start
            for chunk in self._edits.popleft().chunks():
                self._gather(chunk)
        self._flush()
        self._copy(block)
        self._take_edits(block.end, gather=None)

    def close(self) -> None:
        """After the last block: what the edits insert at the end, then an empty final
        block and the trailer."""
        self._take_edits(None, gather=None)
        self._flush()
        self._bits.bits(0b011, 3 + 7)  # BFINAL, fixed codes, end-of-block (7 zero bits)
        self._bits.align()
        self._write(
            (self._crc & 0xFFFFFFFF).to_bytes(4, "little")
            + (self._size & 0xFFFFFFFF).to_bytes(4, "little")
        )

    def _copyable(self, block: Block) -> bool:
        """Only kept bytes in the block, in one run reaching back as far as its references
        can (a stored block references nothing)."""
        reach = block.start if block.kind == 0 else max(block.start - WINDOW, block.member_start)
        run_start = self._run_start
        for edit in self._edits:
            if edit.start >= block.end:
                break
            if edit.kind == "drop" or (edit.kind == "insert" and edit.start > block.start):
                return False
            if edit.kind == "insert":
                run_start = block.start
            elif edit.end >= block.end:
                return run_start <= reach
        return False

    def _take_edits(self, upto: int | None, gather: Block | None) -> None:
        """Consume the edits before base offset `upto` (all of them with None), gathering
        the kept bytes of `gather` and every insert into the pending piece."""
        while self._edits and (upto is None or self._edits[0].start < upto):
            edit = self._edits.popleft()
            if edit.kind == "insert":
                self._run_start = edit.start
                for chunk in edit.chunks():
                    self._gather(chunk)
                continue
            end = edit.end if upto is None else min(edit.end, upto)
            if edit.kind == "drop":
                self._run_start = end
            elif gather is not None:
                self._gather(gather.data[edit.start - gather.start : end - gather.start])
            if end < edit.end:
                self._edits.appendleft(Edit(edit.kind, end, edit.end))
                return

    def _gather(self, data: bytes) -> None:
        self._count(data)
        self._pending += data
        while len(self._pending) >= self._piece_size:
            piece = bytes(self._pending[: self._piece_size])
            del self._pending[: self._piece_size]
            self._deflate(piece)

    def _flush(self) -> None:
        if self._pending:
            piece = bytes(self._pending)
            self._pending.clear()
            self._deflate(piece)

    def _deflate(self, piece: bytes) -> None:
        self._bits.realign(0)
        self._write(compress_piece(piece, self._level))

    def _copy(self, block: Block) -> None:
        self._count(block.data)
        self._bits.realign(block.shift)
        self._bits.copy(block.raw, block.shift, block.bits, clear_final=True, offset=block.offset)

    def _count(self, data: bytes) -> None:
        """`data` joins the output's uncompressed bytes: its CRC-32 and length."""
        self._crc = crc32(data, self._crc)
        self._size += len(data)


# ---- the tree: which of the base's members stay -------------------------------------------


@dataclass(frozen=True)
class NewFile:
    """A file the spliced archive writes itself (changed or added): `chunks()` gives its
    `size` bytes."""

    path: str
    size: int
    chunks: Callable[[], Iterable[bytes]]


class TreePlan(Protocol):
    """What becomes of the base's files; both sides answer alike from what each holds (the
    connected side from the two versions' digests, the air-gapped side from the file list
    and the carried contents)."""

    def member(self, path: str, size: int) -> NewFile | bool:
        """The base's file `path`: True kept as it is, False dropped, a NewFile in its place."""
        ...

    def added(self) -> Iterable[NewFile]:
        """The files the base does not hold, in the order they are appended."""
        ...

    def kept(self, path: str, sha256: str, size: int) -> None:
        """The digest of a file kept from the base, once its last byte has passed: the
        plan proves it is the content it expected (raising stops the splice)."""
        ...


def splice_tree(
    base: Iterable[bytes],
    plan: TreePlan,
    write: Callable[[bytes], object],
    *,
    mtime: int,
    level: int,
    label: str,
    limits: ArchiveLimits | None = None,
    listed: TreePaths | None = None,
    copied: Callable[[int, bytes], object] | None = None,
    prove_kept: bool = True,
    base_tree: str | None = None,
) -> None:
    """The spliced archive of the base's gzip'd tar stream `base` under `plan`, to `write`
    (the bytes copied from the base to `copied` with their offset in it, when given; with
    `prove_kept` false, kept files are not hashed, nor handed to `plan.kept`: a side that
    proved the base's bytes by their digest; given `base_tree`, every base file is hashed as it
    passes and the base's tree hash must be `base_tree`, else IntegrityError: a base whose
    object and manifest digest were both replaced by another version's is named so):
    the base's members in their order (directories and other members kept; files as `plan`
    says, a new one written with a ustar header of `mtime`), then the added files, each
    after its parent directories the archive does not hold yet, then two zero blocks and
    zero padding to a 10240-byte record (`transferset/delta/_formats.py`'s `archive_ending`)."""
    splicer = Splicer(write, level=level, copied=copied)
    with _TreeSplice(plan, splicer, mtime=mtime, limits=limits, listed=listed) as tree:
        tree.prove_kept, tree.base_tree = prove_kept, base_tree
        blocks = GzipBlocks(base, label=label)
        try:
            for block in blocks:
                tree.block(block)
            tree.finish(blocks.size)
        except IntegrityError as exc:
            if exc.message.startswith(label):
                raise
            raise IntegrityError(f"{label}: {exc.message}", hint=exc.hint) from None


class _TreeSplice:
    def __init__(
        self,
        plan: TreePlan,
        splicer: Splicer,
        *,
        mtime: int,
        limits: ArchiveLimits | None,
        listed: TreePaths | None,
    ) -> None:
        self._plan = plan
        self._listed = listed
        self._splicer = splicer
        self._units = TarUnits()
        self._mtime = mtime
        self._limits = limits or ArchiveLimits()
        self._queue: deque[Block] = deque()
        self._position = 0  # base offset the edits cover
        self._length = 0  # tar bytes of the new archive
        self._directories = SpillMap()
        self._kept: MemberData[tuple[str, int, Any, bool]] = MemberData()
        self._base_files = SpillMap()
        self.prove_kept = True
        self.base_tree: str | None = None

    def __enter__(self) -> _TreeSplice:
        return self

    def __exit__(self, *exc: object) -> None:
        self._directories.close()
        self._base_files.close()

    def block(self, block: Block) -> None:
        for unit in self._units.feed(block.data):
            self._unit(unit)
        self._hash_kept(block.data, block.start)
        self._queue.append(block)
        while self._queue and self._splicer.covered >= self._queue[0].end:
            self._splicer.block(self._queue.popleft())

    def finish(self, base_size: int) -> None:
        if self._units.end is None:
            raise IntegrityError("its tar stream has no end-of-archive blocks")
        self._hash_kept(b"", base_size)
        self._check_base_tree()
        self._edit(Edit("drop", self._position, base_size))
        while self._queue:
            self._splicer.block(self._queue.popleft())
        self._splicer.end_of_blocks()
        for new in self._plan.added():
            parts = new.path.split("/")
            for depth in range(1, len(parts)):
                directory = "/".join(parts[:depth])
                if self._directories.add(directory):
                    self._claim(directory)
                    self._insert(member_header(directory + "/", 0, self._mtime, directory=True))
            self._write_file(new)
        self._insert(archive_ending(self._length))
        self._splicer.close()

    def _unit(self, unit: Unit) -> None:
        if unit.start > self._position:
            self._edit(Edit("keep", self._position, unit.start))
        path = None if unit.path is None else member_path(unit.path, self._limits)
        if self._listed is not None and unit.path is not None:
            self._refuse_unlisted(unit.path, unit.kind, path)
        if unit.kind == "dir":
            if path is not None:
                self._directories.add(path)
            self._claim(path)
        decision = (
            True if unit.kind != "file" or path is None else self._plan.member(path, unit.size)
        )
        proved = decision is True and self.prove_kept
        if unit.kind == "file" and path is not None and (proved or self.base_tree is not None):
            self._kept.want(unit, (path, unit.size, hashlib.sha256(), proved))
        if decision is True:
            self._edit(Edit("keep", unit.start, unit.end))
        else:
            if isinstance(decision, NewFile):
                self._write_file(decision)
            self._edit(Edit("drop", unit.start, unit.end))

    def _hash_kept(self, data: bytes, start: int) -> None:
        """Hash what of `data` (the base's inflated bytes from `start`) is kept files' content
        (every file's, given `base_tree`); hand each finished kept one's digest to the plan."""
        for (path, size, hashing, kept), piece, last in self._kept.pieces(data, start):
            hashing.update(piece)
            if last:
                if self.base_tree is not None:
                    self._base_files[path] = hashing.hexdigest()
                if kept:
                    self._plan.kept(path, hashing.hexdigest(), size)

    def _check_base_tree(self) -> None:
        """The base read whole holds the tree it was taken for (`base_tree`)."""
        if self.base_tree is None:
            return
        held = tree_hash(self._base_files.sorted_items())
        if held != self.base_tree:
            raise IntegrityError(
                f"the base holds tree {held[:12]}, not the signed base tree "
                f"{self.base_tree[:12]} (its object and manifest replaced by another version's?)"
            )

    @staticmethod
    def _refuse_unlisted(name: str, kind: str, path: str | None) -> None:
        """A member kept whatever the plan says, that no bundle holds: a link, a device, a
        fifo; a file named as the root itself ('.', 'd/..'), which the plan is never asked
        about. (A pax global header has no path: it names no member.)"""
        if kind == "other":
            raise IntegrityError(
                f"{name}: a link, device or special member; a bundle holds only regular "
                "files and directories"
            )
        if kind == "file" and path is None:
            raise file_at_the_root(name)

    def _claim(self, directory: str | None) -> None:
        """Given `listed`, a directory the archive holds (None: one naming the root) is one
        an archive checked by `mirror.archive` could hold beside the listed files, and
        counts as a member."""
        if self._listed is not None:
            self._listed.directory(directory)

    def _write_file(self, new: NewFile) -> None:
        self._insert(member_header(new.path, new.size, self._mtime, directory=False))
        self._insert_chunks(new)
        self._insert(b"\0" * (-new.size % 512))

    def _insert_chunks(self, new: NewFile) -> None:
        def checked() -> Iterator[bytes]:
            written = 0
            for chunk in new.chunks():
                written += len(chunk)
                if written > new.size:
                    break
                yield chunk
            if written != new.size:
                raise IntegrityError(
                    f"{new.path}: the content holds {written} bytes, the file list says {new.size}"
                )

        self._length += new.size
        self._splicer.edit(Edit("insert", self._position, self._position, checked))

    def _insert(self, data: bytes) -> None:
        if data:
            self._length += len(data)
            self._splicer.edit(Edit("insert", self._position, self._position, data))

    def _edit(self, edit: Edit) -> None:
        if edit.kind == "keep":
            self._length += edit.end - edit.start
        self._splicer.edit(edit)
        self._position = edit.end
