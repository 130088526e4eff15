"""The completeness scanner reads a page as a browser does (issue 38, class 5): the encoding
sniffed in the HTML standard's order (byte order mark, then a `<meta>` declaration in the
first 1024 bytes, then the default), and relative references resolved against the
document's base URL (the first `<base href>`). Fed by the real archive inspection."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mirror.archive import inspect_archive
from mirror.archive.completeness import CompletenessReport, SiteScanner
from mirror.archive.encoding import (
    ENCODINGS,
    _Prescan,
    decode,
    decode_page,
    encoding_of,
    prescan,
    sniff,
)
from tests.fixtures.archives import write_tar
from tests.fixtures.campaign import examples

CAFE = "café.html"


def scan(tmp_path: Path, files: dict[str, bytes]) -> CompletenessReport:
    report = inspect_archive(write_tar(tmp_path / "site.tar.gz", files), observe=SiteScanner)
    assert isinstance(report.observed, SiteScanner)
    return report.observed.report()


def broken(tmp_path: Path, files: dict[str, bytes]) -> list[str]:
    return [b.target for b in scan(tmp_path, files).broken]


def page(head: str, body: str, encoding: str, bom: bytes = b"") -> bytes:
    return bom + f"<!doctype html><html><head>{head}</head><body>{body}</body></html>".encode(
        encoding
    )


LINK = f'<a href="{CAFE}">café</a><a href="caf%C3%A9.html">the same, escaped</a>'
# The encodings people publish in: each page links to café.html (and to itself, escaped).
PUBLISHED = {
    "utf-8, declared": page('<meta charset="utf-8">', LINK, "utf-8"),
    "utf-8, undeclared": page("", LINK, "utf-8"),
    "utf-8 with a BOM": page("", LINK, "utf-8", b"\xef\xbb\xbf"),
    "utf-16le with a BOM": page("", LINK, "utf-16-le", b"\xff\xfe"),
    "utf-16be with a BOM": page("", LINK, "utf-16-be", b"\xfe\xff"),
    "iso-8859-1, meta charset": page('<meta charset="ISO-8859-1">', LINK, "latin-1"),
    "windows-1252, http-equiv": page(
        '<meta http-equiv="Content-Type" content="text/html; charset=windows-1252">',
        LINK,
        "cp1252",
    ),
    "latin1 label, unquoted, in a later attribute": page(
        "<meta name=x content='text/html; charset=latin1' http-equiv=content-type>",
        LINK,
        "latin-1",
    ),
    "iso-8859-1, undeclared (not UTF-8: windows-1252)": page("", LINK, "latin-1"),
    "a declaration in a comment is not one": page(
        '<!-- <meta charset="shift_jis"> --><meta charset="iso-8859-1">', LINK, "latin-1"
    ),
    "an unknown label is passed over": page(
        '<meta charset="klingon"><meta charset="iso-8859-1">', LINK, "latin-1"
    ),
    "the BOM wins over the declaration": page(
        '<meta charset="iso-8859-1">', LINK, "utf-8", b"\xef\xbb\xbf"
    ),
}


@pytest.mark.parametrize("name", list(PUBLISHED))
def test_a_page_in_the_encodings_people_publish_in_links_to_cafe(tmp_path: Path, name: str) -> None:
    assert broken(tmp_path, {"index.html": PUBLISHED[name], CAFE: b"<p>ok</p>"}) == []


def test_shift_jis_and_euro_signs_are_decoded_as_browsers_decode_them(tmp_path: Path) -> None:
    files = {
        "index.html": page(
            '<meta charset="Shift_JIS">',
            '<a href="日本語.html">j</a><a href="①.html">n</a>',
            "cp932",
        ),
        "eur.html": page('<meta charset="iso-8859-1">', '<a href="€uro.html">e</a>', "cp1252"),
        "日本語.html": b"",
        "①.html": b"",  # in Windows-31J (the standard's Shift_JIS), not in JIS X 0208
        "€uro.html": b"",  # 0x80: ISO-8859-1 is read as windows-1252
    }
    assert broken(tmp_path, files) == []


def test_a_wrong_declaration_breaks_the_link_as_it_does_in_a_browser(tmp_path: Path) -> None:
    files = {
        "index.html": page('<meta charset="utf-8">', f'<a href="{CAFE}">x</a>', "latin-1"),
        "b.html": page('<meta charset="iso-8859-1">', f'<a href="{CAFE}">x</a>', "utf-8"),
        CAFE: b"",
    }
    # what a browser requests: U+FFFD for the byte that is not UTF-8; Ã© for the two that are
    assert set(broken(tmp_path, files)) == {"caf\ufffd.html", "cafÃ©.html"}


@pytest.mark.parametrize(
    ("data", "content_type", "expected"),
    [
        (b"\xef\xbb\xbf<meta charset=latin1>", "text/html; charset=shift_jis", "utf-8"),
        (b"<meta charset=latin1>", "text/html; charset=Shift_JIS", "shift_jis"),
        (b"<meta charset=latin1>", "text/html; charset=bogus", "windows-1252"),
        (b"<meta charset=utf-16le>", "", "utf-8"),  # the standard: UTF-16 declared is UTF-8
        (b"<meta charset=x-user-defined>", "", "windows-1252"),
        (b"<meta charset=gb2312>", "", "gbk"),
        (b'<div title="<meta charset=koi8-r>"><meta charset=latin2>', "", "iso-8859-2"),
        (b"<meta charset=euc-jp" + b" " * 1024 + b">", "", "utf-8"),  # the prescan's end
        (b" " * 1024 + b"<meta charset=euc-jp>", "", "utf-8"),
        (b"<meta content='charset=\"koi8-u\"' http-equiv='Content-Type'>", "", "koi8-u"),
        (b"<meta content='text/html; charset=koi8-u'>", "", "utf-8"),  # no http-equiv
        (b"<meta charset=big5 charset=euc-kr>", "", "big5"),  # a repeated attribute
        (b"\xe9t\xe9", "", "windows-1252"),
    ],
)
def test_the_sniffing_order(data: bytes, content_type: str, expected: str) -> None:
    assert sniff(data, content_type) == expected


def test_replacement_and_user_defined_encodings_decode_as_the_encoding_standard_says() -> None:
    assert decode_page(b"<meta charset=iso-2022-kr><a href=x>") == "\ufffd"
    assert decode_page(b"<meta charset=x-user-defined>\x80") == "<meta charset=x-user-defined>€"
    assert decode_page(b"<meta charset=windows-1252>\x81\x80") == "<meta charset=windows-1252>\x81€"


def test_the_first_base_href_is_the_base_of_every_relative_reference(tmp_path: Path) -> None:
    files = {
        "index.html": b'<a href="guide/deep/page.html">g</a>',
        # an absolute path: the site root, not the page's folder
        "guide/deep/page.html": b'<head><base href="/"></head><a href="intro.html">i</a>'
        b'<a href="guide/">g</a><a href="gone.html">x</a>',
        # relative to the page; the first base element without an href does not count
        "guide/rel.html": b'<base target="_top"><base href="../img/"><base href="/other/">'
        b'<img src="logo.png"><img src="/img/logo.png">',
        # with a host: relative references leave the site (a browser goes there): not checked
        "guide/away.html": b'<base href="https://elsewhere.example/docs/"><a href="no.html">n</a>'
        b'<a href="//elsewhere.example/x.html">x</a>',
        # an empty or fragment-only href leaves the page's own URL as the base
        "guide/same.html": b'<base href=""><a href="rel.html">r</a><base href="#x">',
        "intro.html": b"",
        "guide/index.html": b"",
        "img/logo.png": b"png",
    }
    assert broken(tmp_path, files) == ["gone.html"]


def test_a_base_below_a_base_path_is_resolved_there(tmp_path: Path) -> None:
    files = {
        "index.html": b'<base href="/docs/"><a href="guide/">g</a><a href="/docs/x.html">x</a>',
        "guide/index.html": b'<base href="/docs/"><a href="x.html">x</a>'
        b'<a href="guide/lost.html">l</a>',
        "x.html": b"",
    }
    report = scan(tmp_path, files)
    assert report.base_path == "/docs"
    assert [b.target for b in report.broken] == ["guide/lost.html"]


_PIECES = st.sampled_from(
    [
        b"<meta",
        b" charset=",
        b"http-equiv=content-type",
        b" content='charset=",
        b"latin1",
        b"utf-16",
        b"shift_jis",
        b'"',
        b"'",
        b">",
        b"<!--",
        b"-->",
        b"</",
        b"<?",
        b"<!",
        b"<a",
        b"/",
        b"=",
        b" ",
        b"\xef\xbb\xbf",
        b"\xff\xfe",
        b"\xe9",
        b"x",
    ]
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(_PIECES, st.binary(max_size=8)), max_size=60))
def test_any_bytes_sniff_to_a_known_encoding_and_decode(pieces: list[bytes]) -> None:
    data = b"".join(pieces)
    name = sniff(data)
    assert encoding_of(name) == name
    assert isinstance(decode_page(data), str)


@pytest.mark.parametrize("name", ENCODINGS)
def test_every_encoding_of_the_standard_decodes_any_bytes(name: str) -> None:
    assert isinstance(decode(bytes(range(256)) + b"\x81\xff\x00", name), str)
    if name not in ("replacement", "utf-16be", "utf-16le"):  # the rest are ASCII-compatible
        assert decode(b"<a href=x.html>", name) == "<a href=x.html>"


def _one_of(*options: bytes) -> st.SearchStrategy[bytes]:
    return st.sampled_from(options)


_SPACES = _one_of(b"", b" ", b"\n\t", b"\x0b", b"x")
_ATTRIBUTES = st.lists(
    _one_of(b' lang="en"', b" a='>'", b' b="<"', b" c", b" d=x/", b" e =f", b"/", b" g=`"),
    max_size=3,
).map(b"".join)
_COMMON_HEADS = st.tuples(
    _SPACES,
    _one_of(b"", b"<!doctype html>", b"<!DOCTYPE html SYSTEM 'a>b'>", b"<!-- c -->"),
    _SPACES,
    st.one_of(st.just(b""), _ATTRIBUTES.map(lambda a: b"<html" + a + b">")),
    _SPACES,
    st.one_of(st.just(b""), _ATTRIBUTES.map(lambda a: b"<HEAD" + a + b">")),
    _SPACES,
    _one_of(b"<meta ", b"<meta\n", b"<meta/", b"<meta\x0b", b"<meta name=x "),
    _one_of(b"charset=", b"CharSet =", b"charset= "),
    _one_of(
        b'"utf-8"',
        b"'latin1'",
        b"utf-8",
        b"utf-8/",
        b"klingon",
        b'"utf-16"',
        b"x-user-defined",
        b'""',
        b'"sj<is"',
        b"sjis'",
    ),
    _one_of(
        b">",
        b" >",
        b"/>",
        b" />",
        b" x>",
        b"",
        b" content='charset=koi8-r' http-equiv=content-type>",
    ),
    st.lists(
        _one_of(b"<meta charset=euc-kr>", b"<!--", b"-->", b'"', b"<a b='", b" "), max_size=4
    ).map(b"".join),
).map(b"".join)


@settings(max_examples=examples(400, 5000), deadline=None)
@given(_COMMON_HEADS)
def test_the_quick_reading_of_a_common_head_finds_what_the_walk_finds(head: bytes) -> None:
    assert prescan(head) == _Prescan(head).run()
