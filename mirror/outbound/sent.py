"""A set sent over a one-way link is recorded as sent, not delivered (issue 23).

Promises: `record_sent` marks the packed set whose manifest the directory holds with when
and where it was sent; it never marks a version delivered (only `transfer ack` of a signed
receipt does), and `delta.choose_bases` does not take a version as held on the strength
of a send alone. A set not packed here is not recorded (None).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from pathlib import Path

from sqlalchemy import select

from mirror.integrity import hash_bytes
from mirror.store.app import App
from mirror.store.models import Transfer
from mirror.timestamps import utcnow
from mirror.transferset.reader import read_manifest_bytes


def record_sent(
    app: App, set_dir: Path, to: str, *, now: Callable[[], datetime] = utcnow
) -> int | None:
    """The set's sequence once recorded as sent to `to`; None when it was not packed here."""
    digest = hash_bytes(read_manifest_bytes(set_dir))
    with app.db.session() as session:
        transfer = session.execute(
            select(Transfer).where(Transfer.manifest_sha256 == digest)
        ).scalar_one_or_none()
        if transfer is None:
            return None
        transfer.sent_at = now()
        transfer.sent_to = to
        return transfer.sequence
