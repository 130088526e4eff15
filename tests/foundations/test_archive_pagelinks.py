"""`completeness.page_links` reads a page's links in one walk over lexbor's tree (issue 39:
no second query for the `<base>`, each element's attributes read once), and answers what
the two queries of the walk before it answered (`links_before`, kept here verbatim): on
every page of the simulator's realistic site, on hostile pages written by hand and on
pages hypothesis puts together from hostile pieces, in any encoding."""

from __future__ import annotations

import functools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mirror.archive.completeness import (
    _SELECTOR,
    _add_node_references,
    css_references,
    page_links,
)
from mirror.archive.encoding import decode_page, sniff
from mirror.sim import tree


def links_before(data: bytes) -> tuple[str | None, list[str]]:
    """`page_links` before issue 39: the tree queried for its first `<base href>`, then for
    `_SELECTOR`."""
    from selectolax.lexbor import LexborHTMLParser

    utf8 = sniff(data, "") == "utf-8" and not data.startswith(b"\xef\xbb\xbf")
    parsed = LexborHTMLParser(data if utf8 else decode_page(data, ""))
    base = parsed.css_first("base[href]")
    refs: list[str] = []
    for node in parsed.css(_SELECTOR):
        if node.tag == "style":
            refs += css_references((node.text(deep=True) or "").encode())
        elif node.tag != "base":
            _add_node_references(refs, node.tag, node.attributes)
    return (base.attributes.get("href") or "") if base is not None else None, refs


@functools.cache
def realistic_pages() -> list[bytes]:
    """Every page of a small realistic site (the bench's pages, fewer of them)."""
    plan = tree.site_plan(7, "docs.example.com", 3 * 1024 * 1024)
    return [
        tree.render_page(plan, page, domain="docs.example.com", base="", seed=f"s{n}", version="1")
        for n, page in enumerate(plan.pages)
    ]


def test_every_page_of_the_realistic_site_reads_as_before() -> None:
    pages = realistic_pages()
    assert len(pages) > 70
    for data in pages:
        links = page_links(data)
        assert links == links_before(data)
        assert len(links[1]) > 10  # navigation and body links: the comparison says something


HOSTILE = [
    '<a href="x">a</a><img src=y srcset="a 1x, b 2x">',  # lexbor: once per selector matched
    "<!-- <a href=c> --><a href=d>d</a><!--><a href=e><!---><a href=f>",
    "<!-- x --!><a href=g> <!-- -- --><a href=h>",
    '<script>var s="<a href=e>"</script><a href=f>f</a>',
    "<script><!--<script></script><a href=no></script><a href=yes>",
    '<a href="?a=1&amp;b=2&copy=3&lt;&notit;">x</a><a href="&#x41;&#66;&#128;&#0;">',
    '<a href="?a=1&amp;b=2&lt;x&#38;&#x2F;&#169;&unknown;&123">x</a>',
    "<a href=x href=y HREF=z>z</a><A HREF=UP SRC=s>z</A>",
    "<base href=1><base href=2><a href=q>q</a><p><base href=3>",
    '<base><base href="/b/"><a href=q>q</a>',
    "<base href>",
    '<p style="background:url(s.png)">x</p><style>a{background:url(t.png)}</style>',
    '<style href=h>@import "i.css"; a{background:url( "u.png" )}</style>',
    '<object data=o.swf></object><object data=o2 style="x"><embed src=e.swf>',
    "<![CDATA[<a href=cd>]]><a href=after>",
    "<svg><style>a{background:url(s)}</style><a href=s></a></svg><a href=t>",
    "<math><mi><a href=m></a></mi></math>",
    "<a href=x><div>y</div></a>",
    "<p><a href=x>y</p>z",
    "<b style='background:url(b.png)'>1<p>2</b>3",
    "<table><a href=t>x</a><tr><td><img src=c></td></tr></table>",
    '<a href="x\0y">',
    "<title><a href=t></title><textarea><a href=u></textarea><a href=v>",
    '<div title="<a href=w>"><a href=z>',
    "<a/href=slash>x</a><img/src=/s.png/>",
    '<a href = " spaced " >x</a><img src = unq.png alt=x>',
    "<template><a href=tt></a></template><a href=after>",
    "<noscript><a href=ns></noscript><a href=after>",
    "<select><option><a href=in-select></select><style>a{background:url(x)}</style>",
    "<frameset><frame src=f.html></frameset>",
    '<body style="background:url(b)"><body style="background:url(c)">',
    "<p>x</p><html style='background:url(h)'>",
    "<form style='background:url(f)'><form style='background:url(g)'>",
    '<img src="a.png" <a href=zz>',
    "<a href=unterminated",
    '<a href="unterminated>quote',
    "<style>a{background:url(x)}",
    "<xmp><a href=no></xmp><iframe src=if><a href=no2></iframe><noembed><a href=no3></noembed>",
    "<noframes><a href=no></noframes></noframesx><a href=yes>",
    "<plaintext><a href=no>",
    "<a href=x>1<b>2</b><img src=i>3</a><a href=y>1<span>2<br>3</span></a>",
    '<img src="a\r\nb" srcset="c.png\r\n1x">\r<a href="d\re">',
    "<image src=im.png><video poster=p.png src=v.mp4><source srcset=' a.webp 1x ,, b.webp'>",
    "<STYLE>a{background:url(UP)}</STYLE><ScRiPt src=sc.js></sCrIpT>",
    "<a href=1><a href=2>two</a>",
    "<p>1<a href=3>x</a><a href=4 style='background:url(5)'><code>y</code></a>",
    "</a href=end-tag-attribute><a href=k>",
    "<?php echo '<a href=php>' ?><a href=after-php>",
    "</ <a href=bogus>><a href=after-bogus>",
    "<a\thref=\x0ctab>x</a><a\nhref\n=\nnl>y</a>",
    "<a =href=eq href=real>x</a><a href='q'x=y>z</a>",
    "<div><nobr style='background:url(n)'>a<nobr>b</nobr></nobr></div>",
    "<isindex action=x><a href=after>",
    "<font style='background:url(f)'>x</font><u style='background:url(u)'>y",
    "<a href='&amp'>x</a><a href='&ampx'>y</a><a href='&amp;x'>z</a>",
    "<a href=\u017fr>x</a><\u017ftyle>not</\u017ftyle><a src=ſ href=k>",
]


