"""A page's links read from its tags alone, where that gives what a browser's tree gives.

`completeness.page_links` answers, for a page, its first `<base href>` and every URL its
elements name (href, src, srcset, poster, object data, inline styles, `<style>` blocks) in
the document order of the tree a browser builds. Building that tree (lexbor) was half the
CPU of inspecting a page-heavy site (bench/RESULTS.md, issue 39), yet on a page whose
markup is well formed the tree's elements are its start tags, in the order written: the
links need only the HTML standard's tokenizer, and only where a URL attribute is named.
`quick_links` finds those places with byte searches (in C) and reads the tags around them
in Python.

Promise: `quick_links(page)` is either what the tree gives (the tests read every page of
the simulator's realistic site and a hostile corpus both ways) or None, "undecided", and
the caller builds the tree. Undecided is every page where the tags alone could mislead:

- a quoted attribute value holding `>` (elsewhere every tag ends at its first `>`, which
  is what lets searching stand in for reading every character);
- an element the tree moves, clones, merges or drops: tables (foster parenting),
  `<select>`, `<frameset>`/`<frame>`, `<template>` (its content is no part of the tree),
  `<svg>`/`<math>` (foreign content, where `<style>` is no raw text), `<noscript>`,
  `<isindex>`; `<html>`, `<head>`, `<body>` or `<form>` carrying a URL attribute (merged
  into the first, or ignored); a formatting element (`<a>`, `<b>`, `<code>`, ...) carrying
  one that is not closed, before anything but text, comments, `img`/`br`/`wbr` and
  inline elements holding text, by its own end tag (else the tree may clone it);
- a `<script>` holding `<!--` (its end then depends on the escape states);
- a NUL anywhere, and a character reference in a URL attribute that is not plainly
  decided (a legacy name without `;`, a numeric one outside the printable ranges).

The page comes as UTF-8 bytes (valid: the caller decoded it). Carriage returns are
normalised first (CR LF and CR to LF), as the standard's input stream does; names are
lower-cased in ASCII only, as the tokenizer does.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from html.entities import html5

Links = tuple[str | None, list[str]]
Css = Callable[[bytes], Iterable[str]]

_WS = rb"[\t\n\f ]"
_NAME = rb"[^\t\n\f />][^\t\n\f />=]*"
_VALUE = rb"""(?:"[^"]*"|'[^']*'|[^\t\n\f >]*)"""
_ATTRS = rb"(?:[\t\n\f /]+|" + _NAME + rb"(?:" + _WS + rb"*=" + _WS + rb"*" + _VALUE + rb")?)*+"
_END = rb"(?=[\t\n\f />])"
_RAW = b"script style xmp iframe noembed noframes title textarea plaintext".split()
_UNDECIDED = (
    b"template svg math select frameset frame noscript isindex "
    b"table caption colgroup col tbody thead tfoot tr td th"
).split()
_FORMATTING = b"a b big code em font i nobr s small strike strong tt u".split()
_INLINE = (
    b"span code em strong b i small abbr kbd var samp sub sup mark cite q dfn time s u tt "
    b"big strike font bdi bdo data label"
).split()
_MERGED = (b"html", b"head", b"body", b"form")
_URL_NAMES = (b"href", b"src", b"srcset", b"poster", b"style")
_SEARCHED = (b"href", b"src", b"poster", b"style")  # `src` finds `srcset` too
_BEFORE = frozenset(b"\t\n\f /\"'")  # what an attribute's name follows
_AFTER = frozenset(b"\t\n\f /=>")  # and what it is followed by
_LETTERS = frozenset(b"abcdefghijklmnopqrstuvwxyz")

# All searched in the lower-cased page (bytes: ASCII lower case, the same length).
_COMMENT = re.compile(rb"<!--(?:-?>|.*?--!?>|.*\Z)", re.DOTALL)
_QUOTED_GT = re.compile(rb"""=[\t\n\f ]*(?:"[^"]*>|'[^']*>)""")
_SPECIAL = re.compile(rb"<(?:[!?]|/[^a-z]|(" + b"|".join(_RAW + _UNDECIDED) + rb")" + _END + rb")")
_OPEN = re.compile(rb"<[a-z/!?]")
_RAW_END = {name: re.compile(rb"</" + name + rb"[\t\n\f />]") for name in _RAW}
_TAG = re.compile(rb"<([a-zA-Z][^\t\n\f />]*)(.*)", re.DOTALL)
_ATTR_PARTS = re.compile(
    rb"[\t\n\f /]*(" + _NAME + rb")(?:" + _WS + rb"*=" + _WS + rb"*"
    rb"""(?:"([^"]*)"|'([^']*)'|([^\t\n\f >]*)))?"""
)
_MEMO_MAX = 8192  # tags read (navigation repeats on every page): a cache, emptied when full


