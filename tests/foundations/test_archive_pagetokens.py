"""A page's links read from its tags (`pagetokens.quick_links`) are what lexbor's tree gives
(`completeness.tree_links`, the reader `page_links` used alone before issue 39), or the
reader says it cannot tell and `page_links` builds the tree: on every page of the
simulator's realistic site (where it must tell: that is the speed), on hostile pages
written by hand and on pages hypothesis puts together from hostile pieces."""

from __future__ import annotations

import functools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mirror.archive.completeness import css_references, page_links, tree_links
from mirror.archive.encoding import decode_page, sniff
from mirror.archive.pagetokens import quick_links
from mirror.sim import tree


def lexbor_links(data: bytes) -> tuple[str | None, list[str]]:
    """`page_links` as it was: every page through lexbor's tree (UTF-8 bytes as bytes)."""
    utf8 = sniff(data, "") == "utf-8" and not data.startswith(b"\xef\xbb\xbf")
    return tree_links(data if utf8 else decode_page(data, ""))


@functools.cache
def realistic_pages() -> list[bytes]:
    """Every page of a small realistic site (the bench's pages, fewer of them)."""
    plan = tree.site_plan(7, "docs.example.com", 3 * 1024 * 1024)
    return [
        tree.render_page(plan, page, domain="docs.example.com", base="", seed=f"s{n}", version="1")
        for n, page in enumerate(plan.pages)
    ]


def test_every_page_of_the_realistic_site_is_read_from_its_tags_as_the_tree_reads_it() -> None:
    pages = realistic_pages()
    assert len(pages) > 70
    for data in pages:
        quick = quick_links(data, css_references)
        assert quick is not None  # decided: the tree is never built for such a page
        assert quick == lexbor_links(data)
        assert quick[1]  # the page has links, so the comparison says something


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
def test_a_hostile_page_is_read_as_the_tree_reads_it_or_left_to_the_tree(page: str) -> None:
    quick = quick_links(page.encode(), css_references)
    assert quick is None or quick == tree_links(page)
    data = page.encode()
    assert page_links(data) == lexbor_links(data)


def test_the_hostile_pages_are_both_read_and_left_to_the_tree() -> None:
    """The corpus exercises both outcomes (each sort of page, not just the fallback)."""
    decided = [page for page in HOSTILE if quick_links(page.encode(), css_references) is not None]
    assert 25 < len(decided) < len(HOSTILE) - 15


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
def test_a_page_in_any_encoding_gives_what_the_tree_gave(data: bytes) -> None:
    assert page_links(data) == lexbor_links(data)


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


@settings(max_examples=400, deadline=None)
@given(st.lists(_PIECES, max_size=14).map("".join))
def test_a_page_made_of_hostile_pieces_is_read_as_the_tree_reads_it(page: str) -> None:
    quick = quick_links(page.encode(), css_references)
    assert quick is None or quick == tree_links(page)
