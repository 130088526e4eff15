"""Synthetic documentation sites and their .tar.gz bundles.

The tree content is a pure function of (domain, revision, export number, settings); only the
member mtimes and the gzip header carry the export time, so two exports with no content change
give identical files in different archive bytes. Bundles are written streaming (1 MiB at a time,
one file at a time) so a multi-GiB archive costs no memory.

Two kinds of site: the small one (`pages` pages of `page_size` bytes, two tiny assets) and,
with `site_size` set, a realistic one of about that many bytes of files (mirror.sim.tree).
Each export changes `changes_per_export` pages, or the share `change_share` of them.

A damaged export (`SiteSpec.damage`) is what a completeness check must catch: "truncated"
keeps a third of the selected pages in the bundle (the index page first) while the job's
`pageCount` still reports all of them; "broken_links" keeps every page but each one links
to a page and shows an image that are not in the bundle (`BROKEN_PAGE`, `MISSING_IMAGE`).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import random
import tarfile
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from mirror.sim import tree

CHUNK = 1024 * 1024
BOMB_SIZE = 200 * 1024 * 1024
BIG_ASSET_NAME = "assets/media/walkthrough.bin"
BROKEN_PAGE = "guides/retired-page/"
MISSING_IMAGE = "assets/img/missing-diagram.png"

_WORDS = (  # noqa: SIM905
    "install configure deploy cluster bundle export static page guide reference token api key "
    "project domain version release rollback values chart mirror network offline archive verify "
    "signature manifest object store bucket upload download retry backoff schedule daemon service "
    "latency storage content render asset script style index search navigation section example "
    "the a of to and in for with on is are by from that this you your can will should must"
).split()


class BuildCancelled(Exception):
    """The simulator stopped while a bundle was being written."""


@dataclass(frozen=True)
class SiteSpec:
    """Everything that decides an export's tree content (plus its mtime)."""

    domain: str
    revision: int = 0
    export_number: int = 0
    pages: int = 40
    page_size: int = 2048
    changes_per_export: int = 2
    base_path: str = ""
    paths: tuple[str, ...] | None = None
    bundle_size: int | None = None
    malicious: str | None = None
    mtime: int = 0
    seed: int = 0
    change_share: float | None = None
    site_size: int | None = None
    damage: str | None = None

    @property
    def changes(self) -> int:
        """Pages each export changes."""
        return tree.change_count(self.page_total, self.changes_per_export, self.change_share)

    @property
    def page_total(self) -> int:
        """Pages of the whole site (before any `paths` selection)."""
        if self.site_size is not None:
            return len(tree.site_plan(self.seed, self.domain, self.site_size).pages)
        return max(self.pages, 1)


@dataclass(frozen=True)
class BundleInfo:
    path: Path
    size: int
    sha256: str
    page_count: int
    mtime: int


@dataclass(frozen=True)
class _Member:
    name: str
    data: bytes


def page_generation(index: int, spec: SiteSpec) -> int:
    """How many exports so far changed page `index` (changes go round-robin over the pages)."""
    return tree.generation(index, spec.page_total, spec.export_number, spec.changes)


def page_count(spec: SiteSpec) -> int:
    """Pages in this export (the index page plus the selected ones)."""
    return len(selected_pages(spec))


def page_slug(index: int) -> str:
    return "index" if index == 0 else f"guides/page-{index:03d}"


def page_member_name(index: int) -> str:
    return "index.html" if index == 0 else f"{page_slug(index)}/index.html"


def selected_pages(spec: SiteSpec) -> list[int]:
    """Indices of the pages this export contains: all, or the index page plus `paths`."""
    all_pages = range(spec.page_total)
    if spec.paths is None:
        return list(all_pages)
    wanted = {p.strip("/").removesuffix("/index.html").removesuffix(".html") for p in spec.paths}
    if spec.site_size is not None:
        pages = tree.site_plan(spec.seed, spec.domain, spec.site_size).pages
        return [i for i in all_pages if i == 0 or tree.page_slug(pages[i]) in wanted]
    return [i for i in all_pages if i == 0 or page_slug(i) in wanted]


def bundled_pages(spec: SiteSpec) -> list[int]:
    """Indices of the pages the bundle holds: the selected ones, or a third of them when the
    export is truncated (`page_count` still reports all selected pages)."""
    selected = selected_pages(spec)
    if spec.damage == "truncated":
        return selected[: max(1, len(selected) // 3)]
    return selected


def _broken_markup(base: str) -> str:
    return (
        f'<p><a href="{base}/{BROKEN_PAGE}">Retired page</a> '
        f'<img src="{base}/{MISSING_IMAGE}" alt="diagram"></p>\n'
    )


def _prose(rng: random.Random, size: int) -> str:
    parts: list[str] = []
    length = 0
    while length < size:
        sentence = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(8, 18)))
        paragraph = f"<p>{sentence.capitalize()}.</p>\n"
        parts.append(paragraph)
        length += len(paragraph)
    return "".join(parts)


