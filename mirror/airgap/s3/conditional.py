"""One read-modify-write on bucket JSON: read with its ETag, change, write back conditionally.

Every pointer document the tool rewrites (`index.json`, `current.json`, the
import state) goes through `read_modify_write`, with one retry policy.

Promises:
- The write carries `If-Match` on the ETag that was read (`If-None-Match: *`
  when there was nothing), so a concurrent writer's change is never lost.
- On a lost race (WriteConflict) the document is read again and `change` is
  applied again, up to ATTEMPTS times in all; then the WriteConflict goes to
  the caller (TemporaryFailure, exit 75). Any other failure is not retried.
- `change` returning None means "nothing to write": the document read is returned.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Protocol

from mirror.errors import TemporaryFailure

log = logging.getLogger(__name__)

ATTEMPTS = 5

Document = dict[str, Any]


class WriteConflict(TemporaryFailure):
    """A conditional write lost a race: the object changed (or appeared) since it was read."""


class JsonStore(Protocol):
    def read_json(self, key: str) -> tuple[Document | None, str | None]: ...

    def write_json(self, key: str, document: Document, *, if_match: str | None) -> str: ...


def read_modify_write(
    store: JsonStore,
    key: str,
    change: Callable[[Document | None], Document | None],
    *,
    attempts: int = ATTEMPTS,
) -> Document | None:
    """Apply `change` to the document at `key` and write the result conditionally; returns
    what is in the bucket afterwards (the document written, or the one read when unchanged)."""
    for attempt in range(1, attempts + 1):
        current, etag = store.read_json(key)
        updated = change(current)
        if updated is None:
            return current
        try:
            store.write_json(key, updated, if_match=etag)
            return updated
        except WriteConflict:
            if attempt == attempts:
                raise
            log.info("%s changed meanwhile; reading it again (attempt %d)", key, attempt + 1)
    raise AssertionError("unreachable")
