"""The index's rows of each air-gapped site, read into `mirror.sites.SiteFacts` (issue 22).

One place reads which sets were packed for a site and what it acknowledged, so pack,
ack, `transfer lost`, `mirror sites`, metrics and retention decide from the same facts.
The decisions themselves are `mirror.sites`'s, pure.

Promises: `site_facts` holds every set packed for the site (lost ones included) with the
versions each carried, and every version the site acknowledged; `published_objects` what
the site's receipts said it published of them; `first_delivered` is when
a version was first acknowledged by any site (the `delivered_at` that `store list` and
`status` show).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from mirror.config import SiteSettings
from mirror.sites import Held, PackedSet, SiteFacts, SiteSummary, summary, wanted_by
from mirror.store.app import App
from mirror.store.models import Delivery, Transfer, TransferItem, Version
from mirror.versions import VersionLabel


def site_facts(session: Session, site: str) -> SiteFacts:
    """Everything the index knows of `site` (module docstring)."""
    carried: dict[int, set[int]] = defaultdict(set)
    for transfer_id, version_id in session.execute(
        select(TransferItem.transfer_id, TransferItem.version_id)
        .join(Transfer, Transfer.id == TransferItem.transfer_id)
        .where(Transfer.site == site)
    ):
        carried[transfer_id].add(version_id)
    sets = tuple(
        PackedSet(
            sequence=transfer.sequence,
            created_at=transfer.created_at,
            acknowledged_at=transfer.acknowledged_at,
            lost_at=transfer.lost_at,
            sent_only=transfer.sent_at is not None,
            versions=frozenset(carried[transfer.id]),
        )
        for transfer in session.scalars(
            select(Transfer).where(Transfer.site == site).order_by(Transfer.sequence)
        )
    )
    delivered = frozenset(session.scalars(select(Delivery.version_id).where(Delivery.site == site)))
    return SiteFacts(site, sets, delivered)


def published_objects(session: Session, site: str) -> dict[int, str]:
    """version id -> the sha256 of the object `site` published of it, as its receipt named
    it (absent: not acknowledged, or acknowledged before receipts were recorded)."""
    query = select(Delivery.version_id, Delivery.published_sha256).where(Delivery.site == site)
    return {vid: sha256 for vid, sha256 in session.execute(query) if sha256 is not None}


def versions_by_domain(session: Session) -> dict[int, str]:
    """Every version's index id and domain."""
    return {vid: domain for vid, domain in session.execute(select(Version.id, Version.domain))}


def held_versions(session: Session, ids: Iterable[int] | None = None) -> list[Held]:
    """The versions (all, or `ids`) as `mirror.sites` sees them."""
    query = select(Version.id, Version.domain, Version.label)
    if ids is not None:
        query = query.where(Version.id.in_(list(ids)))
    return [Held(vid, domain, VersionLabel(label)) for vid, domain, label in session.execute(query)]


def first_delivered(session: Session, ids: Iterable[int] | None = None) -> dict[int, datetime]:
    """version id -> when a site first acknowledged it (absent: no site has yet)."""
    query = select(Delivery.version_id, func.min(Delivery.delivered_at)).group_by(
        Delivery.version_id
    )
    if ids is not None:
        query = query.where(Delivery.version_id.in_(list(ids)))
    return {vid: when for vid, when in session.execute(query)}


def site_summaries(
    session: Session, sites: Iterable[SiteSettings], now: datetime
) -> list[SiteSummary]:
    """What each configured site still needs, at `now` (`mirror.sites.summary`)."""
    domains = versions_by_domain(session)
    result = []
    for site in sites:
        wanted = wanted_by(site.domains, domains)
        listed = tuple(site.domains) if site.domains is not None else None
        result.append(summary(site_facts(session, site.name), wanted, now, listed))
    return result


def summaries_of(app: App, now: datetime) -> list[SiteSummary]:
    """Every configured site's summary, read in one session."""
    with app.db.session() as session:
        return site_summaries(session, app.settings.site_list(), now)
