"""Pack: write the index's undelivered versions as a signed transfer set (connected side).

The plan (sequence, chain, items, parts) comes from the pure `transferset.plan`;
this module reads the index, copies the blobs, signs and records.

Promises:
- `pack` builds the set under `OUT.partial-<nonce>` and renames it to OUT only
  when every byte is written and fsynced (blobs, manifest, signature, then
  SHA256SUMS): a set cut short by a full disk or a crash never carries the name OUT.
- A medium without room for the set, found before writing or when it fills up half-way,
  is TemporaryFailure (exit 75) naming where, what is free and what the set needs; the
  half-written set is removed and nothing is recorded.
- Each part and the whole blob are hashed in the same pass as the copy; a stored
  blob that does not match its index entry is refused (IntegrityError).
- Two packs racing for one sequence: the loser removes its set (TemporaryFailure).
- A version whose base the air-gapped side holds goes as a delta when that is small enough
  (`outbound.delta`; `full` forces whole bundles); the free-space check counts what is
  carried. The delta blobs live in nameless temp files that are gone when `pack` returns,
  whatever happened.
- `dry_run` decides the same way and reports it, writing nothing.
- `from_set` packs again the versions an earlier set carried, packed or delivered since or
  not: with `full`, the remedy the import prints for a delta it cannot rebuild. The new set
  takes the next sequence, like any other.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import secrets
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import IO, Any

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError as SqlIntegrityError
from sqlalchemy.orm import Session

from mirror.config import Settings, SiteSettings
from mirror.errors import ConfigError, OperationFailed, TemporaryFailure
from mirror.fsutil import free_bytes, fsync_dir, is_disk_full
from mirror.integrity import (
    BackgroundSha256,
    Digest,
    hash_bytes,
    hash_stream,
    require_digest,
)
from mirror.outbound import provenance
from mirror.outbound.delta import NO_BASE, Base, Choice, Offered, choose_bases, decide
from mirror.outbound.records import (
    by_sequence,
    carried_versions,
    newest_set,
    orphaned_default_chain,
    record_set,
)
from mirror.sites import DEFAULT_SITE, held_bases, waiting
from mirror.store.app import App
from mirror.store.bundles import version_ref
from mirror.store.models import Bundle, Version
from mirror.store.sitestate import published_objects, site_facts
from mirror.timestamps import utcnow
from mirror.transferset.format import (
    BLOBS,
    DELTA_ARCHIVE_FORMAT,
    MANIFEST,
    SHA256SUMS,
    SIGNATURE,
    TOOL_DIR,
    TOOL_NAME,
    DeltaEntry,
    Manifest,
    PartEntry,
    Progress,
    ToolEntry,
    iso_time,
    sha256sums_text,
)
from mirror.transferset.keys import SigningKey
from mirror.transferset.plan import (
    Candidate,
    PlannedBlob,
    SetPlan,
    check_part_limit,
    plan_set,
)
from mirror.transferset.token import open_signing_key
from mirror.transferset.trust import ChainLink
from mirror.units import format_size
from mirror.versions import VersionLabel, VersionRef

FREE_SPACE_MARGIN = 16 * 1024 * 1024


@dataclass(frozen=True)
class PackedItem:
    """A version the set carries: `ref` names the blob that carries it (its bundle, or its
    delta blob with `delta` set), cut into `parts` parts."""

    ref: VersionRef
    parts: int
    delta: DeltaEntry | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "domain": self.ref.domain,
            "version": str(self.ref.label),
            "sha256": self.ref.sha256,
            "size": self.ref.size,
            "parts": self.parts,
            "delta": self.delta.model_dump() if self.delta is not None else None,
        }


@dataclass(frozen=True)
class PackResult:
    path: Path | None
    sequence: int | None
    manifest_sha256: str | None
    key_id: str | None
    items: list[PackedItem] = field(default_factory=list)
    total_bytes: int = 0
    part_count: int = 0
    tool: str | None = None
    dry_run: bool = False
    versions: list[Choice] = field(default_factory=list)
    site: str = DEFAULT_SITE

    @property
    def nothing(self) -> bool:
        return not self.items

    def as_dict(self) -> dict[str, Any]:
        return {
            "dry_run": self.dry_run,
            "site": self.site,
            "path": str(self.path) if self.path else None,
            "sequence": self.sequence,
            "manifest_sha256": self.manifest_sha256,
            "key_id": self.key_id,
            "total_bytes": self.total_bytes,
            "part_count": self.part_count,
            "tool": self.tool,
            "items": [item.as_dict() for item in self.items],
            "versions": [choice.as_dict() for choice in self.versions],
        }


def signing_key_from(app: App) -> SigningKey:
    return signing_key_from_settings(app.settings)


def signing_key_from_settings(settings: Settings) -> SigningKey:
    path = settings.transfer.signing_key
    if path is None:
        raise ConfigError(
            "transfer.signing_key is not set",
            hint="create a key with `mirror keys generate --out PREFIX` and set it",
        )
    return open_signing_key(path)


@dataclass(frozen=True)
class Selection:
    """Which versions a pack carries (`select_versions`) and how (`full`: never deltas):
    those waiting for `site` (`mirror.sites.waiting`: not acknowledged there, not carried by
    a set for it that is not lost; or every one it takes with `include_all`, or those its
    set `from_set` carried), of `domain` when given. `site` None: the only site."""

    domain: str | None = None
    include_all: bool = False
    full: bool = False
    from_set: int | None = None
    site: str | None = None


def select_versions(
    session: Session, chosen: Selection, site: SiteSettings
) -> list[tuple[Version, Bundle]]:
    """The versions `chosen` names for `site`, with their bundles, by domain then label."""
    query = select(Version, Bundle).join(Bundle, Bundle.sha256 == Version.bundle_sha256)
    if chosen.domain:
        query = query.where(Version.domain == chosen.domain.lower())
    if site.domains is not None:
        query = query.where(Version.domain.in_(site.domains))
    if chosen.from_set is not None:
        carried = carried_versions(session, by_sequence(session, site.name, chosen.from_set))
        query = query.where(Version.id.in_([version.id for version in carried]))
    rows = [(version, bundle) for version, bundle in session.execute(query).all()]
    if chosen.from_set is None and not chosen.include_all:
        due = set(waiting(site_facts(session, site.name), [v.id for v, _ in rows]))
        rows = [(version, bundle) for version, bundle in rows if version.id in due]
    return sorted(rows, key=lambda row: (row[0].domain, VersionLabel(row[0].label)))


def disk_free(path: Path) -> int:
    return shutil.disk_usage(path).free


def check_out(out: Path) -> None:
    if out.is_symlink() or (out.exists() and (not out.is_dir() or any(out.iterdir()))):
        raise ConfigError(f"{out} already exists and is not empty; choose a new directory")
    if not out.parent.is_dir():
        raise ConfigError(f"directory {out.parent} does not exist")


@dataclass
class _Prepared:
    """The plan, every version's Choice, the index ids to record, the delta blobs by sha256."""

    plan: SetPlan | None
    choices: list[Choice]
    version_ids: list[int]
    delta_blobs: dict[str, IO[bytes]]
    site: str = DEFAULT_SITE
    """The site the set is for (the manifest names it only when `[[sites]]` are set)."""

    def result(self, **given: Any) -> PackResult:
        """What was (or, dry, would be) packed; `given` fills the rest of the PackResult."""
        plan = self.plan
        if plan is None:
            return PackResult(None, None, None, site=self.site, **given)
        parts = {blob.sha256: len(blob.parts) for blob in plan.blobs}
        return PackResult(
            sequence=plan.sequence,
            items=[PackedItem(c.ref, parts[c.ref.sha256], c.delta) for c in plan.items],
            total_bytes=plan.total_bytes,
            part_count=plan.part_count,
            versions=self.choices,
            site=self.site,
            **{"path": None, "manifest_sha256": None, **given},
        )


