"""Realistic site content, fast: HTML text that compresses like documentation, images that do not.

A site of hundreds of MiB cannot be written a word at a time in Python. Instead a
corpus of HTML fragments (headings, paragraphs with links and inline code, code
blocks, lists, notes) is built once per process from a Zipf-weighted vocabulary,
and every page body is a run of whole fragments cut from it at seeded offsets. The
same goes for CSS and JS. Images are seeded pseudo-random bytes behind a PNG or
JPEG signature: incompressible, as real ones are.

Promises: every function here is a pure function of its arguments (and the fixed
corpora), so a page's bytes depend only on the seed string the caller derives from
(domain, revision, page, generation); `text_of_size` and `image_bytes` return
exactly the size asked for.
"""

from __future__ import annotations

import bisect
import functools
import itertools
import random
from collections.abc import Callable
from dataclasses import dataclass

CORPUS_BYTES = 6 * 1024 * 1024
CODE_CORPUS_BYTES = 1024 * 1024
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"
JPEG_SIGNATURE = b"\xff\xd8\xff\xe0\x00\x10JFIF\x00\x01\x01"

Fragment = Callable[[random.Random, list[str], int], tuple[str, int]]

TECH_WORDS = (  # noqa: SIM905
    "install configure deploy cluster bundle export static page guide reference token api key "
    "project domain version release rollback values chart mirror network offline archive verify "
    "signature manifest object store bucket upload download retry backoff schedule daemon service "
    "latency storage content render asset script style index search navigation section example "
    "request response header status error timeout endpoint client server proxy certificate "
    "namespace deployment pod container image registry volume secret config map ingress route "
    "policy role permission account user group session cache queue worker job task event log "
    "metric alert dashboard query filter sort page limit offset cursor field schema table column "
    "migration backup restore snapshot replica shard partition stream buffer chunk block file "
    "directory path link redirect template variable parameter option flag default value type "
    "string integer boolean array list map record entry item element node tree graph edge "
    "build test release pipeline stage step artifact package dependency module library plugin"
).split()
COMMON_WORDS = (  # noqa: SIM905
    "the a of to and in for with on is are by from that this you your can will should must be "
    "it as at or an not when if each all more one use used using which have has how what then "
    "also into only new other any these some first after before same than its may need set run"
).split()
SYLLABLES = (  # noqa: SIM905
    "ka lo mi ne ra tu so vi de pa ze ko li mu na re ta fo ga hi jo be cu di en ar or"
).split()
CSS_PROPERTIES = (  # noqa: SIM905
    "margin padding color background border display font-size line-height width max-width "
    "height gap grid-template-columns align-items justify-content position top left opacity"
).split()


@dataclass(frozen=True)
class Corpus:
    """Text made of whole fragments; `starts` are the offsets where fragments begin."""

    text: bytes
    starts: tuple[int, ...]

    def cut(self, rng: random.Random, size: int, piece: tuple[int, int]) -> bytes:
        """Exactly `size` bytes: runs of whole fragments (each about `piece` bytes long)
        from seeded places, the last one cut short."""
        parts: list[bytes] = []
        left = size
        limit = len(self.text)
        while left > 0:
            start = self.starts[rng.randrange(len(self.starts) - 1)]
            want = min(left, rng.randint(*piece))
            end_at = bisect.bisect_left(self.starts, min(start + want, limit))
            end = self.starts[end_at] if end_at < len(self.starts) else limit
            chunk = self.text[start : max(end, start + 1)][:left]
            parts.append(chunk)
            left -= len(chunk)
        return b"".join(parts)


def _vocabulary(rng: random.Random) -> tuple[list[str], list[float]]:
    """Words and Zipf cumulative weights: common words first, then technical, then made-up."""
    made_up = {
        "".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 4))) for _ in range(1200)
    }
    words = [*COMMON_WORDS, *TECH_WORDS, *sorted(made_up)]
    cumulative: list[float] = []
    total = 0.0
    for rank in range(1, len(words) + 1):
        total += 1.0 / rank
        cumulative.append(total)
    return words, cumulative