def _region(name: bytes) -> re.Pattern[bytes]:
    """What may stand between a formatting element carrying a URL and its end tag for the
    tree to hold it once, where it was written: text, comments, void images and breaks,
    and inline elements (not `name`) holding only text, images and breaks; or the end of
    the page (nothing after it to clone it into)."""
    void = rb"<(?:img|br|wbr)" + _END + _ATTRS + rb">"
    inner = b"|".join(n for n in _INLINE if n != name)
    pair = (
        rb"<(?P<inner>" + inner + rb")" + _END + _ATTRS + rb">(?:[^<]+|" + void + rb")*"
        rb"</(?P=inner)" + _WS + rb"*>"
    )
    return re.compile(
        rb"(?:[^<]+|<(?![a-z!/?])|<!--(?:-?>|.*?--!?>)|" + void + rb"|" + pair + rb")*+"
        rb"(?:</" + name + rb"[\t\n\f />]|\Z)",
        re.DOTALL,
    )


_REGION = {name: _region(name) for name in _FORMATTING}


class Undecided(Exception):
    """The page is one the tags alone cannot answer for: build the tree."""


# A start tag read: its name, how many of the URL attributes it has, its references
# (each as often as lexbor's selector list matches the element), its href decoded.
_Read = tuple[bytes, int, tuple[str, ...], str | None]
_memos: dict[Css, dict[bytes, _Read]] = {}  # by the stylesheet reader they were read with


def quick_links(page: bytes, css: Css) -> Links | None:
    """The first `<base href>` and the URLs of `page` (valid UTF-8) as the tree gives
    them (`css` reads a style's), or None where the tags alone cannot say (see the
    module's docstring)."""
    if b"\0" in page:
        return None
    if b"\r" in page:
        page = page.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    low = page.lower()
    if _QUOTED_GT.search(low):
        return None
    try:
        return _Reader(page, low, css).run()
    except Undecided:
        return None


class _Reader:
    """One page (`quick_links`): first the opaque spans (comments, bogus comments, raw
    text), in the order the tokenizer meets them; then the start tags naming a URL
    attribute outside them, each read whole."""

    def __init__(self, page: bytes, low: bytes, css: Css) -> None:
        self.page = page
        self.low = low
        self.css = css
        self.base: str | None = None
        self.refs: list[str] = []
        self.opaque: list[tuple[int, int]] = []  # [start, end) spans, in order
        self.raw: dict[int, int] = {}  # a raw text element's start tag -> its content's end
        self.end = len(page)  # where a tag cut by the end of the page begins
        self.memo = _memos.setdefault(css, {})

    def run(self) -> Links:
        self.find_opaque()
        for start in self.tag_starts():
            close = self.low.find(b">", start)
            if close < 0 or start >= self.end:
                break  # a tag cut by the end of the page: dropped
            tag = self.page[start:close]
            read = self.memo.get(tag) or _read_tag(tag, self.css, self.memo)
            self.element(read, start, close + 1)
        return self.base, self.refs

    def find_opaque(self) -> None:
        """Comments, bogus comments and raw text, each where the tokenizer meets it."""
        low, pos, since = self.low, 0, 0  # since: where the last opaque span ended
        while (found := _SPECIAL.search(low, pos)) is not None:
            at = found.start()
            if _OPEN.search(low, max(low.rfind(b">", since, at) + 1, since), at) is not None:
                pos = at + 1  # inside a tag (which ends at its first `>`)
                continue
            name = found.group(1)
            if name is None:
                pos = since = self.comment(at)
                continue
            if name in _UNDECIDED:
                raise Undecided
            close = low.find(b">", at)
            if close < 0:
                self.end = at
                return
            end = _RAW_END[name].search(low, close + 1) if name != b"plaintext" else None
            pos = since = end.start() if end is not None else len(low)
            if name == b"script" and b"<!--" in low[close + 1 : pos]:
                raise Undecided
            self.raw[at] = pos
            self.opaque.append((close + 1, pos))

    def comment(self, at: int) -> int:
        """Record the comment (or bogus comment, or DOCTYPE) at `at`; where tokens go on."""
        low = self.low
        if low.startswith(b"<!--", at):
            found = _COMMENT.match(low, at)
            stop = found.end() if found is not None else len(low)
        else:
            close = low.find(b">", at)
            stop = close + 1 if close >= 0 else len(low)
        self.opaque.append((at, stop))
        return stop

    def tag_starts(self) -> list[int]:
        """Where each start tag naming a URL attribute, or of a raw text element, begins,
        in order."""
        low, starts = self.low, set(self.raw)
        opaque = [(start, stop) for start, stop in self.opaque if stop > start]
        for at in _hits(low):
            while opaque and opaque[0][1] <= at:
                opaque.pop(0)
            if opaque and opaque[0][0] <= at:
                continue  # in a comment or raw text
            # Every tag ends at its first `>`: a tag holding `at` began after the last one.
            start = low.find(b"<", low.rfind(b">", 0, at) + 1, at)
            if start < 0:
                continue  # in text
            if low[start + 1] in _LETTERS:
                starts.add(start)
            elif low[start + 1] not in b"/!?":  # a `<` in text, then perhaps a tag: rare
                raise Undecided
        return sorted(starts)

    def element(self, read: _Read, start: int, pos: int) -> None:
        """One start tag's links (`pos`: just after it)."""
        name, linked, refs, href = read
        if name == b"style":
            if start not in self.raw:  # never so: both see a tag where the other does
                raise Undecided
            content = self.page[pos : self.raw[start]]
            self.refs += list(self.css(content)) * (linked + 1)
            return
        if linked and (
            name in _MERGED or (name in _REGION and not _REGION[name].match(self.low, pos))
        ):
            raise Undecided
        if name == b"base":
            if self.base is None and href is not None:
                self.base = href
        else:
            self.refs += refs


