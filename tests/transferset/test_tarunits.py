"""A tar stream's members as byte ranges (mirror/transferset/delta/_tarunits.py), checked against
what Python's `tarfile` reads from the same bytes: offsets, names, kinds and sizes."""

from __future__ import annotations

import io
import tarfile

import pytest

from mirror.errors import IntegrityError
from mirror.transferset.delta._tarunits import MemberData, TarUnits, Unit
from tests.fixtures.archives import Entry, tar_bytes

LONG_DIR = "/".join(f"section-{n:02d}-with-a-long-name" for n in range(5))
PREFIXED = "p" * 120 + "/" + "n" * 90 + ".html"


def _common() -> list[Entry]:
    """Members every format can hold."""
    return [
        Entry("site/", kind="dir"),
        Entry("site/index.html", b"<html>home</html>\n"),
        Entry("site/empty.txt", b""),
        Entry("site/one-block.bin", bytes(range(256)) * 2),
        Entry("site/one-more.bin", bytes(513)),
        Entry("site/big.bin", bytes(range(251)) * 400),
        Entry("site/link", kind="symlink", target="index.html"),
        Entry("site/hard", kind="hardlink", target="site/index.html"),
        Entry("site/pipe", kind="fifo"),
        Entry(PREFIXED, b"a path the ustar prefix holds\n"),
        Entry("caf\u00e9/men\u00fc.html", b"utf-8 name\n"),
        Entry("last.txt", b"x"),
    ]


def _long() -> list[Entry]:
    """Members only GNU and pax can hold: names and link targets over the ustar fields."""
    return [
        Entry(LONG_DIR + "/", kind="dir"),
        Entry(LONG_DIR + "/" + "z" * 150 + ".html", b"long\n" * 300),
        Entry("site/far-link", kind="symlink", target="t" * 180),
        Entry("caf\u00e9/" + "\u00fc" * 80 + ".html", b"long non-ascii\n"),
    ]


def _v7() -> bytes:
    """Old (pre-POSIX) members: type "\\0", a directory being such a member whose name ends
    in a slash, as tarfile reads them."""
    out = b""
    for name, data in (("olddir/", b""), ("olddir/a.txt", b"v7 file\n"), ("b.txt", b"b")):
        info = tarfile.TarInfo(name)
        info.type, info.size = tarfile.AREGTYPE, len(data)
        out += info.tobuf(tarfile.USTAR_FORMAT) + data + b"\0" * (-len(data) % 512)
    return out + b"\0" * 1024


def _v7_renamed() -> bytes:
    """Old members renamed by pax records: tarfile decides "a directory" on the header's own
    name field, before any record renames it (a hostile base could hide members in the data
    of a file read as a directory, or make a file of a directory)."""
    out = b""
    for name, path, data in (("a.txt", "d/", b"A" * 700), ("e/", "f.txt", b""), ("g", "g", b"")):
        info = tarfile.TarInfo(name)
        info.type, info.size, info.pax_headers = tarfile.AREGTYPE, len(data), {"path": path}
        out += info.tobuf(tarfile.PAX_FORMAT) + _padded(data)
    return out + b"\0" * 1024


def _padded(block: bytes) -> bytes:
    return block + b"\0" * (-len(block) % 512)


def _hand_made(extensions: list[tuple[bytes, bytes]], data: bytes) -> bytes:
    """A tar stream of one file "a.txt" holding `data`, after extension headers of the given
    (type, records) as given, then a second member."""
    out = b""
    for kind, records in extensions:
        header = tarfile.TarInfo("././@LongLink" if kind in tarfile.GNU_TYPES else "././@Pax")
        header.type, header.size = kind, len(records)
        out += header.tobuf(tarfile.GNU_FORMAT) + _padded(records)
    member, after = tarfile.TarInfo("a.txt"), tarfile.TarInfo("after.txt")
    member.size = len(data)
    out += member.tobuf(tarfile.USTAR_FORMAT) + _padded(data) + after.tobuf(tarfile.USTAR_FORMAT)
    return out + b"\0" * 1024


