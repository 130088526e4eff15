"""A page's character encoding, found as a browser finds it (the HTML standard's sniffing).

The completeness scanner and `chart check --site` read a page's links; a link is only
right if its characters are (`café.html` in an ISO-8859-1 page is two bytes in UTF-8 and
one in Latin-1), so a page is decoded as a browser decodes it, in the standard's order
("determining the character encoding"):

1. a byte order mark (UTF-8, UTF-16BE, UTF-16LE) wins over everything;
2. the transport's `charset` (`Content-Type` of an HTTP answer; an archive has none);
3. the prescan of the first 1024 bytes for `<meta charset>` or `<meta http-equiv=
   "content-type" content="...; charset=...">`, comments and other tags skipped as the
   standard's byte-level prescan skips them (a UTF-16 label there means UTF-8,
   `x-user-defined` means windows-1252);
4. otherwise the default, which the standard leaves to the browser (its locale, and a
   frequency analysis it may run). Ours: UTF-8 when the bytes are valid UTF-8, else
   windows-1252. Why: every static site generator of this decade writes UTF-8, and a
   browser's analysis (Chrome's, Firefox's for files) finds valid UTF-8 as UTF-8; what is
   not valid UTF-8 is a legacy page, and windows-1252 is the standard's default for the
   locales such pages come from (ASCII-only pages read the same either way).

Labels are the Encoding Standard's (`ISO-8859-1`, `latin1` and `ascii` name windows-1252;
`Shift_JIS` is Windows-31J; `GBK` decodes as gb18030; the ISO-2022-KR family is the
`replacement` encoding: the whole page one U+FFFD); any other label is no declaration.
Bytes invalid in the encoding become U+FFFD, as in a browser. Pure, bounded: the prescan
reads 1024 bytes at most.

Not done (the standard's later step): a `<meta charset>` met after the first 1024 bytes
does not make the page be read again in another encoding.
"""

from __future__ import annotations

import re

PRESCAN_BYTES = 1024