@dataclass(frozen=True)
class _Offer:
    """What the index offers for a set: each version's row, its Offered and its base (or
    why it has none), and the set the new one follows."""

    versions: list[Version]
    offered: list[Offered]
    bases: dict[int, Base | str]
    previous: ChainLink | None
    site: SiteSettings


def _refuse_an_orphaned_chain(session: Session, configured: list[str]) -> None:
    """Sets packed before `[[sites]]` belong to the site `default`; packing for a renamed site
    would start its chain again at 1, which that installation refuses after the disk crossed."""
    orphaned = orphaned_default_chain(session, configured)
    if orphaned is not None:
        raise ConfigError(
            f"sets up to {orphaned.sequence} were packed before [[sites]] were configured and "
            f"belong to the site {DEFAULT_SITE!r}, which no [[sites]] table names",
            hint=f'name the site that imported them name = "{DEFAULT_SITE}" in [[sites]], '
            "so its chain continues (README: several sites)",
        )


def _offer(app: App, chosen: Selection) -> _Offer:
    site = app.settings.site(chosen.site)
    with app.db.session() as session:
        _refuse_an_orphaned_chain(session, [s.name for s in app.settings.sites])
        rows = select_versions(session, chosen, site)
        offered = [
            Offered(
                version.id,
                version_ref(version, bundle),
                version.tree_sha256,
                iso_time(version.created_at),
            )
            for version, bundle in rows
        ]
        held = held_bases(site_facts(session, site.name), site.delta_bases)
        published = published_objects(session, site.name)
        bases = {} if chosen.full else choose_bases(session, app.store, offered, held, published)
        previous = newest_set(session, site.name)
    return _Offer([version for version, _ in rows], offered, bases, previous, site)