@pytest.mark.parametrize("page", HOSTILE)
def test_a_hostile_page_reads_as_before(page: str) -> None:
    data = page.encode()
    assert page_links(data) == links_before(data)


def test_a_base_is_the_first_with_an_href() -> None:
    page = b"<base style='x'><p><base href='/one/'><base href='/two/'><a href=a>"
    assert page_links(page) == ("/one/", ["a"]) == links_before(page)
    assert page_links(b"<base href><a href=a>") == ("", ["a"])
    assert page_links(b"<base target=_top><a href=a>") == (None, ["a"])


@pytest.mark.parametrize(
    "data",
    [
        b"<a href='caf\xe9.html'>x</a>",  # not UTF-8: windows-1252
        b"<a href='caf\xc3\xa9.html'>x</a><a href='bad\xff\xfe'>",  # UTF-8 with bad bytes
        b"\xef\xbb\xbf<a href='bom.html'>x</a>",
        b"\xff\xfe<\x00a\x00 \x00h\x00r\x00e\x00f\x00=\x00u\x00>\x00",  # UTF-16LE
        b'<meta charset="shift_jis"><a href="\x83e\x83X\x83g.html">x</a>',
    ],
)
def test_a_page_in_any_encoding_reads_as_before(data: bytes) -> None:
    assert page_links(data) == links_before(data)


_NAMES = st.sampled_from(
    [
        "a",
        "A",
        "b",
        "code",
        "img",
        "p",
        "div",
        "span",
        "style",
        "STYLE",
        "script",
        "title",
        "textarea",
        "xmp",
        "base",
        "object",
        "video",
        "table",
        "td",
        "svg",
        "template",
        "noscript",
        "select",
        "body",
        "form",
        "plaintext",
        "br",
        "nobr",
        "iframe",
    ]
)
_ATTRIBUTE_NAMES = st.sampled_from(
    [
        "href",
        "HREF",
        "src",
        "srcset",
        "poster",
        "style",
        "data",
        "class",
        "title",
        "alt",
        "=x",
        'x"y',
        "/",
        "'",
        "<",
    ]
)
_VALUES = st.sampled_from(
    [
        "x.html",
        "/abs/y.png",
        " sp ace ",
        "a.png 1x, b.png 2x",
        "background:url(bg.png)",
        "&amp;",
        "&lt;&gt;",
        "&copy",
        "&copy=1",
        "&#65;",
        "&#x2F;",
        "&#128;",
        "&#0;",
        "&notin;",
        "&foo;",
        "<a href=in-value>",
        ">",
        "",
        "\u00e9",
        "\r\n",
    ]
)


@st.composite
def _start_tag(draw: st.DrawFn) -> str:
    parts = [f"<{draw(_NAMES)}"]
    for _ in range(draw(st.integers(0, 3))):
        name, value = draw(_ATTRIBUTE_NAMES), draw(_VALUES)
        quote = draw(st.sampled_from(['"', "'", "", None]))
        parts.append(f" {name}" if quote is None else f" {name}={quote}{value}{quote}")
    return "".join(parts) + draw(st.sampled_from([">", "/>", " >", ""]))


_PIECES = st.one_of(
    _start_tag(),
    _NAMES.map(lambda name: f"</{name}>"),
    st.sampled_from(
        [
            "text ",
            "<!-- <a href=c> -->",
            "<!-->",
            "<!--",
            "-->",
            "<![CDATA[<a href=cd>]]>",
            "<?x <a href=pi>?>",
            "</>",
            "< a",
            "&amp;",
            "\0",
            "\r",
            "<!DOCTYPE html>",
            "a{background:url(css.png)}",
            "<script><!--",
        ]
    ),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_PIECES, max_size=14).map("".join))
def test_a_page_made_of_hostile_pieces_reads_as_before(page: str) -> None:
    data = page.encode()
    assert page_links(data) == links_before(data)
