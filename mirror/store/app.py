"""The application context: settings plus the edges built from them, made on first use."""

from __future__ import annotations

import functools
import logging

from mirror.config import Settings
from mirror.errors import NotFound
from mirror.logs import redacted_url
from mirror.store.binding import STORE_ID_FILE, StoreBinding, bind_store
from mirror.store.blobs import BlobStore
from mirror.store.db import Database

log = logging.getLogger(__name__)


class App:
    """Holds the settings and lazily opens the store and the index (upgrading its schema).

    `read_only`: never create the store directory or a SQLite index; NotFound
    (exit 3) when they do not exist yet, so a look around leaves nothing behind.
    """

    def __init__(
        self, settings: Settings, *, auto_upgrade: bool = True, read_only: bool = False
    ) -> None:
        self.settings = settings
        self.auto_upgrade = auto_upgrade
        self.read_only = read_only

    def _missing(self, what: str) -> NotFound:
        return NotFound(
            f"no store yet: {what} does not exist",
            hint="nothing was exported here; run `mirror export run DOMAIN` or the daemon first",
        )

    def check_index_kept(self) -> None:
        """A SQLite index gone from a store bound to one (`store-id`) was lost, not never made:
        said so (exit 3) before a new, empty index is made that the store would refuse."""
        root = self.settings.store.path
        index = root / "mirror.db"
        if not index.exists() and (root / STORE_ID_FILE).is_file():
            raise NotFound(
                f"the index {index} is missing, but the store at {root} holds the blobs of an "
                "index (its store-id); nothing was changed",
                hint=f"restore {index.name} from a backup into {root}; to start a new index "
                f"over these blobs instead, remove {root / STORE_ID_FILE} (the versions, sets "
                "and deliveries recorded are not recovered)",
            )

    @functools.cached_property
    def store(self) -> BlobStore:
        store = BlobStore(self.settings.store.path)
        if not self.read_only:
            store.ensure()
            return store
        store.check_not_a_file()
        if not store.root.is_dir():
            raise self._missing(str(store.root))
        return store

    @functools.cached_property
    def db(self) -> Database:
        if self.settings.store.database == "":
            self.check_index_kept()
            if self.read_only:
                BlobStore(self.settings.store.path).check_not_a_file()
                index = self.settings.store.path / "mirror.db"
                if not index.is_file():
                    raise self._missing(f"the index {index}")
            else:
                self.store.ensure()
        database = Database(self.settings.store.database_url())
        if self._nothing_yet(database):
            database.dispose()
            raise self._missing(f"the index at {redacted_url(database.url)}")
        if self.auto_upgrade and not database.is_current():
            log.info("upgrading the index schema")
            database.upgrade()
        return database

    def _nothing_yet(self, database: Database) -> bool:
        """A read-only look at a server index (PostgreSQL) never made and no store directory:
        nothing to show, and nothing to create (SQLite's file is checked above). A store that
        exists is left to the binding check, which names the index it belongs to."""
        if not self.read_only or database.url.startswith("sqlite"):
            return False
        return not self.settings.store.path.exists() and not database.exists()

    @functools.cached_property
    def binding(self) -> StoreBinding:
        """The store's binding to this index (made at first use; another index is refused)."""
        return bind_store(self.store.root, self.db)

    def close(self) -> None:
        if "db" in self.__dict__:
            self.db.dispose()
