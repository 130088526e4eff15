"""replica heartbeats and the store binding

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-23 02:45:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import mirror.store.models

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("export_runs", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("heartbeat_at", mirror.store.models.UTCDateTime(timezone=True), nullable=True)
        )
    op.create_table(
        "index_info",
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("value", sa.String(length=255), nullable=False),
        sa.PrimaryKeyConstraint("name"),
    )


def downgrade() -> None:
    op.drop_table("index_info")
    with op.batch_alter_table("export_runs", schema=None) as batch_op:
        batch_op.drop_column("heartbeat_at")