# The Encoding Standard's labels (lower case), by encoding name, and the Python codec that
# decodes each ("" where this module decodes it itself).
_LABELS: dict[str, tuple[str, str]] = {
    "utf-8": ("utf-8", "unicode-1-1-utf-8 unicode11utf8 unicode20utf8 utf-8 utf8 x-unicode20utf8"),
    "ibm866": ("cp866", "866 cp866 csibm866 ibm866"),
    "iso-8859-2": (
        "iso8859_2",
        "csisolatin2 iso-8859-2 iso-ir-101 iso8859-2 iso88592 iso_8859-2 iso_8859-2:1987 l2 latin2",
    ),
    "iso-8859-3": (
        "iso8859_3",
        "csisolatin3 iso-8859-3 iso-ir-109 iso8859-3 iso88593 iso_8859-3 iso_8859-3:1988 l3 latin3",
    ),
    "iso-8859-4": (
        "iso8859_4",
        "csisolatin4 iso-8859-4 iso-ir-110 iso8859-4 iso88594 iso_8859-4 iso_8859-4:1988 l4 latin4",
    ),
    "iso-8859-5": (
        "iso8859_5",
        "csisolatincyrillic cyrillic iso-8859-5 iso-ir-144 iso8859-5 iso88595 iso_8859-5 "
        "iso_8859-5:1988",
    ),
    "iso-8859-6": (
        "iso8859_6",
        "arabic asmo-708 csiso88596e csiso88596i csisolatinarabic ecma-114 iso-8859-6 "
        "iso-8859-6-e iso-8859-6-i iso-ir-127 iso8859-6 iso88596 iso_8859-6 iso_8859-6:1987",
    ),
    "iso-8859-7": (
        "iso8859_7",
        "csisolatingreek ecma-118 elot_928 greek greek8 iso-8859-7 iso-ir-126 iso8859-7 "
        "iso88597 iso_8859-7 iso_8859-7:1987 sun_eu_greek",
    ),
    "iso-8859-8": (
        "iso8859_8",
        "csiso88598e csisolatinhebrew hebrew iso-8859-8 iso-8859-8-e iso-ir-138 iso8859-8 "
        "iso88598 iso_8859-8 iso_8859-8:1988 visual",
    ),
    "iso-8859-8-i": ("iso8859_8", "csiso88598i iso-8859-8-i logical"),
    "iso-8859-10": (
        "iso8859_10",
        "csisolatin6 iso-8859-10 iso-ir-157 iso8859-10 iso885910 l6 latin6",
    ),
    "iso-8859-13": ("iso8859_13", "iso-8859-13 iso8859-13 iso885913"),
    "iso-8859-14": ("iso8859_14", "iso-8859-14 iso8859-14 iso885914"),
    "iso-8859-15": (
        "iso8859_15",
        "csisolatin9 iso-8859-15 iso8859-15 iso885915 iso_8859-15 l9",
    ),
    "iso-8859-16": ("iso8859_16", "iso-8859-16"),
    "koi8-r": ("koi8_r", "cskoi8r koi koi8 koi8-r koi8_r"),
    "koi8-u": ("koi8_u", "koi8-ru koi8-u"),
    "macintosh": ("mac_roman", "csmacintosh mac macintosh x-mac-roman"),
    "windows-874": ("cp874", "dos-874 iso-8859-11 iso8859-11 iso885911 tis-620 windows-874"),
    "windows-1250": ("cp1250", "cp1250 windows-1250 x-cp1250"),
    "windows-1251": ("cp1251", "cp1251 windows-1251 x-cp1251"),
    "windows-1252": (
        "",
        "ansi_x3.4-1968 ascii cp1252 cp819 csisolatin1 ibm819 iso-8859-1 iso-ir-100 iso8859-1 "
        "iso88591 iso_8859-1 iso_8859-1:1987 l1 latin1 us-ascii windows-1252 x-cp1252",
    ),
    "windows-1253": ("cp1253", "cp1253 windows-1253 x-cp1253"),
    "windows-1254": (
        "cp1254",
        "cp1254 csisolatin5 iso-8859-9 iso-ir-148 iso8859-9 iso88599 iso_8859-9 "
        "iso_8859-9:1989 l5 latin5 windows-1254 x-cp1254",
    ),
    "windows-1255": ("cp1255", "cp1255 windows-1255 x-cp1255"),
    "windows-1256": ("cp1256", "cp1256 windows-1256 x-cp1256"),
    "windows-1257": ("cp1257", "cp1257 windows-1257 x-cp1257"),
    "windows-1258": ("cp1258", "cp1258 windows-1258 x-cp1258"),
    "x-mac-cyrillic": ("mac_cyrillic", "x-mac-cyrillic x-mac-ukrainian"),
    "gbk": (
        "gb18030",
        "chinese csgb2312 csiso58gb231280 gb2312 gb_2312 gb_2312-80 gbk iso-ir-58 x-gbk",
    ),
    "gb18030": ("gb18030", "gb18030"),
    "big5": ("big5hkscs", "big5 big5-hkscs cn-big5 csbig5 x-x-big5"),
    "euc-jp": ("euc_jp", "cseucpkdfmtjapanese euc-jp x-euc-jp"),
    "iso-2022-jp": ("iso2022_jp", "csiso2022jp iso-2022-jp"),
    "shift_jis": ("cp932", "csshiftjis ms932 ms_kanji shift-jis shift_jis sjis windows-31j x-sjis"),
    "euc-kr": (
        "cp949",
        "cseuckr csksc56011987 euc-kr iso-ir-149 korean ks_c_5601-1987 ks_c_5601-1989 ksc5601 "
        "ksc_5601 windows-949",
    ),
    "replacement": (
        "",
        "csiso2022kr hz-gb-2312 iso-2022-cn iso-2022-cn-ext iso-2022-kr replacement",
    ),
    "utf-16be": ("utf-16-be", "unicodefffe utf-16be"),
    "utf-16le": (
        "utf-16-le",
        "csunicode iso-10646-ucs-2 ucs-2 unicode unicodefeff utf-16 utf-16le",
    ),
    "x-user-defined": ("", "x-user-defined"),
}
ENCODINGS = tuple(_LABELS)  # every encoding the standard names, by the names `sniff` gives
_BY_LABEL = {label: name for name, (_, labels) in _LABELS.items() for label in labels.split()}
_BOMS = ((b"\xef\xbb\xbf", "utf-8"), (b"\xfe\xff", "utf-16be"), (b"\xff\xfe", "utf-16le"))
# windows-1252 as the Encoding Standard maps it: Latin-1 but for 0x80-0x9F, whose five
# bytes Python's cp1252 leaves undefined are the C1 controls of the same number.
_WINDOWS_1252 = {n: bytes([n]).decode("cp1252", "ignore") or chr(n) for n in range(0x80, 0xA0)}
_SPACE = b"\t\n\x0c\r "
_SPACE_SLASH = _SPACE + b"/"
_SPACE_GT = _SPACE + b">"
_CHARSET = re.compile(r"charset[\t\n\x0c\r ]*=[\t\n\x0c\r ]*", re.IGNORECASE)
_WORD = re.compile(r"[^\t\n\x0c\r ;]*")
_META = re.compile(rb"<meta[\t\n\x0c\r /]", re.IGNORECASE)
# What most pages start with: an optional doctype, <html> and <head> with plain attributes
# (values without "<", ">" or quotes inside), then <meta charset=...> with nothing more.
_S = rb"[\t\n\x0c\r ]"
_PLAIN_ATTRIBUTES = (
    rb"(?:" + _S + rb"+[a-z-]+(?:=\"[^\"<>']*\"|='[^'<>\"]*'|=[^\t\n\x0c\r \"'<>=`]+)?)*"
)
_SIMPLE_HEAD = re.compile(
    _S + rb"*(?:<!doctype[^<>]*>" + _S + rb"*)?"
    rb"(?:<html" + _PLAIN_ATTRIBUTES + _S + rb"*>" + _S + rb"*)?"
    rb"(?:<head" + _PLAIN_ATTRIBUTES + _S + rb"*>" + _S + rb"*)?"
    rb"<meta"
    + _S
    + rb"+charset=(?:\"([^\"<>]*)\"|'([^'<>]*)'|([^\t\n\x0c\r \"'<>/=`]+)(?=[\t\n\x0c\r >]))"
    + _S
    + rb"*/?>",
    re.IGNORECASE,
)


