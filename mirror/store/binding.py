"""One store, one index: the store directory names the index it belongs to.

At first use the index gets an id (row `index_id` in `index_info`) and the store a
file `STORE/store-id` holding `{"store_id", "index_id"}`, created atomically (written
aside, then hard-linked into place, so two replicas starting at once agree on one).
The index records the store id it uses. A store whose file names another index is
refused with ConfigError (exit 2): two indexes on one store would export every domain
twice and each call the other's blobs extra. Partial download names carry the index id
(`partial_name`), so they cannot collide either.
"""

from __future__ import annotations

import contextlib
import json
import os
import uuid
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import select

from mirror.errors import ConfigError
from mirror.fsutil import fsync_dir
from mirror.logs import redacted_url
from mirror.store.db import Database, dialect_insert
from mirror.store.models import IndexInfo

STORE_ID_FILE = "store-id"


@dataclass(frozen=True)
class StoreBinding:
    index_id: str
    store_id: str

    def partial_name(self, run_id: int) -> str:
        """A partial file name no other index could choose (never starts with digits)."""
        return f"run-i{self.index_id[:12]}-{run_id}.part"


def _put_if_absent(db: Database, name: str, value: str) -> str:
    """Insert `name = value` unless present; returns the stored value (the first writer wins)."""
    with db.session() as session:
        insert = dialect_insert(session, IndexInfo).values(name=name, value=value)
        session.execute(insert.on_conflict_do_nothing())
        return str(session.scalars(select(IndexInfo.value).where(IndexInfo.name == name)).one())


def _read_store_file(path: Path) -> dict[str, str]:
    try:
        document = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(
            f"cannot read the store id file {path}: {exc}",
            hint="restore it, or remove it to bind the store to this index",
        ) from None
    if not isinstance(document, dict) or not {"store_id", "index_id"} <= document.keys():
        raise ConfigError(f"the store id file {path} is not valid; remove it to bind again")
    return {"store_id": str(document["store_id"]), "index_id": str(document["index_id"])}


def _create_store_file(path: Path, index_id: str) -> None:
    aside = path.with_name(f".{STORE_ID_FILE}.{os.getpid()}.{uuid.uuid4().hex}")
    document = {"store_id": uuid.uuid4().hex, "index_id": index_id}
    with open(aside, "w") as handle:
        handle.write(json.dumps(document) + "\n")
        handle.flush()
        os.fsync(handle.fileno())
    try:
        with contextlib.suppress(FileExistsError):
            os.link(aside, path)
    finally:
        aside.unlink()
    fsync_dir(path.parent)


def bind_store(root: Path, db: Database) -> StoreBinding:
    """Bind the store at `root` to the index `db` (first use), or check that it is bound to it."""
    index_id = _put_if_absent(db, "index_id", uuid.uuid4().hex)
    path = root / STORE_ID_FILE
    if not path.exists():
        _create_store_file(path, index_id)
    document = _read_store_file(path)
    if document["index_id"] != index_id:
        raise ConfigError(
            f"the store at {root} belongs to another index (index {document['index_id'][:12]}), "
            f"not to {redacted_url(db.url)} (index {index_id[:12]})",
            hint="give each index its own store.path; one store shared by two indexes "
            "would export every domain twice",
        )
    _put_if_absent(db, "store_id", document["store_id"])
    with db.session() as session:
        row = session.get(IndexInfo, "store_id")
        if row is not None and row.value != document["store_id"]:
            row.value = document["store_id"]  # the store was recreated for this index
    return StoreBinding(index_id=index_id, store_id=document["store_id"])
