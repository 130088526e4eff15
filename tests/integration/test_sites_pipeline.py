"""Several air-gapped sites fed from one connected host (issue 22), as operators run them.

A simulated week (an injected clock): two domains export daily and every other day; three
sites, each its own bucket on the real S3 server and its own receipt key, are visited at
their own pace, one of them bringing its receipt back only at the next visit, one taking
a single domain. Retention runs after each day. Every site ends with every version it
takes, every delta went against a version that site had acknowledged, and no version a
site still needed was removed.

Then, through the command line: a set lost in the middle of a site's chain is recovered by
`transfer lost` and the next pack, and the site's bucket ends complete."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from random import Random
from typing import Any

import pytest

from mirror.airgap import layout
from mirror.airgap.importer import import_set
from mirror.airgap.s3.objectstore import ObjectStore
from mirror.config import TargetSettings, settings_from_dict
from mirror.outbound.ack import ack
from mirror.outbound.pack import Selection, pack
from mirror.store.app import App
from mirror.store.models import Version
from mirror.store.retention import gc
from mirror.store.sitestate import summaries_of
from mirror.transferset.format import RECEIPT
from mirror.transferset.keys import load_signing_key, load_trusted_keys
from mirror.versions import VersionLabel
from tests.fixtures.cli import mirror_cli, write_config
from tests.fixtures.s3 import empty_bucket, new_key_pair, transfer_config
from tests.fixtures.versions import add_tree_version, delivered_to

DOCS, API = "docs.example.com", "api.example.com"
MONDAY = datetime(2026, 11, 16, 2, 0, tzinfo=UTC)
FILES = 40


def tree(day: int, domain: str) -> dict[str, bytes]:
    """A site of FILES incompressible pages of which one changes each day: a delta is small."""
    files = {f"page-{n}.html": Random(f"{domain}/{n}").randbytes(4096) for n in range(FILES)}
    files[f"page-{day % FILES}.html"] = os.urandom(1024)
    return files


def receipt_keys(root: Path, name: str) -> tuple[Path, Path]:
    """A site's own receipt key pair, under root/NAME."""
    (root / name).mkdir(exist_ok=True)
    return new_key_pair(root / name)


@dataclass
class Clock:
    now_at: datetime = MONDAY

    def now(self) -> datetime:
        return self.now_at


@dataclass
class Site:
    """One air-gapped installation: its bucket, its receipt key, how often it is visited."""

    name: str
    store: ObjectStore
    receipt_key: Path
    every: int
    late_receipt: bool = False
    domains: list[str] | None = None
    pending: list[Path] = field(default_factory=list)
    acked: set[tuple[str, str]] = field(default_factory=set)
    deltas: int = 0


@pytest.fixture
def buckets(s3_admin_client: Any) -> Iterator[list[str]]:
    names = [f"mirror-test-{uuid.uuid4().hex[:12]}" for _ in range(3)]
    for name in names:
        s3_admin_client.create_bucket(Bucket=name)
    yield names
    for name in names:
        empty_bucket(s3_admin_client, name)
        s3_admin_client.delete_bucket(Bucket=name)


