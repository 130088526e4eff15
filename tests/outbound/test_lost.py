"""`transfer lost` and `transfer resend` against a real index and real signed sets."""

from __future__ import annotations

from pathlib import Path

import pytest

from mirror.errors import ConfigError, IntegrityError, NotFound
from mirror.outbound.lost import mark_lost, resend
from mirror.outbound.pack import pack
from mirror.store.app import App
from mirror.store.models import Transfer
from mirror.store.sitestate import summaries_of
from mirror.timestamps import utcnow
from tests.fixtures.versions import add_version, deliver

DOCS = "docs.example.com"


def test_a_lost_sets_versions_wait_again_and_the_next_pack_carries_them(
    transfer_app: App, tmp_path: Path
) -> None:
    first, _ = add_version(transfer_app, DOCS, "2026-11-20")
    add_version(transfer_app, DOCS, "2026-11-21")
    pack(transfer_app, tmp_path / "s1")
    deliver(transfer_app, first)  # the receipt listed one of its two versions
    assert pack(transfer_app, tmp_path / "none").nothing
    lost = mark_lost(transfer_app, None, 1)
    assert (lost.site, lost.sequence, lost.already) == ("default", 1, False)
    assert lost.waiting_again == [(DOCS, "2026-11-21")]
    assert mark_lost(transfer_app, "default", 1).already  # again: nothing changes
    (summary,) = summaries_of(transfer_app, utcnow())
    assert summary.waiting == 1 and summary.lost == (1,)
    again = pack(transfer_app, tmp_path / "s2")
    assert again.sequence == 2 and [i.ref.label for i in again.items] == ["2026-11-21"]


def test_an_acknowledged_set_is_not_lost_and_an_unknown_one_is_not_found(
    transfer_app: App, tmp_path: Path
) -> None:
    add_version(transfer_app, DOCS, "2026-11-20")
    pack(transfer_app, tmp_path / "s1")
    with transfer_app.db.session() as session:
        (transfer,) = session.query(Transfer).all()
        transfer.acknowledged_at = utcnow()
    with pytest.raises(ConfigError, match="set 1 for site default was acknowledged"):
        mark_lost(transfer_app, None, 1)
    with pytest.raises(NotFound, match="no transfer set 7 was packed here"):
        mark_lost(transfer_app, None, 7)
    with pytest.raises(ConfigError, match="no site named 'prod'"):
        mark_lost(transfer_app, "prod", 1)


def test_resend_copies_the_set_and_refuses_a_damaged_source_naming_the_remedy(
    transfer_app: App, tmp_path: Path
) -> None:
    add_version(transfer_app, DOCS, "2026-11-20", payload_size=64 * 1024)
    packed = pack(transfer_app, tmp_path / "s1")
    copy = resend(transfer_app, None, 1, tmp_path / "copy")
    assert copy.manifest_sha256 == packed.manifest_sha256 and copy.path == tmp_path / "copy"
    with pytest.raises(ConfigError, match="already exists"):
        resend(transfer_app, None, 1, tmp_path / "copy")
    (part,) = (tmp_path / "s1" / "blobs").iterdir()
    part.chmod(0o644)
    data = bytearray(part.read_bytes())
    data[100] ^= 1
    part.write_bytes(bytes(data))
    with pytest.raises(IntegrityError, match=r"the copy of set 1 at .* is damaged") as caught:
        resend(transfer_app, None, 1, tmp_path / "again")
    assert caught.value.hint is not None
    assert "`mirror transfer lost --site default 1`" in caught.value.hint
    assert not (tmp_path / "again").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("again")] == []
