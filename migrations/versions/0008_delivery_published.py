"""what each site published: the object's digest and size a delivery's receipt named

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-27 22:40:00.000000

`transfer ack` records, per delivery, the sha256 and size of the object the site's import
published (the signed receipt says them), so the pack decides a delta's base object from
that fact instead of guessing it (docs/delta.md). Deliveries acknowledged before this have
neither (NULL): the pack keeps its older rule for them. Two nullable columns: SQLite adds
them in place, no table copy.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("deliveries", sa.Column("published_sha256", sa.String(64), nullable=True))
    op.add_column("deliveries", sa.Column("published_size", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("deliveries") as batch_op:
        batch_op.drop_column("published_size")
        batch_op.drop_column("published_sha256")