def _prepare(
    app: App,
    stack: contextlib.ExitStack,
    chosen: Selection,
    part_limit: int,
    *,
    keep_deltas: bool,
) -> _Prepared:
    """Decide how each version goes and plan the set; kept delta blobs close with `stack`."""
    offer = _offer(app, chosen)
    choices: list[Choice] = []
    candidates: list[Candidate] = []
    delta_blobs: dict[str, IO[bytes]] = {}
    for version, item in zip(offer.versions, offer.offered, strict=True):
        choice = decide(
            app.store,
            item,
            offer.bases.get(item.version_id, NO_BASE),
            ratio=app.settings.transfer.delta_max_ratio,
            full=chosen.full,
            keep=keep_deltas,
            limits=app.settings.store.archive_limits(),
        )
        if choice.delta is not None:
            stack.callback(choice.delta.close)
        choices.append(choice)
        candidates.append(_candidate(version, item, choice))
        if choice.as_delta and choice.delta is not None and choice.delta.file is not None:
            delta_blobs[choice.delta.sha256] = choice.delta.file
    return _Prepared(
        plan_set(candidates, offer.previous, part_limit),
        choices,
        [item.version_id for item in offer.offered],
        delta_blobs,
        offer.site.name,
    )


def _candidate(version: Version, offered: Offered, choice: Choice) -> Candidate:
    """What the plan carries for `offered`: its bundle, or the delta blob `choice` chose."""
    delta = choice.delta if choice.as_delta else None
    if delta is None:
        return Candidate(offered.ref, version.tree_sha256, version.created_at)
    carried = dataclasses.replace(
        offered.ref, sha256=delta.sha256, size=delta.size, format=DELTA_ARCHIVE_FORMAT
    )
    return Candidate(carried, version.tree_sha256, version.created_at, delta.entry)


def _check_free_space(out: Path, needed: int, free_space: Callable[[Path], int] | None) -> None:
    free = (free_space or disk_free)(out.parent)
    if free < needed + FREE_SPACE_MARGIN:
        raise no_room(f"not enough free space in {out.parent}", needed, free)


def _claim_room(
    out: Path,
    needed: int,
    on_total: Callable[[int], None] | None,
    free_space: Callable[[Path], int] | None,
) -> None:
    """Tell `on_total` the bytes the set will take, then check `out` has room for them."""
    if on_total is not None:
        on_total(needed)
    _check_free_space(out, needed, free_space)


def no_room(what: str, needed: int, free: int | None) -> TemporaryFailure:
    """The medium cannot hold the set (exit 75): where, what is free, what the set needs."""
    free_text = format_size(free) if free is not None else "an unknown amount"
    return TemporaryFailure(
        f"{what}: the set needs {format_size(needed)} and {format_size(FREE_SPACE_MARGIN)} "
        f"kept free, {free_text} is free; nothing was left behind",
        hint="free space there or use a larger medium (or --domain, --max-size to pack less), "
        "then run the same command again",
    )


def _part_limit(app: App, max_size: int | None) -> int:
    part_limit = max_size if max_size is not None else app.settings.transfer.max_size
    check_part_limit(part_limit)
    return part_limit


