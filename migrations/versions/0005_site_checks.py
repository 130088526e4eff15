"""completeness checks of downloaded bundles, and the vendor's last reported pageCount

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-24 09:40:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from mirror.store.models import UTCDateTime

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("export_runs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("page_count", sa.Integer(), nullable=True))
    op.create_table(
        "site_checks",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("domain", sa.String(253), nullable=False),
        sa.Column("bundle_sha256", sa.String(64), sa.ForeignKey("bundles.sha256"), nullable=False),
        sa.Column("run_id", sa.Integer(), sa.ForeignKey("export_runs.id"), nullable=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("label", sa.String(64), nullable=True),
        sa.Column("job_id", sa.String(128), nullable=True),
        sa.Column("started_at", UTCDateTime(timezone=True), nullable=True),
        sa.Column("completed_at", UTCDateTime(timezone=True), nullable=True),
        sa.Column("page_count", sa.Integer(), nullable=True),
        sa.Column("pages", sa.Integer(), nullable=False),
        sa.Column("broken_links", sa.Integer(), nullable=False),
        sa.Column("missing_assets", sa.Integer(), nullable=False),
        sa.Column("tolerance", sa.Integer(), nullable=False),
        sa.Column("paths_named", sa.Boolean(), nullable=False),
        sa.Column("report", sa.JSON(), nullable=False),
        sa.Column("report_sha256", sa.String(64), nullable=False),
        sa.Column("refusal", sa.Text(), nullable=True),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("accepted_at", UTCDateTime(timezone=True), nullable=True),
        sa.Column("created_at", UTCDateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_site_checks_domain", "site_checks", ["domain"])
    op.create_index("ix_site_checks_bundle_sha256", "site_checks", ["bundle_sha256"])


def downgrade() -> None:
    op.drop_index("ix_site_checks_bundle_sha256", table_name="site_checks")
    op.drop_index("ix_site_checks_domain", table_name="site_checks")
    op.drop_table("site_checks")
    with op.batch_alter_table("export_runs", schema=None) as batch_op:
        batch_op.drop_column("page_count")
