"""Every refusal that comes before a byte is published: the receipt's place, the bucket and
its writes, the set and the site it was packed for, its sequence in the bucket's chain, its
deltas' bases, the documents it will change, its provenance, the versions already there."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from mirror.airgap import layout, provenance, publish
from mirror.airgap.importer._conflicts import check_conflicts
from mirror.airgap.s3.objectstore import ObjectStore
from mirror.airgap.s3.probe import require_safe_writes
from mirror.errors import ConfigError, IntegrityError
from mirror.sites import DEFAULT_SITE
from mirror.transferset.format import Manifest
from mirror.transferset.keys import PublicKey
from mirror.transferset.reader import VerifiedSet, verify_provenance_files, verify_set


@dataclass(frozen=True)
class Asked:
    """What the operator asked of the import that admission answers for."""

    allow_replay: bool = False
    skip_imported: bool = False
    promoting: bool = False
    site: str = ""
    """This installation's name (`target.site`), when it knows one (`check_site`)."""
    work_dir: Path | None = None
    on_verify_progress: Callable[[int], None] | None = None
    record_keys: Mapping[str, PublicKey] | None = None
    """The receipt keys a verification record already there must verify with."""


@dataclass(frozen=True)
class Admitted:
    """A set `admit` let in: what publishing it needs."""

    verified: VerifiedSet
    replayed: bool
    notes: list[str]
    bases: publish.Bases
    provenance: Mapping[tuple[str, str], bytes]
    never_seen: list[int] = field(default_factory=list)
    already_imported: bool = False
    """This very set is in the bucket's import state, and the import was told to skip it."""


def admit(
    store: ObjectStore,
    set_dir: Path,
    trusted: Mapping[str, PublicKey],
    receipt: Path,
    asked: Asked,
) -> Admitted:
    """Every refusal that comes before a byte is published, in the order the module docstring
    names them; the set let in, or the one error that refuses it."""
    check_receipt_place(set_dir, receipt)
    store.check_access()
    require_safe_writes(store)
    verified = verify_set(set_dir, trusted, check_blobs=False, on_progress=asked.on_verify_progress)
    check_site(verified, asked.site)
    state = layout.read_import_state(store)
    check_chain_site(state, verified)
    if asked.skip_imported and imported_before(state, verified):
        return Admitted(verified, True, [], {}, {}, already_imported=True)
    notes: list[str] = []
    replayed = check_sequence(state, verified, allow_replay=asked.allow_replay, notes=notes)
    bases = publish.check_deltas(store, verified.manifest, work_dir=asked.work_dir)
    check_documents(store, verified.manifest, promoting=asked.promoting)
    notes.extend(tool_notes(verified.manifest))
    carried = check_provenance(store, set_dir, verified.manifest, trusted)
    check_versions_there(store, verified.manifest)
    check_conflicts(store, verified.manifest, bases, asked.record_keys)
    gap = [] if replayed else never_seen(state, verified.manifest.sequence)
    return Admitted(verified, replayed, notes, bases, carried, gap)


def check_receipt_place(set_dir: Path, receipt: Path) -> None:
    """A receipt that could not be written is refused before the bucket is asked anything."""
    if set_dir.is_dir() and not os.access(receipt.parent, os.W_OK):
        raise ConfigError(
            f"cannot write the receipt to {receipt.parent} (read-only?)",
            hint="pass --receipt PATH on a writable disk",
        )


def check_documents(store: ObjectStore, manifest: Manifest, *, promoting: bool) -> None:
    """Every index the set changes (and, promoting, every `current.json`) is read first: a
    damaged document refuses the set before any upload (exit 5)."""
    for domain in dict.fromkeys(item.domain for item in manifest.items):
        layout.read_index(store, domain)
        if promoting:
            layout.read_current(store, domain)


def tool_notes(manifest: Manifest) -> list[str]:
    """The mirror tool a set carries is for the operator, never for the bucket."""
    if manifest.tool is None:
        return []
    return [f"{manifest.tool.path} (the mirror tool) stays beside the set; it is not published"]


def check_provenance(
    store: ObjectStore, set_dir: Path, manifest: Manifest, trusted: Mapping[str, PublicKey]
) -> Mapping[tuple[str, str], bytes]:
    """The provenance statements the set carries, verified, and of them those to publish (by
    domain and version); a version's inventory its statement signs is checked too."""
    carried = verify_provenance_files(set_dir, manifest, trusted)
    carried = provenance.to_publish(store, manifest, carried, trusted)
    provenance.check_inventories(store, manifest, carried)
    return carried


