"""A set sent over a one-way link is recorded as sent, not delivered, and its versions are
no delta base until a receipt is acknowledged (SQLite and PostgreSQL)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from mirror.config import settings_from_dict
from mirror.outbound.delta import NO_BASE, Base, Offered, choose_bases
from mirror.outbound.pack import Selection, pack
from mirror.outbound.sent import record_sent
from mirror.sites import DEFAULT_SITE, held_bases
from mirror.store.app import App
from mirror.store.bundles import version_ref
from mirror.store.models import Bundle, Transfer, Version
from mirror.store.sitestate import site_facts
from mirror.timestamps import utcnow
from mirror.transferset.format import iso_time
from tests.fixtures.s3 import transfer_config
from tests.fixtures.versions import add_sim_version

DOCS = "docs.example.com"
SITE: dict[str, Any] = {"pages": 40, "page_size": 4096, "changes_per_export": 2}


@pytest.fixture(params=["sqlite", "postgresql"])
def index_app(
    request: pytest.FixtureRequest, store_dir: Path, key_pair: tuple[Path, Path]
) -> Iterator[App]:
    document = transfer_config(store_dir, key_pair)
    if request.param == "postgresql":
        document["store"]["database"] = request.getfixturevalue("postgres_url")
    application = App(settings_from_dict(document))
    yield application
    application.close()


def bases_of(app: App, label: str) -> dict[str, str]:
    """{label: base label or reason} for `label` offered alone (as the pack offers it)."""
    with app.db.session() as session:
        version = session.execute(
            select(Version).where(Version.domain == DOCS, Version.label == label)
        ).scalar_one()
        bundle = session.get(Bundle, version.bundle_sha256)
        assert bundle is not None
        item = Offered(
            version.id, version_ref(version, bundle), version.tree_sha256,
            iso_time(version.created_at),
        )  # fmt: skip
        held = held_bases(site_facts(session, DEFAULT_SITE), "packed")
        found = choose_bases(session, app.store, [item], held)[version.id]
    return {label: found.label if isinstance(found, Base) else found}


def test_a_sent_set_is_no_base_until_its_receipt_is_acknowledged(
    index_app: App, tmp_path: Path
) -> None:
    app = index_app
    add_sim_version(app, DOCS, "2026-11-18", export_number=0, **SITE)
    add_sim_version(app, DOCS, "2026-11-19", export_number=1, **SITE)
    set_dir = tmp_path / "set-1"
    pack(app, set_dir, Selection(domain=DOCS))  # both versions: packed, carried on media so far
    add_sim_version(app, DOCS, "2026-11-20", export_number=2, **SITE)
    assert bases_of(app, "2026-11-20") == {"2026-11-20": "2026-11-19"}

    assert record_sent(app, set_dir, "10.9.0.2:7400") == 1
    assert bases_of(app, "2026-11-20") == {"2026-11-20": NO_BASE}
    with app.db.session() as session:
        transfer = session.execute(select(Transfer)).scalar_one()
        assert transfer.sent_to == "10.9.0.2:7400" and transfer.acknowledged_at is None
        transfer.acknowledged_at = utcnow()  # what `transfer ack` of its receipt does
    assert bases_of(app, "2026-11-20") == {"2026-11-20": "2026-11-19"}


def test_a_set_packed_elsewhere_is_not_recorded(index_app: App, tmp_path: Path) -> None:
    (tmp_path / "set").mkdir()
    (tmp_path / "set" / "manifest.json").write_bytes(b"{}")
    assert record_sent(index_app, tmp_path / "set", "10.9.0.2:7400") is None