def _hits(low: bytes) -> list[int]:
    """Where a URL attribute's name may stand (in a tag or not: `tag_starts` says), in
    order."""
    hits: list[int] = []
    find = low.find
    for name in _SEARCHED:
        width = len(name)
        at = find(name)
        while at >= 0:
            after = low[at + width : at + width + 1]
            if name == b"src" and low.startswith(b"set", at + 3):
                after = low[at + 6 : at + 7]
            if at and low[at - 1] in _BEFORE and (not after or after[0] in _AFTER):
                hits.append(at)
            at = find(name, at + width)
    hits.sort()
    return hits


def _read_tag(tag: bytes, css: Css, memo: dict[bytes, _Read]) -> _Read:
    """A start tag (`<name attributes`, without its `>`) read, and kept in the memo."""
    found = _TAG.match(tag)
    if found is None:  # never so: a start tag begins `<` and a letter
        raise Undecided
    name = found.group(1).lower()
    attrs: dict[bytes, bytes] = {}
    for key, double, single, bare in _ATTR_PARTS.findall(found.group(2)):
        attrs.setdefault(key.lower(), double or single or bare)
    # lexbor answers `completeness._SELECTOR` with an element once a selector it matches.
    linked = sum(n in attrs for n in _URL_NAMES)
    href = _decoded(attrs[b"href"]) if name == b"base" and b"href" in attrs else None
    refs = tuple(_references(name, attrs, css)) * linked if linked and name != b"base" else ()
    if len(memo) >= _MEMO_MAX:
        memo.clear()
    read = memo[tag] = (name, linked, refs, href)
    return read


def _references(tag: bytes, attrs: dict[bytes, bytes], css: Css) -> Iterable[str]:
    """The element's URLs in the order `completeness.page_links` reads them."""
    for name in (b"href", b"src", b"poster", b"data"):
        value = _decoded(attrs.get(name, b""))
        if value and (name != b"data" or tag == b"object"):
            yield value.strip()
    srcset = _decoded(attrs.get(b"srcset", b""))
    for candidate in srcset.split(","):
        url = candidate.strip().split(" ")[0]
        if url:
            yield url
    style = _decoded(attrs.get(b"style", b""))
    if style:
        yield from css(style.encode())


_REFERENCE = re.compile(r"&(?:#[xX]([0-9a-fA-F]{1,8});|#([0-9]{1,9});|([A-Za-z0-9]+)(;?)|(#?))")


def _decoded(raw: bytes) -> str:
    """An attribute value with its character references decoded as the tokenizer decodes
    them in attributes; Undecided where that is not plain."""
    value = raw.decode("utf-8")
    if "&" not in value:
        return value
    return _REFERENCE.sub(_reference, value)


def _reference(found: re.Match[str]) -> str:
    hexa, decimal, name, semicolon, hashed = found.groups()
    if hexa is not None or decimal is not None:
        code = int(hexa, 16) if hexa is not None else int(decimal)
        if 0x20 <= code < 0x7F or 0xA0 <= code < 0xD800 or 0xE000 <= code < 0xFDD0:
            return chr(code)
        raise Undecided
    if name is None:
        if hashed:
            raise Undecided  # `&#` without digits, or unterminated: not plain
        return "&"
    if semicolon and f"{name};" in html5:
        return html5[f"{name};"]
    if any(name[:end] in html5 for end in range(2, len(name) + 1)):
        raise Undecided  # a legacy name without `;`: decided by what follows
    return found.group(0)
