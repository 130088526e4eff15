"""Tables of the connected side's index.

A row says "stored" only after its blob is in place and verified (design
principle 1). `export_runs.active` with its partial unique index is what keeps
two processes, or two replicas on PostgreSQL, from running one domain twice.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import TypeDecorator

from mirror.timestamps import utcnow


class UTCDateTime(TypeDecorator[datetime]):
    """Timezone-aware UTC datetimes on every backend (SQLite stores them naive)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is not None and value.tzinfo is None:
            raise ValueError("naive datetime given; use timezone-aware UTC")
        return value.astimezone(UTC) if value is not None else None

    def process_result_value(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is not None and value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value


class Base(DeclarativeBase):
    pass


class RunState:
    """States of an export run, in order. Terminal ones end `active`."""

    PENDING = "pending"  # row claimed, vendor job not started yet
    STARTED = "started"  # vendor job id known, polling
    COMPLETED = "completed"  # vendor job completed, link not yet fetched
    DOWNLOADING = "downloading"  # link known, partial file under STORE/tmp
    DOWNLOADED = "downloaded"  # whole file on disk, sha256 known, not checked yet
    STORED = "stored"  # terminal: blob stored, new version assigned
    UNCHANGED = "unchanged"  # terminal: same content as the latest version
    FAILED = "failed"  # terminal: the vendor job or a check failed

    TERMINAL = frozenset({STORED, UNCHANGED, FAILED})
    SUCCESS = (STORED, UNCHANGED)  # the run ended with the site in the store


class Bundle(Base):
    """One archive in the blob store, by content hash."""

    __tablename__ = "bundles"

    sha256: Mapped[str] = mapped_column(String(64), primary_key=True)
    size: Mapped[int] = mapped_column(BigInteger)
    format: Mapped[str] = mapped_column(String(16))
    tree_sha256: Mapped[str] = mapped_column(String(64), index=True)
    file_count: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class ExportRun(Base):
    """One export cycle of one domain; every step's state is saved so it can resume."""

    __tablename__ = "export_runs"
    __table_args__ = (
        # Partial (WHERE active) on both databases, as migration 0001 creates it. Only
        # SQLite's option is named here: naming a dialect's option imports that dialect,
        # and PostgreSQL's brings all its drivers and asyncio into every start-up.
        Index("uq_export_runs_active_domain", "domain", unique=True, sqlite_where=text("active")),
        Index("ix_export_runs_domain_id", "domain", "id"),
        Index("ix_export_runs_vendor_started_at", "vendor_started_at"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    domain: Mapped[str] = mapped_column(String(253))
    active: Mapped[bool] = mapped_column(Boolean, default=True)
    state: Mapped[str] = mapped_column(String(16), default=RunState.PENDING)
    requested_version: Mapped[str | None] = mapped_column(String(128), nullable=True)
    requested_paths: Mapped[list[str] | None] = mapped_column(JSON, nullable=True)
    vendor_job_id: Mapped[str | None] = mapped_column(String(128), nullable=True)
    vendor_started_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    bundle_url: Mapped[str | None] = mapped_column(Text, nullable=True)
    bundle_expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    expected_size: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    partial_name: Mapped[str | None] = mapped_column(String(255), nullable=True)
    bytes_done: Mapped[int] = mapped_column(BigInteger, default=0)
    sha256: Mapped[str | None] = mapped_column(String(64), nullable=True)
    version_label: Mapped[str | None] = mapped_column(String(64), nullable=True)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    lease_owner: Mapped[str | None] = mapped_column(String(128), nullable=True)
    lease_expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    heartbeat_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, onupdate=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    page_count: Mapped[int | None] = mapped_column(BigInteger, nullable=True)


class Version(Base):
    """A domain's version label pointing at a stored bundle; labels are monotonic per domain."""

    __tablename__ = "versions"
    __table_args__ = (UniqueConstraint("domain", "label", name="uq_versions_domain_label"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    domain: Mapped[str] = mapped_column(String(253), index=True)
    label: Mapped[str] = mapped_column(String(64))
    bundle_sha256: Mapped[str] = mapped_column(ForeignKey("bundles.sha256"))
    tree_sha256: Mapped[str] = mapped_column(String(64))
    run_id: Mapped[int | None] = mapped_column(ForeignKey("export_runs.id"), nullable=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class SiteCheck(Base):
    """The completeness check of one downloaded bundle of a domain (`mirror.archive.completeness`):
    `passed` (a version was stored), `refused` (kept aside, its blob indexed, no version) or
    `accepted` (an operator's `store accept`, with the reason). `label` is the version's."""

    __tablename__ = "site_checks"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    domain: Mapped[str] = mapped_column(String(253), index=True)
    bundle_sha256: Mapped[str] = mapped_column(ForeignKey("bundles.sha256"), index=True)
    run_id: Mapped[int | None] = mapped_column(ForeignKey("export_runs.id"), nullable=True)
    status: Mapped[str] = mapped_column(String(16))
    label: Mapped[str | None] = mapped_column(String(64), nullable=True)
    job_id: Mapped[str | None] = mapped_column(String(128), nullable=True)
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    completed_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    page_count: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    pages: Mapped[int] = mapped_column(Integer)
    broken_links: Mapped[int] = mapped_column(Integer)
    missing_assets: Mapped[int] = mapped_column(Integer)
    tolerance: Mapped[int] = mapped_column(BigInteger, default=0)
    paths_named: Mapped[bool] = mapped_column(Boolean, default=False)
    report: Mapped[dict[str, Any]] = mapped_column(JSON)
    report_sha256: Mapped[str] = mapped_column(String(64))
    refusal: Mapped[str | None] = mapped_column(Text, nullable=True)
    reason: Mapped[str | None] = mapped_column(Text, nullable=True)
    accepted_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class Transfer(Base):
    """A transfer set that was packed for one site (and, once a receipt is acknowledged,
    delivered there); each site has its own chain of sequences (`mirror.sites`)."""

    __tablename__ = "transfers"
    __table_args__ = (UniqueConstraint("site", "sequence", name="uq_transfers_site_sequence"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    site: Mapped[str] = mapped_column(String(63), default="default")
    sequence: Mapped[int] = mapped_column(Integer)
    previous_sequence: Mapped[int | None] = mapped_column(Integer, nullable=True)
    manifest_sha256: Mapped[str] = mapped_column(String(64))
    path: Mapped[str] = mapped_column(Text)
    item_count: Mapped[int] = mapped_column(Integer)
    total_bytes: Mapped[int] = mapped_column(BigInteger)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    acknowledged_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    receipt_signature: Mapped[str | None] = mapped_column(Text, nullable=True)
    """How the receipt that acknowledged the set was signed ("verified (key …)", or the
    operator's explicit --accept-unsigned: "unsigned, accepted by --accept-unsigned")."""
    sent_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    sent_to: Mapped[str | None] = mapped_column(Text, nullable=True)
    """Sent over a one-way link (`transfer send`): nothing says it arrived until its
    receipt is acknowledged, so its versions are no delta base before that."""
    lost_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    """Marked lost (`transfer lost`): its unacknowledged versions wait again for the site
    and are no delta base there."""


class TransferItem(Base):
    __tablename__ = "transfer_items"

    transfer_id: Mapped[int] = mapped_column(ForeignKey("transfers.id"), primary_key=True)
    version_id: Mapped[int] = mapped_column(ForeignKey("versions.id"), primary_key=True)


class Delivery(Base):
    """A version a site acknowledged (a trusted receipt listed it): the one record of
    "delivered", per site. `transfer_id` is the set whose receipt said so;
    `published_sha256` and `published_size` the object the site published, as the receipt
    named it (None: acknowledged before receipts were recorded, or a receipt without a size)."""

    __tablename__ = "deliveries"

    site: Mapped[str] = mapped_column(String(63), primary_key=True)
    version_id: Mapped[int] = mapped_column(ForeignKey("versions.id"), primary_key=True)
    delivered_at: Mapped[datetime] = mapped_column(UTCDateTime)
    transfer_id: Mapped[int | None] = mapped_column(ForeignKey("transfers.id"), nullable=True)
    published_sha256: Mapped[str | None] = mapped_column(String(64), nullable=True)
    published_size: Mapped[int | None] = mapped_column(BigInteger, nullable=True)


class DomainSchedule(Base):
    """Per-domain scheduling state the daemon keeps across restarts and replicas."""

    __tablename__ = "domain_schedule"

    domain: Mapped[str] = mapped_column(String(253), primary_key=True)
    not_before: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    last_error: Mapped[str | None] = mapped_column(Text, nullable=True)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, onupdate=utcnow)


class IndexInfo(Base):
    """Facts about the index itself: its id and the id of the store it is bound to."""

    __tablename__ = "index_info"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[str] = mapped_column(String(255))