def pack(
    app: App,
    out: Path,
    chosen: Selection = Selection(),
    *,
    max_size: int | None = None,
    signing_key: SigningKey | None = None,
    now: Callable[[], datetime] = utcnow,
    on_progress: Progress | None = None,
    free_space: Callable[[Path], int] | None = None,
    on_total: Callable[[int], None] | None = None,
    tool: Path | None = None,
) -> PackResult:
    """Write a signed transfer set of the versions `chosen` names to `out` and record it;
    nothing to pack is not an error.

    `chosen.full` carries every version as its whole bundle; `chosen.from_set` the versions
    that set carried, again (module docstring). `on_total` hears the bytes `on_progress`
    will count, before the first of them. `tool` (a `mirror-tool-VERSION.tar` from
    `mirror bundle-self`) is carried as `tool/<name>`, listed and signed in the manifest
    like a blob."""
    out = out.absolute()
    part_limit = _part_limit(app, max_size)
    check_out(out)
    key = signing_key or signing_key_from(app)
    with contextlib.ExitStack() as stack:
        prepared = _prepare(app, stack, chosen, part_limit, keep_deltas=True)
        if (plan := prepared.plan) is None:
            return prepared.result(key_id=key.key_id)
        _claim_room(out, plan.total_bytes + _tool_size(tool), on_total, free_space)
        site = prepared.site if app.settings.sites else None
        writer = _SetWriter(app, plan, key, sources=prepared.delta_blobs, site=site)
        manifest, data = writer.write(out, tool=tool, created_at=now(), on_progress=on_progress)
    manifest_sha256 = _record(app, manifest, data, out, prepared.version_ids)
    return prepared.result(
        path=out,
        manifest_sha256=manifest_sha256,
        key_id=key.key_id,
        tool=manifest.tool.path if manifest.tool is not None else None,
    )


def _record(app: App, manifest: Manifest, data: bytes, out: Path, version_ids: list[int]) -> str:
    """Record the written set, whose manifest is `data`, and return the manifest's digest;
    the loser of two packs racing for its sequence removes it."""
    manifest_sha256 = hash_bytes(data)
    try:
        record_set(app, manifest, manifest_sha256, out, version_ids)
    except SqlIntegrityError:
        shutil.rmtree(out, ignore_errors=True)
        raise TemporaryFailure(
            f"another pack took sequence {manifest.sequence} at the same time; run again"
        ) from None
    return manifest_sha256


def dry_run(
    app: App,
    out: Path | None = None,
    chosen: Selection = Selection(),
    *,
    max_size: int | None = None,
    free_space: Callable[[Path], int] | None = None,
) -> PackResult:
    """What `pack` would carry, and how: every version's full size, delta size (or why it
    goes whole) and changes against its base. Writes nothing: no set, no record, no file
    (the deltas are only hashed). With `out`, the same checks of OUT and its free space."""
    part_limit = _part_limit(app, max_size)
    if out is not None:
        out = out.absolute()
        check_out(out)
    with contextlib.ExitStack() as stack:
        prepared = _prepare(app, stack, chosen, part_limit, keep_deltas=False)
    if out is not None and prepared.plan is not None:
        _check_free_space(out, prepared.plan.total_bytes, free_space)
    return prepared.result(key_id=None, dry_run=True)


class _SetWriter:
    """Writes a planned set into a staging directory and renames it into place."""

    def __init__(
        self,
        app: App,
        plan: SetPlan,
        key: SigningKey,
        *,
        sources: dict[str, IO[bytes]],
        site: str | None = None,
    ) -> None:
        self.site = site
        self.source_id = app.settings.transfer.source_id
        self.app = app
        self.plan = plan
        self.key = key
        self.sources = sources

    def write(
        self, out: Path, *, tool: Path | None, created_at: datetime, on_progress: Progress | None
    ) -> tuple[Manifest, bytes]:
        staging = out.parent / f"{out.name}.partial-{secrets.token_hex(4)}"
        try:
            result = self._stage(staging, tool, created_at, on_progress)
            os.rename(staging, out)
            fsync_dir(out.parent)
        except OSError as exc:
            shutil.rmtree(staging, ignore_errors=True)
            if is_disk_full(exc):
                raise no_room(
                    f"the disk holding {out.parent} filled up while the set was written",
                    self.plan.total_bytes + (tool.stat().st_size if tool is not None else 0),
                    free_bytes(out.parent),
                ) from None
            raise OperationFailed(
                f"writing the transfer set in {out.parent} failed: {exc.strerror or exc}; "
                "nothing was left behind"
            ) from None
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        return result

    def _stage(
        self, staging: Path, tool: Path | None, created_at: datetime, on_progress: Progress | None
    ) -> tuple[Manifest, bytes]:
        staging.mkdir()
        (staging / BLOBS).mkdir()
        parts = {
            blob.sha256: _write_blob(
                self.app, staging, blob, on_progress, self.sources.get(blob.sha256)
            )
            for blob in self.plan.blobs
        }
        fsync_dir(staging / BLOBS)
        tool_entry = _copy_tool(tool, staging, on_progress) if tool is not None else None
        manifest = self.plan.manifest(
            parts,
            created_at=created_at,
            source_id=self.source_id,
            key_id=self.key.key_id,
            tool=tool_entry,
            site=self.site,
        )
        manifest = provenance.attach(self.app, staging, manifest, self.key)
        data = manifest.to_bytes()
        signature = self.key.signature_document(data)
        _write_new(staging / MANIFEST, data)
        _write_new(staging / SIGNATURE, signature)
        _write_new(staging / SHA256SUMS, sha256sums_text(manifest, data, signature))
        fsync_dir(staging)
        return manifest, data