def _build(size: int, fragment: Fragment, seed: str) -> Corpus:
    rng = random.Random(seed)  # noqa: S311
    words, cumulative = _vocabulary(rng)
    pool = rng.choices(words, cum_weights=cumulative, k=size // 3)
    parts: list[str] = []
    starts: list[int] = []
    length = 0
    used = 0
    while length < size:
        text, taken = fragment(rng, pool, used)
        used = (used + taken) % (len(pool) - 64)
        starts.append(length)
        parts.append(text)
        length += len(text)
    return Corpus("".join(parts).encode(), tuple(starts))


def _html_fragment(rng: random.Random, pool: list[str], at: int) -> tuple[str, int]:
    kind = rng.random()
    n = rng.randint(8, 30)
    words = pool[at : at + n]
    if kind < 0.08:
        title = " ".join(words[:4]).capitalize()
        anchor = "-".join(words[:3])
        return (
            f'<h2 id="{anchor}" class="doc-heading">{title}'
            f'<a class="headerlink" href="#{anchor}" title="Permanent link">&para;</a></h2>\n',
            4,
        )
    if kind < 0.2:
        lines = "\n".join(
            f'<span class="hljs-attr">{a}</span>: <span class="hljs-string">{b}-'
            f"{rng.randint(1, 99)}</span>"
            for a, b in itertools.pairwise(words)
        )
        return (
            f'<div class="highlight"><pre><code class="language-yaml">{lines}\n'
            "</code></pre></div>\n",
            n,
        )
    if kind < 0.3:
        items = "".join(
            f'<li class="doc-list-item"><p>{a} {b} {c}</p></li>\n'
            for a, b, c in zip(*[iter(words)] * 3, strict=False)
        )
        return f'<ul class="doc-list">\n{items}</ul>\n', n
    if kind < 0.34:
        text = " ".join(words).capitalize()
        return (
            '<div class="admonition note"><p class="admonition-title">Note</p>'
            f"<p>{text}.</p></div>\n",
            n,
        )
    words = list(words)
    link = rng.randrange(len(words))
    words[link] = (
        f'<a class="reference internal" href="#{words[link]}-{pool[at + n]}">'
        f'<span class="std std-ref">{words[link]}</span></a>'
    )
    tick = rng.randrange(len(words))
    if "<" not in words[tick]:
        words[tick] = f'<code class="docutils literal notranslate">{words[tick]}</code>'
    return f'<p class="doc-paragraph">{" ".join(words).capitalize()}.</p>\n', n + 1


def _css_fragment(rng: random.Random, pool: list[str], at: int) -> tuple[str, int]:
    rules = "".join(
        f"{rng.choice(CSS_PROPERTIES)}:{rng.randint(0, 48)}px;" for _ in range(rng.randint(2, 6))
    )
    return f".{pool[at]}-{pool[at + 1]}{{{rules}}}\n", 2


def _js_fragment(rng: random.Random, pool: list[str], at: int) -> tuple[str, int]:
    a, b, c = pool[at : at + 3]
    body = f'const {a}{rng.randint(0, 999)}=e.{b}("{c}")||{rng.randint(0, 9999)};'
    return f"function {a}_{b}(e){{{body}return {c}(e,{a})}}\n", 3


@functools.cache
def html_corpus() -> Corpus:
    return _build(CORPUS_BYTES, _html_fragment, "mirror-sim html corpus")


@functools.cache
def css_corpus() -> Corpus:
    return _build(CODE_CORPUS_BYTES, _css_fragment, "mirror-sim css corpus")


@functools.cache
def js_corpus() -> Corpus:
    return _build(CODE_CORPUS_BYTES, _js_fragment, "mirror-sim js corpus")


def text_of_size(corpus: Corpus, seed: str, size: int) -> bytes:
    """Exactly `size` bytes of `corpus` text, a pure function of `seed`."""
    return corpus.cut(random.Random(seed), size, (1024, 6144))  # noqa: S311


def image_bytes(seed: str, size: int, *, jpeg: bool) -> bytes:
    """Exactly `size` incompressible bytes behind a PNG or JPEG signature."""
    signature = JPEG_SIGNATURE if jpeg else PNG_SIGNATURE
    body = random.Random(seed).randbytes(max(size - len(signature), 0))  # noqa: S311
    return (signature + body)[:size]
