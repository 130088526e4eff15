"""The bucket layout: the one owner of the key names and the JSON documents in the bucket.

    PREFIX/DOMAIN/VERSION/bundle.EXT      the bundle (written once)
    PREFIX/DOMAIN/VERSION/manifest.json   VersionManifest: what the bundle is (written once)
    PREFIX/DOMAIN/VERSION/provenance.intoto.json    the connected side's signed statement
    PREFIX/DOMAIN/VERSION/verification.intoto.json  this side's signed verification record
    PREFIX/DOMAIN/VERSION/inventory.spdx.json       the version's SPDX 2.3 inventory
    PREFIX/DOMAIN/index.json              Index: the complete versions of DOMAIN
    PREFIX/DOMAIN/current.json            Current: the promoted version and its history
    PREFIX/DOMAIN/gc.json                 GcJournal: versions `chart gc` is removing, and removed
    PREFIX/_mirror/import-state.json      ImportState: the newest imported set, a bounded history
    PREFIX/_mirror/import-results.json    ImportResults: how imports ended (for monitoring)
    PREFIX/_mirror/links.json             RenderedLinks: the links the values files hold

Promises:
- Every document is read through its pydantic model: a document of the wrong
  shape is IntegrityError (exit 5) naming the bucket key, never a KeyError or a
  silently skipped entry. Unknown fields (from a newer tool) are kept on rewrite.
- The pointer documents (index, current, gc journal, import state) are changed only through
  `conditional.read_modify_write`: one retry policy, no lost update.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal, Protocol, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from mirror.airgap.s3.conditional import JsonStore, read_modify_write
from mirror.errors import IntegrityError
from mirror.transferset.format import canonical_json

STATE_PARTS = ("_mirror", "import-state.json")
RESULTS_PARTS = ("_mirror", "import-results.json")
LINKS_PARTS = ("_mirror", "links.json")
INDEX = "index.json"
CURRENT = "current.json"
GC_JOURNAL = "gc.json"
VERSION_MANIFEST = "manifest.json"
PROVENANCE = "provenance.intoto.json"  # the version's signed statement (transferset/provenance)
RECORD = "verification.intoto.json"  # this side's verification record (airgap/verification)
INVENTORY = "inventory.spdx.json"  # the version's SPDX inventory (outbound/inventory), written
# with its provenance, which signs its sha256 (predicate `inventory.sha256`)
FORMAT: Literal[1] = 1
HISTORY_LIMIT = 200
MAX_IMPORT_HISTORY = 1000


class Bucket(JsonStore, Protocol):
    """What the layout needs of mirror.airgap.s3.objectstore.ObjectStore."""

    @property
    def bucket(self) -> str: ...

    def key(self, *parts: str) -> str: ...


def index_key(store: Bucket, domain: str) -> str:
    return store.key(domain, INDEX)


def current_key(store: Bucket, domain: str) -> str:
    return store.key(domain, CURRENT)


def gc_journal_key(store: Bucket, domain: str) -> str:
    return store.key(domain, GC_JOURNAL)


def version_manifest_key(store: Bucket, domain: str, version: str) -> str:
    return store.key(domain, version, VERSION_MANIFEST)


def provenance_key(store: Bucket, domain: str, version: str) -> str:
    return store.key(domain, version, PROVENANCE)


def record_key(store: Bucket, domain: str, version: str) -> str:
    return store.key(domain, version, RECORD)


def inventory_key(store: Bucket, domain: str, version: str) -> str:
    return store.key(domain, version, INVENTORY)


def bundle_key(store: Bucket, domain: str, version: str, archive_format: str) -> str:
    return store.key(domain, version, f"bundle.{archive_format}")


def state_key(store: Bucket) -> str:
    return store.key(*STATE_PARTS)


# `mirror serve` publishes the same names over HTTP (mirror.serve.routes parses them):
#     /domains/DOMAIN/VERSION/bundle.EXT   one version, immutable
#     /domains/DOMAIN/current/bundle.EXT   the domain's current version, moving
SERVED_ROOT = "domains"
MOVING = "current"  # no version label can be this (mirror.versions.is_label)
VERSION_HEADER = "Mirror-Version"  # the label of the version a bundle answer carries
SERVER_NAME = "mirror-serve"  # its Server header


def served_path(domain: str, version: str | None, archive_format: str) -> str:
    """The path of a version's bundle under `mirror serve` (`version` None: the moving one)."""
    return f"/{SERVED_ROOT}/{domain}/{version or MOVING}/bundle.{archive_format}"


def format_of(entry: IndexEntry) -> str:
    """The archive format of an index entry's bundle, from its object key (`bundle.EXT`)."""
    return entry.object.rsplit("/", 1)[-1].removeprefix("bundle.")


# ---- documents ------------------------------------------------------------------------------


class _Document(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True, strict=True)

    def as_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    def to_bytes(self) -> bytes:
        return canonical_json(self.as_dict()) + b"\n"


class VersionManifest(_Document):
    """`DOMAIN/VERSION/manifest.json`: the bundle object and what it must hash to."""

    format: Literal[1] = FORMAT
    domain: str
    version: str
    object: str
    sha256: str
    size: int = Field(ge=0)
    archive_format: str
    tree_sha256: str
    exported_at: str
    imported_at: str
    transfer_sequence: int
    source_id: str
    record: str | None = None
    """The key of the version's verification record, written before this manifest; None
    when the import signed none (before records existed, or no receipt key on this side):
    `chart check --provenance` refuses a version whose manifest names a record that is
    gone, and only warns about one that never had any."""

    def as_dict(self) -> dict[str, Any]:
        """Without `record` when there is none: a manifest written before records reads
        back exactly as it was."""
        document = super().as_dict()
        if document.get("record") is None:
            document.pop("record", None)
        return document


