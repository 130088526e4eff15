"""initial schema

Revision ID: 0001
Revises:
Create Date: 2026-11-22 02:41:48.553721
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import mirror.store.models

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "bundles",
        sa.Column("sha256", sa.String(length=64), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("format", sa.String(length=16), nullable=False),
        sa.Column("tree_sha256", sa.String(length=64), nullable=False),
        sa.Column("file_count", sa.Integer(), nullable=False),
        sa.Column("created_at", mirror.store.models.UTCDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("sha256"),
    )
    with op.batch_alter_table("bundles", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_bundles_tree_sha256"), ["tree_sha256"], unique=False)

    op.create_table(
        "domain_schedule",
        sa.Column("domain", sa.String(length=253), nullable=False),
        sa.Column("not_before", mirror.store.models.UTCDateTime(timezone=True), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("updated_at", mirror.store.models.UTCDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("domain"),
    )
    op.create_table(
        "export_runs",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("domain", sa.String(length=253), nullable=False),
        sa.Column("active", sa.Boolean(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("requested_version", sa.String(length=128), nullable=True),
        sa.Column("requested_paths", sa.JSON(), nullable=True),
        sa.Column("vendor_job_id", sa.String(length=128), nullable=True),
        sa.Column(
            "vendor_started_at", mirror.store.models.UTCDateTime(timezone=True), nullable=True
        ),
        sa.Column("bundle_url", sa.Text(), nullable=True),
        sa.Column(
            "bundle_expires_at", mirror.store.models.UTCDateTime(timezone=True), nullable=True
        ),
        sa.Column("expected_size", sa.BigInteger(), nullable=True),
        sa.Column("partial_name", sa.String(length=255), nullable=True),
        sa.Column("bytes_done", sa.BigInteger(), nullable=False),
        sa.Column("sha256", sa.String(length=64), nullable=True),
        sa.Column("version_label", sa.String(length=64), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("lease_owner", sa.String(length=128), nullable=True),
        sa.Column(
            "lease_expires_at", mirror.store.models.UTCDateTime(timezone=True), nullable=True
        ),
        sa.Column("created_at", mirror.store.models.UTCDateTime(timezone=True), nullable=False),
        sa.Column("updated_at", mirror.store.models.UTCDateTime(timezone=True), nullable=False),
        sa.Column("finished_at", mirror.store.models.UTCDateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("export_runs", schema=None) as batch_op:
        batch_op.create_index("ix_export_runs_domain_id", ["domain", "id"], unique=False)
        batch_op.create_index(
            "ix_export_runs_vendor_started_at", ["vendor_started_at"], unique=False
        )
        batch_op.create_index(
            "uq_export_runs_active_domain",
            ["domain"],
            unique=True,
            sqlite_where=sa.text("active"),
            postgresql_where=sa.text("active"),
        )

    op.create_table(
        "transfers",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("sequence", sa.Integer(), nullable=False),
        sa.Column("previous_sequence", sa.Integer(), nullable=True),
        sa.Column("manifest_sha256", sa.String(length=64), nullable=False),
        sa.Column("path", sa.Text(), nullable=False),
        sa.Column("item_count", sa.Integer(), nullable=False),
        sa.Column("total_bytes", sa.BigInteger(), nullable=False),
        sa.Column("created_at", mirror.store.models.UTCDateTime(timezone=True), nullable=False),
        sa.Column("acknowledged_at", mirror.store.models.UTCDateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("sequence"),
    )
    op.create_table(
        "versions",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("domain", sa.String(length=253), nullable=False),
        sa.Column("label", sa.String(length=64), nullable=False),
        sa.Column("bundle_sha256", sa.String(length=64), nullable=False),
        sa.Column("tree_sha256", sa.String(length=64), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=True),
        sa.Column("created_at", mirror.store.models.UTCDateTime(timezone=True), nullable=False),
        sa.Column("delivered_at", mirror.store.models.UTCDateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["bundle_sha256"],
            ["bundles.sha256"],
        ),
        sa.ForeignKeyConstraint(
            ["run_id"],
            ["export_runs.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("domain", "label", name="uq_versions_domain_label"),
    )
    with op.batch_alter_table("versions", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_versions_domain"), ["domain"], unique=False)

    op.create_table(
        "transfer_items",
        sa.Column("transfer_id", sa.Integer(), nullable=False),
        sa.Column("version_id", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["transfer_id"],
            ["transfers.id"],
        ),
        sa.ForeignKeyConstraint(
            ["version_id"],
            ["versions.id"],
        ),
        sa.PrimaryKeyConstraint("transfer_id", "version_id"),
    )


def downgrade() -> None:
    op.drop_table("transfer_items")
    with op.batch_alter_table("versions", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_versions_domain"))

    op.drop_table("versions")
    op.drop_table("transfers")
    with op.batch_alter_table("export_runs", schema=None) as batch_op:
        batch_op.drop_index(
            "uq_export_runs_active_domain",
            sqlite_where=sa.text("active"),
            postgresql_where=sa.text("active"),
        )
        batch_op.drop_index("ix_export_runs_vendor_started_at")
        batch_op.drop_index("ix_export_runs_domain_id")

    op.drop_table("export_runs")
    op.drop_table("domain_schedule")
    with op.batch_alter_table("bundles", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_bundles_tree_sha256"))

    op.drop_table("bundles")
