"""sets sent over a one-way link: when and where (sent, not delivered)

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-24 09:30:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import mirror.store.models

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("transfers", schema=None) as batch_op:
        batch_op.add_column(sa.Column("sent_at", mirror.store.models.UTCDateTime(), nullable=True))
        batch_op.add_column(sa.Column("sent_to", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("transfers", schema=None) as batch_op:
        batch_op.drop_column("sent_to")
        batch_op.drop_column("sent_at")