def encoding_of(label: str) -> str | None:
    """The Encoding Standard's name for `label` (ASCII whitespace around it and case
    ignored), or None for a label it does not know."""
    return _BY_LABEL.get(label.strip("\t\n\x0c\r ").lower())


def sniff(data: bytes, content_type: str = "") -> str:
    """The encoding a browser decodes `data` in (its name, lower case): BOM, then the
    transport's charset (`content_type`), then the prescan, then the default."""
    for bom, name in _BOMS:
        if data.startswith(bom):
            return name
    declared = charset_in(content_type)
    if declared is not None:
        return declared
    declared = prescan(data[:PRESCAN_BYTES])
    if declared is not None:
        return declared
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return "windows-1252"
    return "utf-8"


def decode_page(data: bytes, content_type: str = "") -> str:
    """`data` as text, in the encoding `sniff` finds (its BOM dropped)."""
    name = sniff(data, content_type)
    for bom, bom_name in _BOMS:
        if name == bom_name and data.startswith(bom):
            data = data[len(bom) :]
            break
    return decode(data, name)


def decode(data: bytes, name: str) -> str:
    """`data` in the encoding called `name` (a name `encoding_of` gives), invalid bytes as
    U+FFFD."""
    if name == "windows-1252":
        return data.decode("latin-1").translate(_WINDOWS_1252)
    if name == "replacement":
        return "\ufffd" if data else ""
    if name == "x-user-defined":
        return "".join(chr(b) if b < 0x80 else chr(0xF700 + b) for b in data)
    return data.decode(_LABELS[name][0], "replace")


def charset_in(value: str) -> str | None:
    """The encoding a `content` attribute or a `Content-Type` names with `charset=` (the
    standard's "extracting a character encoding from a meta element"), None if none."""
    found = _CHARSET.search(value)  # "charset" not followed by "=" is passed over
    if found is None:
        return None
    rest = value[found.end() :]
    if rest[:1] in ("'", '"'):
        end = rest.find(rest[0], 1)
        return encoding_of(rest[1:end]) if end > 0 else None
    word = _WORD.match(rest)
    return encoding_of(word.group()) if word and word.group() else None


def prescan(head: bytes) -> str | None:
    """The encoding a `<meta>` in `head` declares (the standard's "prescan a byte stream to
    determine its encoding"), None when none does before the bytes end."""
    if _META.search(head) is None:
        return None  # nothing here can declare anything
    simple = _SIMPLE_HEAD.match(head)
    if simple is not None:
        # The common head, read in C: what the walk below would find in it (a label it does
        # not know sends it on to the walk, which reads on past it).
        found = _declared(
            encoding_of(next(g for g in simple.groups() if g is not None).decode("latin-1"))
        )
        if found is not None:
            return found
    return _Prescan(head).run()


def _declared(charset: str | None) -> str | None:
    """A `<meta>`'s encoding as the prescan takes it: UTF-16 declared is UTF-8 (bytes that
    were UTF-16 would not have been read), `x-user-defined` is windows-1252."""
    if charset in ("utf-16be", "utf-16le"):
        return "utf-8"
    return "windows-1252" if charset == "x-user-defined" else charset


