"""several air-gapped sites: a site per transfer set, lost sets, deliveries per site

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-24 12:40:00.000000

Today's state moves to the implicit site `default` (issue 22): every packed set belongs
to it, and every version delivered (`versions.delivered_at`) becomes a delivery to it,
so a config without `[[sites]]` packs, acknowledges and keeps exactly as before.

SQLite changes a constraint or drops a column by copying the table; with foreign keys on
(they are, and cannot be turned off inside the one transaction an upgrade runs in) a table
whose rows are referenced cannot be dropped. So the rows that reference `transfers` and
`versions` (`transfer_items`) are held aside while the two tables are copied, and put back
after: all in the same transaction, nothing lost if it fails.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from mirror.store.models import UTCDateTime

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

# SQLite leaves the UNIQUE (sequence) of 0001 unnamed; the convention lets batch mode find
# it. PostgreSQL named it itself.
_CONVENTION = {"uq": "uq_%(table_name)s_%(column_0_name)s"}


def _old_unique() -> str:
    postgres = op.get_bind().dialect.name == "postgresql"
    return "transfers_sequence_key" if postgres else "uq_transfers_sequence"


def _hold_items() -> None:
    op.execute(
        "CREATE TABLE _mirror_0006_items AS SELECT transfer_id, version_id FROM transfer_items"
    )
    op.execute("DELETE FROM transfer_items")


def _restore_items() -> None:
    op.execute(
        "INSERT INTO transfer_items (transfer_id, version_id) "
        "SELECT transfer_id, version_id FROM _mirror_0006_items"
    )
    op.execute("DROP TABLE _mirror_0006_items")


def upgrade() -> None:
    _hold_items()
    op.execute(
        "CREATE TABLE _mirror_0006_delivered AS "
        "SELECT id, delivered_at FROM versions WHERE delivered_at IS NOT NULL"
    )
    with op.batch_alter_table("transfers", naming_convention=_CONVENTION) as batch_op:
        batch_op.add_column(
            sa.Column("site", sa.String(63), nullable=False, server_default="default")
        )
        batch_op.add_column(sa.Column("lost_at", UTCDateTime(), nullable=True))
        batch_op.drop_constraint(_old_unique(), type_="unique")
        batch_op.create_unique_constraint("uq_transfers_site_sequence", ["site", "sequence"])
    with op.batch_alter_table("versions") as batch_op:
        batch_op.drop_column("delivered_at")
    op.create_table(
        "deliveries",
        sa.Column("site", sa.String(63), primary_key=True),
        sa.Column("version_id", sa.Integer(), sa.ForeignKey("versions.id"), primary_key=True),
        sa.Column("delivered_at", UTCDateTime(), nullable=False),
        sa.Column("transfer_id", sa.Integer(), sa.ForeignKey("transfers.id"), nullable=True),
    )
    op.execute(
        "INSERT INTO deliveries (site, version_id, delivered_at) "
        "SELECT 'default', id, delivered_at FROM _mirror_0006_delivered"
    )
    op.execute("DROP TABLE _mirror_0006_delivered")
    _restore_items()


def downgrade() -> None:
    """Back to one chain: fails (nothing changed) when two sites used the same sequence."""
    with op.batch_alter_table("versions") as batch_op:
        batch_op.add_column(sa.Column("delivered_at", UTCDateTime(), nullable=True))
    op.execute(
        "UPDATE versions SET delivered_at = (SELECT MIN(d.delivered_at) FROM deliveries d "
        "WHERE d.version_id = versions.id)"
    )
    op.drop_table("deliveries")
    _hold_items()
    with op.batch_alter_table("transfers", naming_convention=_CONVENTION) as batch_op:
        batch_op.drop_constraint("uq_transfers_site_sequence", type_="unique")
        batch_op.drop_column("lost_at")
        batch_op.drop_column("site")
        batch_op.create_unique_constraint(_old_unique(), ["sequence"])
    _restore_items()
