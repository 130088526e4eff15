"""Recovering the store after a crash: the steps that touch only the store and the index.

Each step is safe to repeat and safe to interrupt; `mirror.export.recovery.recover`
runs them in order at start-up, and `store verify --repair` reconciles orphans too:

- `upgrade_schema`: upgrade the index schema, tolerating a replica doing the same;
- `sweep_temp_files`: remove temp files under STORE/tmp that no unfinished run refers
  to (and that no live process on this host is still writing, judged by a pid in the
  name);
- `reconcile_orphan_blobs`: a file under blobs/ with no Bundle row is re-hashed; when
  the name matches the content and the archive passes the safety checks it is adopted
  (its Bundle row inserted), otherwise removed. A blob an unfinished run already names
  (its sha256) is left for that run to claim when it resumes.
"""

from __future__ import annotations

import errno
import logging
import os
import re
import time
from collections.abc import Callable

from sqlalchemy import select

from mirror.archive import inspect_archive
from mirror.errors import IntegrityError, TemporaryFailure
from mirror.fsutil import VALIDATOR_SUFFIX, pid_alive
from mirror.integrity import hash_file
from mirror.store import digests
from mirror.store.app import App
from mirror.store.blobs import NOT_A_FILE
from mirror.store.bundles import add_bundle
from mirror.store.inventory import named_by_active_runs
from mirror.store.models import Bundle, ExportRun

log = logging.getLogger(__name__)

_PID_IN_NAME = re.compile(r"^[A-Za-z]+-(\d+)-")


def sweep_temp_files(
    app: App,
    *,
    min_age: float = 0.0,
    is_alive: Callable[[int], bool] = pid_alive,
    clock: Callable[[], float] = time.time,
) -> list[str]:
    """Remove stale temp files; returns their names.

    The directory is listed before the index is read, so a partial file created by a
    concurrent run (which records its name before creating the file) is always seen
    as referenced.
    """
    candidates = app.store.temp_files()
    if not candidates:
        return []
    with app.db.session() as session:
        referenced = named_by_active_runs(session, ExportRun.partial_name)
    removed: list[str] = []
    now = clock()
    for path in candidates:
        if path.name in referenced or path.name.removesuffix(VALIDATOR_SUFFIX) in referenced:
            continue
        match = _PID_IN_NAME.match(path.name)
        if match and int(match.group(1)) != os.getpid() and is_alive(int(match.group(1))):
            continue
        try:
            if min_age > 0 and now - path.stat().st_mtime < min_age:
                continue
            path.unlink()
        except FileNotFoundError:
            continue
        removed.append(path.name)
        log.info("removed stale temp file", extra={"file": path.name})
    return removed


def reconcile_orphan_blobs(app: App) -> tuple[list[str], list[str]]:
    """Adopt or remove blobs that have no Bundle row; returns (adopted, removed)."""
    on_disk = list(app.store.iter_blobs())
    if not on_disk:
        return [], []
    with app.db.session() as session:
        indexed = set(session.scalars(select(Bundle.sha256)))
        claimed = named_by_active_runs(session, ExportRun.sha256)
    adopted: list[str] = []
    removed: list[str] = []
    for sha in on_disk:
        if sha in indexed or sha in claimed:
            continue
        path = app.store.blob_path(sha)
        reason = ""
        try:
            if not app.store.has(sha):  # a FIFO would be waited on, /dev/zero read without end
                reason = NOT_A_FILE
            elif hash_file(path).sha256 != sha:
                reason = "content does not match its name"
            else:
                report = inspect_archive(path, app.settings.store.archive_limits())
        except FileNotFoundError:
            continue
        except IntegrityError as exc:
            reason = f"archive refused: {exc}"
        if reason:
            if _removed(app, sha, reason):
                removed.append(sha)
            continue
        with app.db.session() as session:
            if not add_bundle(session, sha, path.stat().st_size, report):
                continue  # another process indexed it meanwhile
        digests.keep_report(app.store, sha, report)
        adopted.append(sha)
        log.info("adopted orphan blob", extra={"sha256": sha})
    return adopted, removed


def _removed(app: App, sha: str, reason: str) -> bool:
    """Remove orphan blob `sha`, logged; a directory with files in it under a blob's name is
    left for the operator (a warning naming it), not a start-up that fails."""
    try:
        app.store.remove(sha)
    except OSError as exc:
        if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
            raise
        left = f"{reason}, left: a directory with files in it ({app.store.blob_path(sha)})"
        log.warning("orphan blob not removed", extra={"sha256": sha, "reason": left})
        return False
    log.warning("removed orphan blob", extra={"sha256": sha, "reason": reason})
    return True


def upgrade_schema(app: App, attempts: int = 4, sleep: Callable[[float], None] = time.sleep) -> str:
    """Upgrade the index schema, tolerating another process doing the same at the same moment
    (replicas starting together): a failed attempt is retried once the other has finished."""
    for attempt in range(1, attempts + 1):
        try:
            return app.db.upgrade()
        except TemporaryFailure as exc:
            if attempt == attempts:
                raise
            log.warning("schema upgrade failed (attempt %d): %s; retrying", attempt, exc)
            sleep(0.5 * attempt)
    raise AssertionError("unreachable")