def _tool_size(tool: Path | None) -> int:
    """The size of the tool artefact `tool` to carry (0 for none); refused when it is no
    `mirror bundle-self` artefact."""
    if tool is None:
        return 0
    if not TOOL_NAME.match(tool.name) or not tool.is_file():
        raise ConfigError(
            f"{tool} is not a mirror tool artefact (mirror-tool-VERSION.tar)",
            hint="build one with `mirror bundle-self DIR`",
        )
    return tool.stat().st_size


def _copy_tool(tool: Path, staging: Path, on_progress: Progress | None) -> ToolEntry:
    (staging / TOOL_DIR).mkdir()
    with open(tool, "rb") as reader, open(staging / TOOL_DIR / tool.name, "xb") as writer:
        digest = hash_stream(reader, writer=writer, on_progress=on_progress)
        writer.flush()
        os.fsync(writer.fileno())
    fsync_dir(staging / TOOL_DIR)
    return ToolEntry(name=tool.name, size=digest.size, sha256=digest.sha256)


def _write_new(path: Path, data: bytes) -> None:
    with open(path, "xb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())


def _write_blob(
    app: App,
    staging: Path,
    blob: PlannedBlob,
    on_progress: Progress | None,
    source: IO[bytes] | None = None,
) -> list[PartEntry]:
    """Copy one blob (stored, or the open `source` of a delta blob) into its planned parts,
    hashing each part and the whole."""
    whole = BackgroundSha256() if len(blob.parts) > 1 else None
    entries: list[PartEntry] = []
    try:
        with contextlib.ExitStack() as stack:
            if source is None:
                source = stack.enter_context(open(app.store.open(blob.sha256), "rb"))
            source.seek(0)
            whole_hex = _copy_parts(source, staging, blob, whole, entries, on_progress)
    finally:
        if whole is not None:
            whole.close()
    copied = Digest(whole_hex, sum(entry.size for entry in entries))
    require_digest(
        f"stored blob {blob.sha256[:12]}…",
        copied,
        blob.sha256,
        blob.size,
        hint="the store does not match its index: run `mirror store verify`",
    )
    return entries


def _copy_parts(
    reader: IO[bytes],
    staging: Path,
    blob: PlannedBlob,
    whole: BackgroundSha256 | None,
    entries: list[PartEntry],
    on_progress: Progress | None,
) -> str:
    """Write the parts; returns the whole blob's sha256 (or "" when the source is too long)."""
    for part in blob.parts:
        entries.append(_copy_part(reader, staging, part.name, part.size, whole, on_progress))
    if reader.read(1):
        return ""
    return whole.hexdigest() if whole is not None else entries[0].sha256


def _copy_part(
    reader: Any,
    staging: Path,
    name: str,
    limit: int,
    whole: BackgroundSha256 | None,
    on_progress: Progress | None,
) -> PartEntry:
    source = _Teeing(reader, whole.update) if whole is not None else reader
    with open(staging / name, "xb") as writer:
        digest = hash_stream(source, writer=writer, limit=limit, on_progress=on_progress)
        writer.flush()
        os.fsync(writer.fileno())
    return PartEntry(name=name, size=digest.size, sha256=digest.sha256)


class _Teeing:
    """A reader that hands every chunk read to `also` as well (the whole blob's hash)."""

    def __init__(self, reader: Any, also: Callable[[bytes], None]) -> None:
        self._reader = reader
        self._also = also

    def read(self, size: int = -1, /) -> bytes:
        chunk: bytes = self._reader.read(size)
        if chunk:
            self._also(chunk)
        return chunk


@contextlib.contextmanager
def temporary_set_dir(root: Path, prefix: str) -> Iterator[Path]:
    """A not-yet-existing path under `root` for a set; it and its staging dirs go away after."""
    root.mkdir(parents=True, exist_ok=True)
    path = root / f"{prefix}-{secrets.token_hex(6)}"
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
        for stale in root.glob(f"{path.name}.partial-*"):
            shutil.rmtree(stale, ignore_errors=True)