def test_three_sites_over_a_week_each_end_complete(
    tmp_path: Path, key_pair: tuple[Path, Path], s3_client: Any, buckets: list[str]
) -> None:
    keys = {name: receipt_keys(tmp_path, name) for name in ("staging", "prod", "enclave")}
    sites = [
        Site("staging", ObjectStore(s3_client, buckets[0], "p"), keys["staging"][0], every=1),
        Site("prod", ObjectStore(s3_client, buckets[1], "p"), keys["prod"][0], 2, True),
        Site("enclave", ObjectStore(s3_client, buckets[2], "p"), keys["enclave"][0], 3,
             domains=[DOCS]),
    ]  # fmt: skip
    document = transfer_config(tmp_path / "store", key_pair)
    document["sites"] = [
        {"name": s.name, "trusted_keys": [str(keys[s.name][1])], "domains": s.domains}
        for s in sites
    ]
    for entry in document["sites"]:
        if entry["domains"] is None:
            del entry["domains"]
    clock = Clock()
    created: set[tuple[str, str]] = set()
    app = App(settings_from_dict(document))
    try:
        for day in range(7):
            clock.now_at = MONDAY + timedelta(days=day)
            for domain in (DOCS, API) if day % 2 == 0 else (DOCS,):
                label = f"2026-11-{16 + day}"
                add_tree_version(app, domain, label, tree(day, domain), exported_at=clock.now_at)
                created.add((domain, label))
            for site in sites:
                if day % site.every == 0:
                    visit(app, site, tmp_path, clock, key_pair)
            gc(app, keep=1)
            assert_nothing_needed_was_removed(app, sites, created)
        clock.now_at = MONDAY + timedelta(days=7)
        for site in sites:
            visit(app, site, tmp_path, clock, key_pair)
            site.late_receipt = False
            visit(app, site, tmp_path, clock, key_pair)  # the last receipts come back
        for site in sites:
            assert_complete(app, site)
        summaries = {s.name: s for s in summaries_of(app, clock.now())}
        assert all(s.waiting == 0 and s.oldest_unacknowledged is None for s in summaries.values())
        assert summaries["staging"].last_packed is not None
        assert [summaries[s.name].last_packed.sequence for s in sites] == [7, 4, 3]  # type: ignore[union-attr]
        assert all(site.deltas > 0 for site in sites)
        gc(app, keep=1)
        with app.db.session() as session:
            assert session.query(Version).count() == 2  # nobody needs the old ones any more
    finally:
        app.close()


def visit(app: App, site: Site, root: Path, clock: Clock, key_pair: tuple[Path, Path]) -> None:
    """The operator's trip to `site`: acknowledge the receipts brought back (a late site's
    comes back a visit later: the set packed last time is not acknowledged yet), pack what
    the site lacks, import it there, and (prompt sites) bring its receipt back now."""
    back = site.pending[:-1] if site.late_receipt else site.pending
    for receipt in back:
        site.acked.update(ack(app, receipt, now=clock.now).marked)
    del site.pending[: len(back)]
    acknowledged = delivered_to(app, site.name)
    assert acknowledged <= site.acked  # retention drops the rows of versions it removed
    out = root / site.name / f"set-{uuid.uuid4().hex[:8]}"
    packed = pack(app, out, Selection(site=site.name), now=clock.now)
    if packed.nothing:
        return
    for item in packed.items:
        if item.delta is not None:
            base = (item.ref.domain, item.delta.base_version)
            assert base in acknowledged, (site.name, item.ref.label)
            site.deltas += 1
    imported = import_set(
        site.store,
        out,
        load_trusted_keys([key_pair[1]]),
        receipt_key=load_signing_key(site.receipt_key),
        now=clock.now,
        site=site.name,
    )
    assert imported.site == site.name and imported.sequence == packed.sequence
    if site.late_receipt:
        site.pending.append(out / RECEIPT)
    else:
        site.acked.update(ack(app, out / RECEIPT, now=clock.now).marked)


def assert_nothing_needed_was_removed(
    app: App, sites: list[Site], created: set[tuple[str, str]]
) -> None:
    """Every version a site takes and has not acknowledged, and its newest acknowledged
    one per domain (its next delta base), is still in the index and the store."""
    with app.db.session() as session:
        stored = {(v.domain, v.label): v.bundle_sha256 for v in session.query(Version)}
    for site in sites:
        taken = {(d, label) for d, label in created if site.domains is None or d in site.domains}
        for version in sorted(taken - site.acked):
            assert version in stored, (site.name, version, "removed before it was received")
            assert app.store.has(stored[version])
        for domain in {d for d, _ in site.acked}:
            newest = max(VersionLabel(label) for d, label in site.acked if d == domain)
            assert (domain, str(newest)) in stored, (site.name, domain, "its delta base")


def assert_complete(app: App, site: Site) -> None:
    """The site's bucket lists every version of each domain it takes, one per day."""
    for domain in site.domains or [DOCS, API]:
        index = layout.read_index(site.store, domain)
        assert index is not None
        days = range(7) if domain == DOCS else range(0, 7, 2)
        assert sorted(entry.version for entry in index.versions) == [
            f"2026-11-{16 + day}" for day in days
        ], site.name


# ---- a lost set, recovered from the command line -------------------------------------------