PAX, LONG = tarfile.XHDTYPE, tarfile.GNUTYPE_LONGNAME
STACKED = {
    "two pax": [(PAX, b"14 path=outer\n"), (PAX, b"14 path=inner\n11 size=9\n")],
    "pax, long name": [(PAX, b"14 path=paxed\n"), (LONG, b"longname\0")],
    "long name, pax": [(LONG, b"longname\0"), (PAX, b"14 path=paxed\n11 size=0\n")],
    "two long names": [(LONG, b"first\0"), (LONG, b"second\0")],
    "two pax sizes": [(PAX, b"13 size=700\n"), (PAX, b"12 size=20\n")],
}


ARCHIVES = {
    **{f"stacked: {name}": _hand_made(headers, bytes(700)) for name, headers in STACKED.items()},
    "v7": _v7(),
    "v7 renamed": _v7_renamed(),
    "ustar": tar_bytes(_common(), tar_format=tarfile.USTAR_FORMAT),
    "gnu": tar_bytes(_common() + _long(), tar_format=tarfile.GNU_FORMAT),
    "pax": tar_bytes(
        _common() + _long() + [Entry("site/with-records", b"r\n", pax={"comment": "c" * 700})]
    ),
    "pax global": tar_bytes(
        _common() + _long(), pax_headers={"comment": "made by git archive", "mtime": "1"}
    ),
    "empty": tar_bytes([]),
}


def _units(raw: bytes, chunk: int | None = None) -> tuple[list[Unit], int | None]:
    units = TarUnits()
    step = chunk or len(raw) or 1
    found = [unit for at in range(0, len(raw), step) for unit in units.feed(raw[at : at + step])]
    return found, units.end