class IndexEntry(_Document):
    version: str
    sha256: str
    size: int = Field(ge=0)
    object: str
    manifest: str
    imported_at: str


class Index(_Document):
    """`DOMAIN/index.json`: only versions whose bundle and manifest are complete."""

    format: Literal[1] = FORMAT
    domain: str
    updated_at: str = ""
    versions: list[IndexEntry] = Field(default_factory=list)

    def labels(self) -> list[str]:
        return [entry.version for entry in self.versions]


class HistoryRecord(_Document):
    version: str
    action: Literal["promote", "rollback"] = "promote"
    at: str = ""


class Current(_Document):
    """`DOMAIN/current.json`: the live version and how it got there (bounded history)."""

    format: Literal[1] = FORMAT
    domain: str
    current: str | None = None
    history: list[HistoryRecord] = Field(default_factory=list)


class RemovedRecord(_Document):
    version: str
    at: str = ""


class GcJournal(_Document):
    """`DOMAIN/gc.json`: the versions a gc is removing (`pending`: written before the index
    entry goes, cleared after the objects are deleted) and a bounded record of removed ones."""

    format: Literal[1] = FORMAT
    domain: str
    pending: list[IndexEntry] = Field(default_factory=list)
    removed: list[RemovedRecord] = Field(default_factory=list)

    def removed_at(self, version: str) -> str | None:
        """When `version` was removed (the newest record), or None."""
        times = [record.at for record in self.removed if record.version == version]
        return times[-1] if times else None


class ImportRecord(_Document):
    sequence: int
    manifest_sha256: str
    source_id: str = ""
    at: str = ""


class ImportState(_Document):
    """`_mirror/import-state.json`: the newest imported set and a bounded history."""

    format: Literal[1] = FORMAT
    last_sequence: int
    manifest_sha256: str | None = None
    source_id: str | None = None
    imported: list[ImportRecord] = Field(default_factory=list)
    site: str | None = None
    """The site whose chain this bucket follows (`default` for sets that name none); None in
    a state written before sites, until its next import records it."""

    def history(self) -> dict[int, str | None]:
        """sequence -> manifest sha256 of every set recorded here (the newest included)."""
        known: dict[int, str | None] = {e.sequence: e.manifest_sha256 for e in self.imported}
        known.setdefault(self.last_sequence, self.manifest_sha256)
        return known

    def has(self, sequence: int, manifest_sha256: str | None) -> bool:
        return any(
            (e.sequence, e.manifest_sha256) == (sequence, manifest_sha256) for e in self.imported
        )


class ImportResults(_Document):
    """`_mirror/import-results.json`: how the imports into this bucket ended, for monitoring
    (`mirror serve` shows it as metrics; mirror.airgap.records writes it). `last_result` is
    one of RESULTS; `counts` are by result since the first import recorded here."""

    format: Literal[1] = FORMAT
    last_at: str
    last_result: str
    last_sequence: int | None = None
    last_success_at: str | None = None
    counts: dict[str, int] = Field(default_factory=dict)


RESULTS = ("imported", "already_imported", "refused", "failed")


class LinkRecord(_Document):
    version: str
    url_mode: str
    expires_at: str | None = None
    rendered_at: str = ""


class RenderedLinks(_Document):
    """`_mirror/links.json`: per domain, the link its values file holds and when it expires
    (None: it does not), as `chart refresh` last wrote or kept it."""

    format: Literal[1] = FORMAT
    domains: dict[str, LinkRecord] = Field(default_factory=dict)


D = TypeVar("D", bound=_Document)


def parse_document(model: type[D], document: Any, where: str) -> D:
    """The typed document; IntegrityError naming `where` and the first bad field otherwise."""
    try:
        return model.model_validate(document)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(part) for part in first["loc"]) or "(top level)"
        raise IntegrityError(
            f"{where} is not a valid {model.__name__} document ({field}: {first['msg']})"
        ) from None


def read_document(store: Bucket, key: str, model: type[D]) -> D | None:
    document, _ = store.read_json(key)
    return None if document is None else parse_document(model, document, f"{store.bucket}/{key}")


def update_document(
    store: Bucket, key: str, model: type[D], change: Callable[[D | None], D | None]
) -> D | None:
    """`change` the typed document at `key` with one conditional read-modify-write."""
    where = f"{store.bucket}/{key}"

    def apply(raw: dict[str, Any] | None) -> dict[str, Any] | None:
        current = None if raw is None else parse_document(model, raw, where)
        updated = change(current)
        return None if updated is None else updated.as_dict()

    result = read_modify_write(store, key, apply)
    return None if result is None else parse_document(model, result, where)


def read_index(store: Bucket, domain: str) -> Index | None:
    return read_document(store, index_key(store, domain), Index)


def read_current(store: Bucket, domain: str) -> Current | None:
    return read_document(store, current_key(store, domain), Current)


def read_version_manifest(store: Bucket, domain: str, version: str) -> VersionManifest | None:
    return read_document(store, version_manifest_key(store, domain, version), VersionManifest)


def read_gc_journal(store: Bucket, domain: str) -> GcJournal | None:
    return read_document(store, gc_journal_key(store, domain), GcJournal)


def read_import_state(store: Bucket) -> ImportState | None:
    return read_document(store, state_key(store), ImportState)


def read_import_results(store: Bucket) -> ImportResults | None:
    return read_document(store, store.key(*RESULTS_PARTS), ImportResults)


def read_rendered_links(store: Bucket) -> RenderedLinks | None:
    return read_document(store, store.key(*LINKS_PARTS), RenderedLinks)
