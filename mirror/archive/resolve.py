"""What "a link resolves" means: the one definition the export's completeness scan and
`chart check --site` share (issue 38).

A reference on a page names a URL; the URL is resolved as a browser resolves it, and the
path it names is answered as the static hosts the chart serves from answer it:

- a reference (and a `<base href>`) is first read as the URL standard reads it (`url_text`:
  `\\` is `/`, tabs and line breaks removed, only C0 controls and spaces trimmed);
- the base of a page's relative references is its document URL, or the first `<base
  href>` resolved against that URL (the HTML standard; an empty or fragment-only href
  leaves the document URL); a base or a reference with a scheme or a host leaves the site
  and is not checked, nor are `data:`, `mailto:`, `javascript:`, `tel:`, `about:`, `blob:`
  and fragment- or query-only references;
- a path is answered (`answer`) by the file of that name; else, when `path/index.html`
  is a file, by a redirect to `path/` (so a browser resolves that page's references
  below it); else by `path.html`; a path ending in `/` by its `index.html` only; nothing
  else (no directory listing), as nginx with `try_files $uri $uri/ $uri.html` and GitHub
  Pages answer (an S3 website endpoint has no `page.html` step: a site relying on it
  would break there);
- a client follows at most `MAX_REDIRECTS` redirects; a link still redirected after
  them is broken.

The scanner resolves a member's references from its `document_url` with `base_of` and
`target`, and asks `served_as` over its table of the bundle's files (a path resolves
when one of the names is a file; the redirect's target is the second). The crawler resolves
them the same way from the page's real URL, and its server answers with `answer`.
"""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import quote, unquote, urljoin, urlsplit

MAX_REDIRECTS = 5
SITE = "http://site.invalid"  # the scanner's stand-in origin (".invalid" is never a host)
SKIPPED_SCHEMES = ("data:", "mailto:", "javascript:", "tel:", "about:", "blob:")


def served_as(path: str) -> tuple[str, ...]:
    """The files a static host answers `path` with (a site path without the leading "/"),
    the first present of them: `path`, then `path/index.html` (through a redirect to
    `path/`), then `path.html`; for `dir/` or "" its `index.html` only."""
    if path == "" or path.endswith("/"):
        return (f"{path}index.html",)
    return (path, f"{path}/index.html", f"{path}.html")


def answer(path: str, is_file: Callable[[str], bool]) -> int | str:
    """How a static host answers the request path `path` (decoded, starting with "/") over
    the files `is_file` says exist (site paths without the leading "/"): the file to send
    (200), 301 (a redirect to `path` + "/"), or 404."""
    for n, name in enumerate(served_as(_normalise(path).lstrip("/"))):
        if is_file(name):
            return 301 if n == 1 else name
    return 404


def document_url(path: str) -> str:
    """The URL the scanner gives the bundle's member `path` ("/" and its path): on the
    origin `SITE`, which stands for wherever the site is published."""
    return url_of(SITE, path)


def base_of(document: str, href: str | None) -> str:
    """The base URL of a page's relative references: its URL `document`, or the first
    `<base href>` (`href`) resolved against it."""
    if href is None:
        return document
    href = url_text(href)
    if not href or href.startswith("#") or href.lower().startswith(SKIPPED_SCHEMES):
        return document
    try:
        return urljoin(document, href)
    except ValueError:
        return document


def target(base: str, ref: str) -> tuple[str, str] | None:
    """What `ref` names from a page whose base URL is `base`: its origin
    (`scheme://host[:port]`) and its path, decoded, `.` and `..` removed (RFC 3986's
    resolution, as a browser's; query and fragment dropped). None when `ref` is not a link
    to check: a skipped scheme, only a fragment or a query, unparseable."""
    ref = url_text(ref)
    if not ref or ref.startswith(("#", "?")) or ref.lower().startswith(SKIPPED_SCHEMES):
        return None
    try:
        parts = urlsplit(ref)
        if parts.scheme or parts.netloc:
            parts = urlsplit(urljoin(base, ref))
            path = parts.path
        else:  # a path, most references: merged here, a fraction of `urljoin`'s time
            path = parts.path
            parts = urlsplit(base)  # the standard library caches the repeated base
            if not path.startswith("/"):
                path = parts.path.rpartition("/")[0] + "/" + path
    except ValueError:
        return None
    return f"{parts.scheme}://{parts.netloc}", _normalise(unquote(path))


_C0_OR_SPACE = "".join(map(chr, range(0x21)))


def url_text(ref: str) -> str:
    """A reference as the URL standard reads it before parsing (WHATWG URL, basic URL parser):
    leading and trailing C0 controls and spaces dropped (no other whitespace: a link led by a
    NO-BREAK SPACE names that character), every tab and line break removed, and `\\` read
    as `/`, as in every http(s) URL (a browser follows `guides\\page.html` to
    `guides/page.html`; trial37 D2). References with another scheme are skipped or external
    before their path matters."""
    ref = ref.strip(_C0_OR_SPACE)
    for removed in "\t\n\r":
        ref = ref.replace(removed, "")
    return ref.replace("\\", "/")


def url_of(origin: str, path: str) -> str:
    """The URL a client asks for the decoded site `path` on `origin`."""
    return origin + quote(path, safe="/")


def _normalise(path: str) -> str:
    """`.` and `..` removed (no higher than the root), repeated slashes folded (as nginx's
    `merge_slashes`)."""
    parts: list[str] = []
    for part in path.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if parts:
                parts.pop()
            continue
        parts.append(part)
    trailing = "/" if path.endswith(("/", "/.", "/..")) and parts else ""
    return "/" + "/".join(parts) + trailing