def test_a_set_lost_mid_chain_is_recovered_by_transfer_lost_and_the_next_pack(
    tmp_path: Path,
    key_pair: tuple[Path, Path],
    target_settings: TargetSettings,
    object_store: ObjectStore,
    s3_client: Any,
) -> None:
    staging_key, staging_pub = receipt_keys(tmp_path, "staging-side")
    prod_pub = receipt_keys(tmp_path, "prod-side")[1]
    usb = tmp_path / "usb"
    usb.mkdir()
    connected_document = transfer_config(tmp_path / "store", key_pair)
    connected_document["sites"] = [
        {"name": "staging", "trusted_keys": [str(staging_pub)]},
        {"name": "prod", "trusted_keys": [str(prod_pub)]},
    ]
    connected = write_config(tmp_path / "connected.toml", connected_document)
    airgap_document = transfer_config(
        tmp_path / "unused", (staging_key, key_pair[1]), target_settings
    )
    airgap_document["target"]["site"] = "staging"
    airgap = write_config(tmp_path / "staging.toml", airgap_document)

    def run(config: Path, *args: str, code: int = 0) -> Any:
        """`mirror --config CONFIG ARGS` must end with `code`; its JSON document, if asked."""
        done = mirror_cli("--config", str(config), *args)
        assert done.returncode == code, done.stderr
        return json.loads(done.stdout) if "--json" in args and code == 0 else done

    trusted = load_trusted_keys([key_pair[1]])
    receipt_key = load_signing_key(staging_key)
    staging = Selection(site="staging")
    app = App(settings_from_dict(connected_document))
    try:  # a week as usual: set 1 arrives, set 2 goes on a disk that is lost, set 3 follows
        v1, v2, v3 = (f"2026-11-{20 + day}" for day in range(3))
        add_tree_version(app, DOCS, v1, tree(0, DOCS))
        pack(app, usb / "s1", staging)
        import_set(object_store, usb / "s1", trusted, receipt_key=receipt_key, site="staging")
        ack(app, usb / "s1" / RECEIPT)
        add_tree_version(app, DOCS, v2, tree(1, DOCS))
        pack(app, usb / "s2", staging)
        add_tree_version(app, DOCS, v3, tree(2, DOCS))
        third = pack(app, usb / "s3", staging)
        assert [(i.ref.label, i.delta and i.delta.base_version) for i in third.items] == [(v3, v1)]
        pack(app, usb / "p1", Selection(site="prod"))
    finally:
        app.close()
    (usb / "s2").rename(tmp_path / "the-disk-that-fell-in-the-river")

    gap = run(airgap, "--json", "transfer", "import", str(usb / "s3"))
    assert gap["never_seen"] == [2] and gap["site"] == "staging"
    assert any("set 2 never arrived here" in note and "is safe" in note for note in gap["notes"])
    run(connected, "transfer", "ack", str(usb / "s3" / RECEIPT))

    gone = run(connected, "transfer", "resend", "--site", "staging", "2", str(usb / "a"), code=3)
    line = gone.stderr.strip()
    assert line.startswith("mirror: error: set 2 for site staging is no longer at ")
    assert (
        "`mirror transfer lost --site staging 2`, then `mirror transfer pack --site staging OUT`"
        in line
    )  # the remedy, run next
    lost = run(connected, "--json", "transfer", "lost", "--site", "staging", "2")
    assert lost["waiting_again"] == [{"domain": DOCS, "version": v2}]
    assert not lost["already_lost"]
    sites = {s["name"]: s for s in run(connected, "--json", "sites")["sites"]}
    assert sites["staging"]["waiting"] == 1 and sites["staging"]["lost"] == [2]
    assert sites["staging"]["oldest_unacknowledged"] is None
    assert sites["prod"]["waiting"] == 0 and sites["prod"]["last_packed"]["sequence"] == 1

    fourth = run(connected, "--json", "transfer", "pack", "--site", "staging", str(usb / "s4"))
    assert fourth["sequence"] == 4
    assert [(i["version"], i["delta"]["base_version"]) for i in fourth["items"]] == [(v2, v1)]
    run(airgap, "transfer", "import", str(usb / "s4"))
    index = layout.read_index(object_store, DOCS)
    assert index is not None
    assert sorted(entry.version for entry in index.versions) == [v1, v2, v3]

    elsewhere = run(airgap, "transfer", "import", str(usb / "p1"), code=5)
    assert elsewhere.stderr.strip().startswith(
        "mirror: error: set 1 was packed for site prod, and this is site staging"
    )
