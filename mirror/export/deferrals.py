"""Writes to `domain_schedule`, as upserts so replicas racing on one domain never collide.

`defer` only ever moves `not_before` later (INSERT ... ON CONFLICT DO UPDATE ... WHERE,
on SQLite and PostgreSQL alike); `lock_domain` upserts the row to take its row lock
(PostgreSQL) or the write lock (SQLite), which serialises claims of one domain for the
rest of the transaction.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from sqlalchemy import update
from sqlalchemy.orm import Session

from mirror.store.db import Database, dialect_insert
from mirror.store.models import DomainSchedule
from mirror.timestamps import utcnow


def defer(db: Database, domains: Iterable[str], until: datetime, reason: str) -> None:
    """Set `not_before = until` for each domain unless it is already later."""
    rows = [
        {"domain": domain, "not_before": until, "last_error": reason, "updated_at": utcnow()}
        for domain in sorted(set(domains))
    ]
    if not rows:
        return
    with db.session() as session:
        statement = dialect_insert(session, DomainSchedule)
        table = DomainSchedule.__table__
        session.execute(
            statement.on_conflict_do_update(
                index_elements=[table.c.domain],
                set_={
                    "not_before": statement.excluded.not_before,
                    "last_error": statement.excluded.last_error,
                    "updated_at": statement.excluded.updated_at,
                },
                where=table.c.not_before.is_(None)
                | (table.c.not_before < statement.excluded.not_before),
            ),
            rows,
        )


def clear(db: Database, domain: str) -> None:
    """Forget a domain's deferral and error (its run ended well)."""
    with db.session() as session:
        session.execute(
            update(DomainSchedule)
            .where(
                DomainSchedule.domain == domain,
                DomainSchedule.not_before.is_not(None) | DomainSchedule.last_error.is_not(None),
            )
            .values(not_before=None, last_error=None, updated_at=utcnow())
            .execution_options(synchronize_session=False)
        )


def lock_domain(session: Session, domain: str) -> None:
    """Take the domain's schedule row lock for the rest of this transaction (creating the row)."""
    statement = dialect_insert(session, DomainSchedule)
    session.execute(
        statement.values(domain=domain, updated_at=utcnow()).on_conflict_do_update(
            index_elements=[DomainSchedule.__table__.c.domain],
            set_={"updated_at": statement.excluded.updated_at},
        )
    )