def render_page(index: int, spec: SiteSpec, included: list[int]) -> bytes:
    """The HTML of one page: deterministic for (domain, revision, page, generation)."""
    generation = page_generation(index, spec)
    rng = random.Random(f"{spec.seed}|{spec.domain}|{spec.revision}|{index}|{generation}")  # noqa: S311
    base = spec.base_path
    if index == 0:
        title = f"{spec.domain} documentation"
        links = "\n".join(
            f'<li><a href="{base}/{page_slug(i)}/">Guide {i:03d}</a></li>' for i in included if i
        )
        nav = f"<ul>\n{links}\n</ul>\n"
    else:
        title = f"Guide {index:03d}"
        nav = ""
    head = (
        '<!doctype html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f"<title>{title} - {spec.domain}</title>\n"
        f'<meta name="generator" content="mirror-sim revision {spec.revision}.{generation}">\n'
        f'<link rel="stylesheet" href="{base}/assets/site.css">\n'
        f'<script src="{base}/assets/site.js" defer></script>\n</head>\n<body>\n'
        f'<header><a href="{base}/">{spec.domain}</a></header>\n<main>\n<h1>{title}</h1>\n{nav}'
    )
    if spec.damage == "broken_links":
        head += _broken_markup(base)
    tail = "</main>\n</body>\n</html>\n"
    body = _prose(rng, max(spec.page_size - len(head) - len(tail), 0))
    return (head + body + tail).encode()


_CSS = b"body{font-family:system-ui,sans-serif;max-width:48rem;margin:0 auto;padding:1rem}\n"
_JS = b"document.documentElement.dataset.exported='static';\n"


def site_members(spec: SiteSpec) -> list[_Member]:
    """The small files of the site, in archive order."""
    included = selected_pages(spec)
    members = [
        _Member(page_member_name(i), render_page(i, spec, included)) for i in bundled_pages(spec)
    ]
    members.append(_Member("assets/site.css", _CSS))
    members.append(_Member("assets/site.js", _JS))
    return members


def _large_site_files(spec: SiteSpec) -> tuple[list[str], list[int], Iterator[_Member]]:
    """Names, sizes and (made one at a time) members of a realistic site."""
    assert spec.site_size is not None
    plan = tree.site_plan(spec.seed, spec.domain, spec.site_size)
    pages = [plan.pages[i] for i in bundled_pages(spec)]
    files = [*pages, *plan.assets]

    def members() -> Iterator[_Member]:
        for page in pages:
            generation = tree.generation(
                plan.position[page.number], len(plan.pages), spec.export_number, spec.changes
            )
            seed = f"{spec.seed}|{spec.domain}|{spec.revision}|{page.number}|{generation}"
            version = f"{spec.revision}.{generation}"
            data = tree.render_page(
                plan, page, domain=spec.domain, base=spec.base_path, seed=seed, version=version
            )
            if spec.damage == "broken_links":
                main = b'<main class="content">\n'
                broken = main + _broken_markup(spec.base_path).encode()
                data = data.replace(main, broken, 1)[: page.size]
            yield _Member(page.name, data)
        for asset in plan.assets:
            yield _Member(asset.name, tree.render_asset(asset, f"{spec.seed}|{spec.domain}"))

    return [f.name for f in files], [f.size for f in files], members()


def _site_files(spec: SiteSpec) -> tuple[list[str], list[int], Iterator[_Member]]:
    if spec.site_size is not None:
        return _large_site_files(spec)
    small = site_members(spec)
    return [m.name for m in small], [len(m.data) for m in small], iter(small)


def _directories(names: Iterable[str]) -> list[str]:
    seen: dict[str, None] = {}
    for name in names:
        parts = name.split("/")[:-1]
        for depth in range(1, len(parts) + 1):
            seen.setdefault("/".join(parts[:depth]), None)
    return list(seen)


class _HashingWriter(io.RawIOBase):
    """Passes bytes to a file while counting and hashing them."""

    def __init__(self, target: BinaryIO) -> None:
        self._target = target
        self.sha256 = hashlib.sha256()
        self.size = 0

    def writable(self) -> bool:
        return True

    def write(self, data: bytes | bytearray | memoryview) -> int:  # type: ignore[override]
        view = memoryview(data)
        self._target.write(view)
        self.sha256.update(view)
        self.size += view.nbytes
        return view.nbytes