def check_versions_there(store: ObjectStore, manifest: Manifest) -> None:
    """Refuse (exit 5), before anything is uploaded, an item whose version the bucket holds
    as another site (its manifest names another tree): publishing its bundle would leave an
    object no index names."""
    for item in manifest.items:
        stored = layout.read_version_manifest(store, item.domain, item.version)
        if stored is not None and stored.tree_sha256 != item.tree_sha256:
            key = layout.version_manifest_key(store, item.domain, item.version)
            raise IntegrityError(
                f"{store.bucket}/{key} describes tree {stored.tree_sha256[:12]}, and set "
                f"{manifest.sequence} carries {item.label} as tree {item.tree_sha256[:12]}; "
                "refused, nothing was published",
                hint="objects are never overwritten: find out which is right before removing one",
            )


def imported_before(state: layout.ImportState | None, verified: VerifiedSet) -> bool:
    """This very set (its sequence, with the same signed manifest) is in the import state."""
    history = state.history() if state is not None else {}
    return history.get(verified.manifest.sequence, "") == verified.manifest_sha256


def check_sequence(
    state: layout.ImportState | None,
    verified: VerifiedSet,
    *,
    allow_replay: bool,
    notes: list[str],
) -> bool:
    """Refuse replays, rollbacks and forks of the chain (exit 5); True when this is a replay."""
    manifest = verified.manifest
    if state is None:
        if manifest.previous_sequence is not None:
            notes.append(
                f"first import into this bucket; sets before {manifest.sequence} were not "
                "imported here"
            )
        return False
    last, last_hash = state.last_sequence, state.manifest_sha256
    history = state.history()
    sequence = manifest.sequence
    problem: str | None = None
    replay = False
    if imported_before(state, verified):
        replay = True
        problem = f"set {sequence} was already imported (replay)"
    elif sequence in history:
        problem = f"set {sequence} was already imported with a different manifest"
    elif sequence < last:
        problem = f"set {sequence} is older than the newest imported set {last} (rollback)"
    elif manifest.previous_sequence == last and manifest.previous_manifest_sha256 != last_hash:
        problem = (
            f"set {sequence} follows a set {last} whose manifest differs from the one "
            "imported here (broken chain)"
        )
    if problem is not None:
        if not allow_replay:
            raise IntegrityError(f"{problem}; refused", hint="pass --allow-replay if intended")
        notes.append(f"{problem}; allowed by --allow-replay")
        return replay
    notes.extend(_gap_notes(state, manifest))
    return False


def _gap_notes(state: layout.ImportState, manifest: Manifest) -> list[str]:
    """What a set that does not follow the newest imported one says (issue 22): which sets
    never arrived, and why importing this one is safe all the same."""
    last, sequence = state.last_sequence, manifest.sequence
    gap = never_seen(state, sequence)
    if gap:
        return [
            f"set{'s' if len(gap) > 1 else ''} {_sequences(gap)} never arrived here (the "
            f"newest set imported is {last}); importing set {sequence} is safe: each of its "
            "versions is whole or a delta whose base this bucket holds, checked before any "
            "upload"
        ]
    if manifest.previous_sequence != last:
        return [
            f"set {sequence} follows set {manifest.previous_sequence}, but the newest set "
            f"imported here is {last}: the sets in between were not imported"
        ]
    return []


def never_seen(state: layout.ImportState | None, sequence: int) -> list[int]:
    """The sequences between the newest imported here and `sequence` never imported here
    (a lost or skipped set of this site's chain)."""
    if state is None or sequence <= state.last_sequence + 1:
        return []
    history = state.history()
    return [n for n in range(state.last_sequence + 1, sequence) if n not in history]


def _sequences(numbers: list[int]) -> str:
    if len(numbers) > 5:
        return (
            f"{numbers[0]}-{numbers[-1]}"
            if numbers == list(range(numbers[0], numbers[-1] + 1))
            else ", ".join(map(str, numbers[:5])) + ", …"
        )
    return ", ".join(map(str, numbers))


def check_site(verified: VerifiedSet, site: str) -> None:
    """A set packed for another named site is refused (exit 5) when this installation knows
    its own name (`target.site`); a set that names no site (one implicit site), or an
    installation that names none, is not checked."""
    packed_for = verified.manifest.site
    if site and packed_for is not None and packed_for != site:
        raise IntegrityError(
            f"set {verified.manifest.sequence} was packed for site {packed_for}, and this is "
            f"site {site} (target.site); refused, nothing was published",
            hint=f"carry it to site {packed_for}; for this site run `mirror transfer pack "
            f"--site {site} OUT` on the connected side",
        )


def check_chain_site(state: layout.ImportState | None, verified: VerifiedSet) -> None:
    """A bucket follows one site's chain: a set of another site (exit 5) would publish into
    the wrong installation and make that site's own next set look like a rollback."""
    packed_for = verified.manifest.site or DEFAULT_SITE
    if state is None or state.site is None or state.site == packed_for:
        return
    raise IntegrityError(
        f"set {verified.manifest.sequence} was packed for site {packed_for}, and this bucket "
        f"follows site {state.site}'s chain (its newest set is {state.last_sequence}); "
        "refused, nothing was published",
        hint=f"carry it to site {packed_for}; for this bucket run `mirror transfer pack "
        f"--site {state.site} OUT` on the connected side",
    )
