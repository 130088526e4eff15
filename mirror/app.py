"""The application context: settings plus the edges built from them, made on first use."""

from __future__ import annotations

import functools
import logging

from mirror.binding import StoreBinding, bind_store
from mirror.config import Settings
from mirror.db import Database
from mirror.store import BlobStore

log = logging.getLogger(__name__)


class App:
    """Holds the settings and lazily opens the store and the index (upgrading its schema)."""

    def __init__(self, settings: Settings, *, auto_upgrade: bool = True) -> None:
        self.settings = settings
        self.auto_upgrade = auto_upgrade

    @functools.cached_property
    def store(self) -> BlobStore:
        store = BlobStore(self.settings.store.path)
        store.ensure()
        return store

    @functools.cached_property
    def db(self) -> Database:
        if self.settings.store.database == "":
            self.store.ensure()
        database = Database(self.settings.store.database_url())
        if self.auto_upgrade and not database.is_current():
            log.info("upgrading the index schema")
            database.upgrade()
        return database

    @functools.cached_property
    def binding(self) -> StoreBinding:
        """The store's binding to this index (made at first use; another index is refused)."""
        return bind_store(self.store.root, self.db)

    def close(self) -> None:
        if "db" in self.__dict__:
            self.db.dispose()