class _Prescan:
    """The standard's byte-level walk: comments and `<!`, `</`, `<?` constructs skipped,
    other tags' attributes read and passed over, each `<meta` judged by its attributes."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.at = 0
        self.ended = False  # the bytes ended inside a construct: the prescan finds nothing

    def run(self) -> str | None:
        data = self.data
        # Only a "<" starts anything the prescan acts on: the bytes between are skipped in C.
        while (at := data.find(b"<", self.at)) >= 0:
            self.at = at
            rest = data[at : at + 6].lower()
            if rest.startswith(b"<!--"):
                end = data.find(b"-->", self.at + 2)
                if end < 0:
                    return None
                self.at = end + 3
                continue
            if rest[:5] == b"<meta" and rest[5:6] and rest[5:6] in _SPACE_SLASH:
                self.at += 5
                found = self._meta()
                if found is not None or self.ended:
                    return found
            elif self._tag_start(rest):
                self._skip_tag()
                if self.ended:
                    return None
            elif rest[:2] in (b"<!", b"</", b"<?"):
                end = data.find(b">", self.at + 2)
                if end < 0:
                    return None
                self.at = end
            self.at += 1
        return None

    @staticmethod
    def _tag_start(rest: bytes) -> bool:
        name = rest[2:3] if rest[1:2] == b"/" else rest[1:2]
        return rest[:1] == b"<" and name.isalpha() and name.isascii()

    def _skip_tag(self) -> None:
        data = self.data
        while self.at < len(data) and data[self.at] not in _SPACE_GT:
            self.at += 1
        while self._attribute() is not None:
            pass

    def _meta(self) -> str | None:
        """The standard's steps for one `<meta`: its charset if it declares one."""
        seen: set[bytes] = set()
        got_pragma, need_pragma, charset = False, None, None
        while (attribute := self._attribute()) is not None:
            name, value = attribute
            if name in seen:
                continue
            seen.add(name)
            if name == b"http-equiv":
                got_pragma = got_pragma or value == b"content-type"
            elif name == b"content" and charset is None:
                found = charset_in(value.decode("latin-1"))
                if found is not None:
                    charset, need_pragma = found, True
            elif name == b"charset":
                charset, need_pragma = encoding_of(value.decode("latin-1")), False
        if self.ended or need_pragma is None or (need_pragma and not got_pragma):
            return None
        return _declared(charset)

    def _attribute(self) -> tuple[bytes, bytes] | None:
        """The standard's "get an attribute": (name, value) lower-cased, None at `>` or at
        the end of the bytes (the caller then stops too)."""
        data, end = self.data, len(self.data)
        while self.at < end and data[self.at] in _SPACE_SLASH:
            self.at += 1
        if self.at >= end or data[self.at] == ord(">"):
            self.ended = self.at >= end
            return None
        name = bytearray()
        while self.at < end:
            byte = data[self.at]
            if byte == ord("=") and name:
                self.at += 1
                return self._value(bytes(name))
            if byte in _SPACE:
                return self._after_name(bytes(name))
            if byte in b"/>":
                return bytes(name), b""
            name.append(byte | 0x20 if 0x41 <= byte <= 0x5A else byte)
            self.at += 1
        self.ended = True
        return None

    def _after_name(self, name: bytes) -> tuple[bytes, bytes] | None:
        data, end = self.data, len(self.data)
        while self.at < end and data[self.at] in _SPACE:
            self.at += 1
        if self.at >= end:
            self.ended = True
            return None
        if data[self.at] != ord("="):
            return name, b""
        self.at += 1
        return self._value(name)

    def _value(self, name: bytes) -> tuple[bytes, bytes] | None:
        data, end = self.data, len(self.data)
        while self.at < end and data[self.at] in _SPACE:
            self.at += 1
        if self.at >= end:
            self.ended = True
            return None
        if data[self.at] in b"\"'":
            close = data.find(data[self.at : self.at + 1], self.at + 1)
            if close < 0:
                self.at, self.ended = end, True
                return None
            value = data[self.at + 1 : close]
            self.at = close + 1
            return name, value.lower()
        if data[self.at] == ord(">"):
            return name, b""
        start = self.at
        while self.at < end and data[self.at] not in _SPACE_GT:
            self.at += 1
        if self.at >= end:
            self.ended = True
            return None
        return name, data[start : self.at].lower()
