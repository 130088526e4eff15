"""the vendor's pageCount (and the tolerance taken from it) as BIGINT, on both databases

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-27 22:10:00.000000

A count the vendor sends has one bound, the parser's (`mirror.vendorapi.client.parse_count`:
below BIGINT's limit). PostgreSQL's INTEGER is 32 bits, so a pageCount of 3,000,000,000
passed the parser and ended the run in `integer out of range` (issue 38); SQLite's INTEGER
already holds 64 bits, and a column's declared type there changes nothing it stores, so only
PostgreSQL's columns change (SQLite would copy the tables for nothing).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

_COLUMNS = (
    ("export_runs", "page_count"),
    ("site_checks", "page_count"),
    ("site_checks", "tolerance"),
)


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for table, column in _COLUMNS:
        op.alter_column(table, column, type_=sa.BigInteger(), existing_type=sa.Integer())


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for table, column in _COLUMNS:
        op.alter_column(table, column, type_=sa.Integer(), existing_type=sa.BigInteger())