class _GeneratedReader(io.RawIOBase):
    """`size` bytes made on demand: incompressible (an AES-CTR keystream keyed by `rng`:
    the same bytes for the same seed, at about 1 GiB a CPU second, where `randbytes` took
    six and made the simulated vendor's export of a large bundle the longest part of every
    benchmark that waits for it) or zeros."""

    def __init__(
        self, size: int, rng: random.Random | None, cancel: threading.Event | None
    ) -> None:
        self._left = size
        self._stream = (
            None
            if rng is None
            else Cipher(algorithms.AES(rng.randbytes(16)), modes.CTR(rng.randbytes(16))).encryptor()
        )
        self._cancel = cancel

    def readable(self) -> bool:
        return True

    def read(self, size: int | None = -1) -> bytes:
        if self._cancel is not None and self._cancel.is_set():
            raise BuildCancelled("simulator stopped")
        want = self._left if size is None or size < 0 else min(size, self._left)
        self._left -= want
        return self._stream.update(bytes(want)) if self._stream is not None else bytes(want)


def _tar_size(sizes: list[int]) -> int:
    blocks = sum(512 + -(-size // 512) * 512 for size in sizes) + 1024
    record = tarfile.RECORDSIZE
    return -(-blocks // record) * record


def _info(
    name: str, mtime: int, *, size: int = 0, kind: bytes = tarfile.REGTYPE
) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size = size
    info.mtime = mtime
    info.type = kind
    info.mode = 0o755 if kind == tarfile.DIRTYPE else 0o644
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def _malicious_members(
    kind: str, mtime: int
) -> Iterator[tuple[tarfile.TarInfo, io.RawIOBase | io.BytesIO | None]]:
    payload = b"<html><body>written outside the export</body></html>\n"
    if kind == "traversal":
        yield _info("../evil.html", mtime, size=len(payload)), io.BytesIO(payload)
    elif kind == "absolute":
        yield _info("/etc/evil", mtime, size=len(payload)), io.BytesIO(payload)
    elif kind == "symlink":
        link = _info("assets/escape", mtime, kind=tarfile.SYMTYPE)
        link.linkname = "../../../../../../tmp"
        link.mode = 0o777
        yield link, None
        yield _info("assets/escape/evil.html", mtime, size=len(payload)), io.BytesIO(payload)
    elif kind == "hardlink":
        link = _info("assets/passwd", mtime, kind=tarfile.LNKTYPE)
        link.linkname = "../../../../../../etc/passwd"
        yield link, None
    elif kind == "device":
        device = _info("assets/null", mtime, kind=tarfile.CHRTYPE)
        device.devmajor, device.devminor = 1, 3
        yield device, None
    elif kind == "case_twins":  # the same path as the site's index page on a case-folding disk
        yield _info("INDEX.HTML", mtime, size=len(payload)), io.BytesIO(payload)
    elif kind == "bomb":
        yield (
            _info("assets/zeros.bin", mtime, size=BOMB_SIZE),
            _GeneratedReader(BOMB_SIZE, None, None),
        )
    else:
        raise ValueError(f"unknown malicious kind: {kind}")


def build_bundle(spec: SiteSpec, dest: Path, cancel: threading.Event | None = None) -> BundleInfo:
    """Write the export's .tar.gz to `dest` (atomically) and describe it."""
    names, sizes, members = _site_files(spec)
    big_size = 0
    if spec.bundle_size is not None:
        small = _tar_size(sizes + [0] * (len(_directories(names)) + 2))
        stored_tar = (spec.bundle_size - 18) * 65535 // 65540  # stored deflate: 5 B per 64 KiB
        big_size = max(stored_tar - small - 1024, 0)
        if big_size:
            names.append(BIG_ASSET_NAME)
    if spec.bundle_size is not None:
        level = 0
    elif spec.malicious == "bomb":
        level = 9
    else:
        level = 6
    tmp = dest.with_name(dest.name + ".part")
    try:
        with open(tmp, "wb") as raw:
            writer = _HashingWriter(raw)
            with (
                gzip.GzipFile(
                    filename="", mode="wb", compresslevel=level, fileobj=writer, mtime=spec.mtime
                ) as gz,
                tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar,
            ):
                tar.copybufsize = CHUNK  # type: ignore[attr-defined]
                for directory in _directories(names):
                    tar.addfile(_info(directory, spec.mtime, kind=tarfile.DIRTYPE))
                for member in members:
                    if cancel is not None and cancel.is_set():
                        raise BuildCancelled("simulator stopped")
                    tar.addfile(
                        _info(member.name, spec.mtime, size=len(member.data)),
                        io.BytesIO(member.data),
                    )
                if big_size:
                    rng = random.Random(f"{spec.seed}|{spec.domain}|big|{spec.revision}")  # noqa: S311
                    tar.addfile(
                        _info(BIG_ASSET_NAME, spec.mtime, size=big_size),
                        _GeneratedReader(big_size, rng, cancel),
                    )
                if spec.malicious is not None:
                    for info, data in _malicious_members(spec.malicious, spec.mtime):
                        tar.addfile(info, data)
        os.replace(tmp, dest)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return BundleInfo(
        path=dest,
        size=writer.size,
        sha256=writer.sha256.hexdigest(),
        page_count=page_count(spec),
        mtime=spec.mtime,
    )
