"""Taking a run's finished download into the store: find it, check it, or forget it.

Promises:

- `downloaded_file` finds the finished download of blob `sha256`: the partial file
  (re-hashed first unless this process wrote it) or, after a crash between the move and
  the commit, the blob it was already moved to; None when neither holds those bytes.
- `check_download` passes the archive through `inspect_archive` before anything is kept
  (unless the download was inspected as it arrived: then it takes that report).
  A refused archive that already sits in the blob store with no index row is removed; a
  good download whose blob is damaged in the store repairs it (`repair_from_download`).
- `forget_unindexed_blob` removes a blob only when no `bundles` row names it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from mirror.archive import ArchiveReport, FileSink, inspect_archive
from mirror.errors import IntegrityError
from mirror.integrity import hash_file
from mirror.store.app import App
from mirror.store.maintenance.repair import repair_from_download
from mirror.store.models import Bundle

log = logging.getLogger(__name__)


def downloaded_file(app: App, partial: Path, sha256: str, *, rehash: bool) -> Path | None:
    """The finished download of `sha256` (the partial file or the blob), or None."""
    if partial.is_file():
        if not rehash or hash_file(partial).sha256 == sha256:
            return partial
        log.warning("partial file %s does not hash to %s; dropping it", partial, sha256[:12])
        return None
    if app.store.has(sha256):
        return app.store.blob_path(sha256)
    return None


def check_download(
    app: App,
    source: Path,
    sha256: str,
    size: int,
    *,
    partial: bool,
    inspected: ArchiveReport | None = None,
    observe: Callable[[], FileSink] | None = None,
) -> ArchiveReport:
    """The report of the archive at `source` (the partial file when `partial`, else the blob);
    `inspected` is its report from the download itself, when that inspected it."""
    try:
        limits = app.settings.store.archive_limits()
        report = inspected if inspected is not None else inspect_archive(source, limits, observe)
    except IntegrityError:
        if not partial:
            forget_unindexed_blob(app, sha256)
        raise
    if partial:
        repair_from_download(app, source, sha256, size, report)
    return report


def forget_unindexed_blob(app: App, sha256: str) -> None:
    """Remove blob `sha256` unless the index names it."""
    with app.db.session() as session:
        indexed = session.get(Bundle, sha256) is not None
    if not indexed:
        app.store.remove(sha256)