@pytest.mark.parametrize("raw", ARCHIVES.values(), ids=ARCHIVES.keys())
def test_units_are_the_members_tarfile_reads(raw: bytes) -> None:
    units, end = _units(raw)
    with tarfile.open(fileobj=io.BytesIO(raw)) as tar:
        members = tar.getmembers()
        assert end == tar.offset
    named = [u for u in units if u.path is not None]
    assert [(u.start, (u.path or "").rstrip("/")) for u in named] == [
        (m.offset, m.name) for m in members
    ]
    kinds = ["file" if m.isreg() else "dir" if m.isdir() else "other" for m in members]
    assert [u.kind for u in named] == kinds
    assert [u.size for u in named if u.kind == "file"] == [m.size for m in members if m.isreg()]
    padded = [m.offset_data + -(-m.size // 512) * 512 * m.isreg() for m in members]
    assert [u.end for u in named] == padded
    assert [u.start for u in units] == [0, *(u.end for u in units)][: len(units)]
    assert (units[-1].end if units else 0) == end


def test_the_archives_hold_what_the_cases_name() -> None:
    """The fixtures above really carry the headers under test."""
    gnu, pax, ustar = ARCHIVES["gnu"], ARCHIVES["pax"], ARCHIVES["ustar"]
    assert gnu.count(b"././@LongLink") == 5 and b"\0 L" in gnu and b"\0 K" in gnu
    assert b" path=" in pax and b"comment=" in pax
    assert b"comment=made by git archive" in ARCHIVES["pax global"]
    with tarfile.open(fileobj=io.BytesIO(ARCHIVES["v7"])) as tar:
        assert [m.type for m in tar] == [tarfile.DIRTYPE, tarfile.AREGTYPE, tarfile.AREGTYPE]
    at = _header(ustar, b"n" * 90)
    assert ustar[at + 345 : at + 345 + 121] == b"p" * 120 + b"\0"  # the ustar prefix field
    with tarfile.open(fileobj=io.BytesIO(ARCHIVES["pax global"])) as tar:
        assert tar.pax_headers["comment"] == "made by git archive"
        assert tar.getmember("site/big.bin").size == 100_400


def test_a_pax_global_header_is_a_unit_without_a_path() -> None:
    units, _ = _units(ARCHIVES["pax global"])
    assert (units[0].start, units[0].path, units[0].kind) == (0, None, "other")
    assert units[0].end == 1024


@pytest.mark.parametrize("key", ["path", "size"])
def test_a_pax_global_header_that_renames_or_resizes_members_is_refused(key: str) -> None:
    """tarfile applies a global header's path and size to the members after it, so their
    names and extents would not be the headers' own: such a stream is not split up."""
    stream = tar_bytes({"a.html": b"x"}, pax_headers={key: "7" if key == "size" else "b.html"})
    with pytest.raises(IntegrityError, match=f"pax global header at 0 sets {key}"):
        _units(stream)


@pytest.mark.parametrize(
    ("kind", "records"),
    [(tarfile.GNUTYPE_SPARSE, {}), (tarfile.REGTYPE, {"GNU.sparse.name": "b.html"})],
    ids=["sparse member", "sparse records"],
)
def test_a_sparse_member_is_refused(kind: bytes, records: dict[str, str]) -> None:
    """tarfile reads a sparse member under another name, size or content than its extent
    holds (what a splice hashes and keeps): no bundle's member is one."""
    info = tarfile.TarInfo("a.html")
    info.type, info.size, info.pax_headers = kind, 512, records
    stream = info.tobuf(tarfile.PAX_FORMAT) + bytes(512) + bytes(1024)
    with pytest.raises(IntegrityError, match="sparse"):
        _units(stream)


@pytest.mark.parametrize("chunk", [1, 511, 512, 513, 10240])
@pytest.mark.parametrize("name", ["gnu", "pax global"])
def test_any_chunking_gives_the_same_units(name: str, chunk: int) -> None:
    assert _units(ARCHIVES[name], chunk) == _units(ARCHIVES[name])


def test_nothing_after_the_end_of_archive_is_read() -> None:
    raw = ARCHIVES["ustar"]
    units, end = _units(raw + b"garbage that is no header" * 40)
    assert (units, end) == _units(raw)


def test_a_stream_cut_before_its_end_blocks_has_no_end() -> None:
    raw = ARCHIVES["pax"]
    _, end = _units(raw)
    assert end is not None
    units, cut_end = _units(raw[:end])
    assert cut_end is None and units == _units(raw)[0]


def _header(raw: bytes, name: bytes) -> int:
    """The offset of the ustar header of the member whose name field starts with `name`."""
    at = 0
    while raw[at : at + len(name)] != name:
        at += 512
    return at


def _patched(raw: bytes, at: int, field: slice, value: bytes, *, signed: bool = False) -> bytes:
    """`raw` with one field of the header at `at` replaced, its checksum made right."""
    header = bytearray(raw[at : at + 512])
    header[field] = value
    header[148:156] = b" " * 8
    total = sum(b - 256 if signed and b > 127 else b for b in header)
    header[148:156] = b"%06o\0 " % total
    return raw[:at] + bytes(header) + raw[at + 512 :]


def test_a_base_256_size_field_is_read_as_tarfile_reads_it() -> None:
    raw = ARCHIVES["ustar"]
    at = _header(raw, b"site/big.bin")
    patched = _patched(raw, at, slice(124, 136), b"\x80" + (100_400).to_bytes(11, "big"))
    assert patched != raw
    assert _units(patched) == _units(raw)
    with tarfile.open(fileobj=io.BytesIO(patched)) as tar:
        assert tar.getmember("site/big.bin").size == 100_400


def test_a_signed_checksum_of_an_old_tar_is_accepted() -> None:
    raw = ARCHIVES["ustar"]
    at = _header(raw, "caf\u00e9".encode())
    signed = _patched(raw, at, slice(0, 1), b"c", signed=True)
    assert signed[at + 148 : at + 156] != raw[at + 148 : at + 156]
    assert _units(signed) == _units(raw)


REFUSED = {
    "size not a number": (slice(124, 136), b"12z45\0\0\0\0\0\0\0", "has no number where"),
    "negative size": (slice(124, 136), b"\xff" * 10 + b"\xfe\x00", "gives a negative size"),
    "negative octal size": (slice(124, 136), b"-0001000\0\0\0\0", "gives a negative size"),
}


@pytest.mark.parametrize(("field", "value", "message"), REFUSED.values(), ids=REFUSED.keys())
def test_a_header_that_is_not_a_tar_header_is_refused(
    field: slice, value: bytes, message: str
) -> None:
    raw = ARCHIVES["ustar"]
    at = _header(raw, b"site/big.bin")
    with pytest.raises(IntegrityError, match="^tar stream: .*" + message):
        _units(_patched(raw, at, field, value))


@pytest.mark.parametrize("field", [0, 100, 124, 148, 156, 257, 345, 511])
def test_a_header_with_a_wrong_checksum_is_refused(field: int) -> None:
    raw = ARCHIVES["ustar"]
    at = _header(raw, b"site/big.bin")
    damaged = raw[: at + field] + bytes([raw[at + field] ^ 1]) + raw[at + field + 1 :]
    with pytest.raises(IntegrityError, match=f"^tar stream: the header at {at} has a wrong"):
        _units(damaged)


def _with_pax_records(records: bytes, data: bytes) -> bytes:
    """A tar stream of one file `data` after a pax header holding `records` as given."""
    return _hand_made([(tarfile.XHDTYPE, records)], data)


def test_a_pax_size_is_read_over_the_headers() -> None:
    raw = _with_pax_records(b"12 size=700\n", bytes(700))
    (unit, after), end = _units(raw)
    assert (unit.start, unit.end, unit.size, after.start, end) == (0, 2560, 700, 2560, 3072)
    with tarfile.open(fileobj=io.BytesIO(raw)) as tar:
        assert tar.getmember("a.txt").size == 700


@pytest.mark.parametrize("record", [b"13 size=-512\n", b"11 size=1x\n", b"9 size=\n"])
def test_a_pax_size_that_is_no_size_is_refused(record: bytes) -> None:
    raw = _with_pax_records(record, b"abc")
    refused = r"^tar stream: (bad pax records at|the header at) 1024"
    with pytest.raises(IntegrityError, match=refused):
        _units(raw)


def test_extension_records_over_a_mebibyte_are_refused() -> None:
    raw = tar_bytes([Entry("a.txt", b"abc", pax={"comment": "c" * 2_000_000})])
    with pytest.raises(IntegrityError, match=r"^tar stream: extension records of 2000"):
        _units(raw)


@pytest.mark.parametrize("chunk", [1, 511, 513, 10240, 1 << 20])
def test_member_data_gives_each_wanted_members_bytes_in_order_whatever_the_chunking(
    chunk: int,
) -> None:
    """Every second file is wanted (empty and long-named ones among them): the pieces of
    each, joined, are its content as tarfile reads it; the last piece is flagged once."""
    files = {"a.html": b"a" * 700, "empty.html": b"", "b/" + "n" * 120: b"long" * 300}
    files |= {f"p{i}.txt": bytes([i]) * (i * 97) for i in range(12)}
    stream = tar_bytes(files)
    units, data_of = TarUnits(), MemberData[str]()
    got: dict[str, bytearray] = {}
    ended: list[str] = []
    seen = 0
    for at in range(0, len(stream), chunk):
        piece = stream[at : at + chunk]
        for unit in units.feed(piece):
            if unit.kind == "file" and unit.path is not None:
                seen += 1
                if seen % 2:
                    data_of.want(unit, unit.path)
                    got[unit.path] = bytearray()
        for path, part, last in data_of.pieces(piece, at):
            got[path] += part
            if last:
                ended.append(path)
    assert data_of.pending == 0 and sorted(ended) == sorted(got)
    assert {path: bytes(data) for path, data in got.items()} == {p: files[p] for p in got}
    assert len(got) >= 7
