"""Importing spliced deltas (mirror/airgap/publish/ through the import), against the S3
server with real archives: simulator sites and hand-made trees, real signed sets."""

from __future__ import annotations

import concurrent.futures
import dataclasses
import functools
import hashlib
import io
import json
import os
import shutil
import tarfile
from pathlib import Path
from typing import Any

import httpx
import pytest

from mirror.airgap import chart, layout
from mirror.airgap.importer import import_set
from mirror.airgap.publish import import_bytes
from mirror.airgap.s3.objectstore import ObjectStore
from mirror.archive import ArchiveLimits, inspect_archive, tree_hash
from mirror.config import TargetSettings
from mirror.errors import IntegrityError, MirrorError
from mirror.sim.site import SiteSpec, build_bundle
from mirror.transferset.format import RECEIPT
from mirror.transferset.keys import SigningKey
from tests.fixtures.archives import Entry, entries_of, make_tar_gz, write_tar, write_zip
from tests.fixtures.deltasets import (
    DeltaSpec,
    SetItem,
    delta_item,
    full_item,
    hand_made,
    tree_files,
    unpack,
    write_set,
)
from tests.fixtures.s3 import bucket_listing

pytestmark = pytest.mark.s3

DOCS = "docs.example.com"
V1, V2, V3 = "2026-11-21", "2026-11-22", "2026-11-23"
T1, T2, T3 = "2026-11-21T03:00:00Z", "2026-11-22T03:00:00Z", "2026-11-23T03:00:00Z"
MiB = 1024 * 1024
BIG = os.urandom(9 * MiB)  # the spliced archives pass the 8 MiB part size: multipart uploads


def site_versions(asset: bytes) -> tuple[dict[str, bytes], dict[str, bytes], dict[str, bytes]]:
    """Three versions of one small site whose asset is `asset` (the third reverses it): the
    cases of a hostile base use a small asset, the two that need multipart the 9 MiB one."""
    base = {
        "index.html": b"<h1>home</h1>\n",
        "guides/a.html": b"<p>a</p>\n" * 100,
        "guides/c.html": b"<p>c</p>\n" * 100,
        "guides/gone.html": b"<p>removed in the next version</p>\n",
        "assets/big.bin": asset,
    }
    new = {
        "index.html": b"<h1>home, changed</h1>\n",
        "moved/a.html": base["guides/a.html"],
        "guides/c.html": base["guides/c.html"],
        "guides/copy-of-c.html": base["guides/c.html"],
        "assets/big.bin": asset,
    }
    return base, new, {**new, "guides/new.html": b"<p>new</p>\n", "assets/big.bin": asset[::-1]}


BASE, NEW, THIRD = site_versions(os.urandom(64 * 1024))
MULTIPART = site_versions(BIG)
SPLICED = DeltaSpec(spliced=True)


def published(store: ObjectStore, version: str, tmp_path: Path) -> Path:
    path = tmp_path / f"published-{version}.tar.gz"
    path.write_bytes(b"".join(store.open_stream(store.key(DOCS, version, "bundle.tar.gz"))))
    return path


def no_uploads_left(store: ObjectStore) -> bool:
    return not store.client.list_multipart_uploads(Bucket=store.bucket).get("Uploads")


def refused_publishing_nothing(
    store: ObjectStore, tmp_path: Path, trusted: Any, match: str
) -> IntegrityError:
    """Importing set s2 is refused (`match`) with the remedy of carrying it whole, and the
    bucket is as it was: no object, no open upload."""
    before = bucket_listing(store.client, store.bucket)
    with pytest.raises(IntegrityError, match=match) as refused:
        import_set(store, tmp_path / "s2", trusted, work_dir=tmp_path)
    assert "transfer pack --full --from-set 2 OUT" in str(refused.value.hint)
    assert bucket_listing(store.client, store.bucket) == before
    assert no_uploads_left(store)
    return refused.value


def test_a_spliced_delta_publishes_the_new_tree_at_the_vendors_size_and_chart_check_passes(
    tmp_path: Path,
    object_store: ObjectStore,
    target_settings: TargetSettings,
    signing: SigningKey,
    trusted: Any,
) -> None:
    spec = SiteSpec(DOCS, export_number=0, pages=120, page_size=8192)
    old = build_bundle(spec, tmp_path / "v1.tar.gz").path
    new = build_bundle(
        SiteSpec(DOCS, export_number=1, pages=120, page_size=8192), tmp_path / "v2.tar.gz"
    ).path
    old_tree, new_tree = unpack(old, tmp_path / "old"), unpack(new, tmp_path / "new")
    first = write_set(tmp_path / "s1", [full_item(DOCS, V1, old, T1)], signing)
    import_set(object_store, tmp_path / "s1", trusted)
    item = delta_item(DOCS, V2, V1, old_tree, new_tree, T2, tmp_path / "blobs", SPLICED)
    write_set(tmp_path / "s2", [item], signing, sequence=2, previous=(1, first))
    work = tmp_path / "work"
    work.mkdir()

    result = import_set(object_store, tmp_path / "s2", trusted, work_dir=work)

    archive = published(object_store, V2, tmp_path)
    data = archive.read_bytes()
    assert (
        inspect_archive(archive).tree_sha256 == item.tree_sha256 == inspect_archive(new).tree_sha256
    )
    assert len(data) <= 1.02 * new.stat().st_size  # the base's own blocks, not a recompression
    digest = hashlib.sha256(data).hexdigest()
    (imported,) = result.items
    assert (imported.status, imported.ref.sha256, imported.ref.size) == (
        "published",
        digest,
        len(data),
    )
    manifest = layout.read_version_manifest(object_store, DOCS, V2)
    assert manifest is not None
    assert (manifest.sha256, manifest.size, manifest.tree_sha256) == (
        digest,
        len(data),
        item.tree_sha256,
    )
    receipt = json.loads((tmp_path / "s2" / RECEIPT).read_bytes())
    assert (receipt["items"][0]["sha256"], receipt["items"][0]["tree_sha256"]) == (
        digest,
        item.tree_sha256,
    )
    assert list(work.iterdir()) == []
    assert import_bytes(tmp_path / "s2") is None  # a progress bar without a total: learnt

    values = tmp_path / "values.yaml"
    chart.write_values(chart.render_values(object_store, target_settings, DOCS, V2), values)
    with httpx.Client(timeout=30) as http:
        report = chart.check_values_file(values, object_store, http, warn=60)
    assert report.error is None, report.error
    assert report.actual_sha256 == report.expected_sha256 == digest


def test_moves_removals_and_a_chain_of_spliced_deltas_give_each_version_its_tree(
    tmp_path: Path, object_store: ObjectStore, signing: SigningKey, trusted: Any
) -> None:
    """A moved or copied page is carried (a splice keeps a base file only at its own path);
    a removed one is dropped; a delta spliced from a spliced version (multipart, 9 MiB)."""
    base, new, third_site = MULTIPART
    old, old_tree = hand_made(tmp_path, "v1", base)
    _, new_tree = hand_made(tmp_path, "v2", new)
    _, third_tree = hand_made(tmp_path, "v3", third_site)
    first = write_set(tmp_path / "s1", [full_item(DOCS, V1, old, T1)], signing)
    import_set(object_store, tmp_path / "s1", trusted)
    second = delta_item(DOCS, V2, V1, old_tree, new_tree, T2, tmp_path / "b2", SPLICED)
    # index, moved and copy carried; guides/c.html shares the copy's content: written too
    assert second.delta is not None and second.delta.carried_files == 4
    chain = write_set(tmp_path / "s2", [second], signing, sequence=2, previous=(1, first))
    import_set(object_store, tmp_path / "s2", trusted, work_dir=tmp_path)
    third = delta_item(DOCS, V3, V2, new_tree, third_tree, T3, tmp_path / "b3", SPLICED)
    write_set(tmp_path / "s3", [third], signing, sequence=3, previous=(2, chain))
    import_set(object_store, tmp_path / "s3", trusted, work_dir=tmp_path)

    for version, item, tree in ((V2, second, new_tree), (V3, third, third_tree)):
        archive = published(object_store, version, tmp_path)
        report = inspect_archive(archive)
        assert report.tree_sha256 == item.tree_sha256
        assert report.file_count == len(tree_files(tree))
        manifest = layout.read_version_manifest(object_store, DOCS, version)
        assert manifest is not None
        assert manifest.sha256 == hashlib.sha256(archive.read_bytes()).hexdigest()
    index = layout.read_index(object_store, DOCS)
    assert index is not None and index.labels() == [V1, V2, V3]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("mirror-rebuild-")]


def test_importing_a_spliced_delta_again_is_already_there_without_splicing(
    tmp_path: Path, object_store: ObjectStore, signing: SigningKey, trusted: Any
) -> None:
    item = _base_imported_and_spliced_set(tmp_path, object_store, signing, trusted)
    import_set(object_store, tmp_path / "s2", trusted)
    object_store.client.delete_object(  # without it any splice would fail: none happens
        Bucket=object_store.bucket, Key=object_store.key(DOCS, V1, "bundle.tar.gz")
    )
    again = import_set(object_store, tmp_path / "s2", trusted, allow_replay=True)
    assert [(i.status, i.tree_sha256) for i in again.items] == [("already there", item.tree_sha256)]


def _base_imported_and_spliced_set(
    tmp_path: Path,
    object_store: ObjectStore,
    signing: SigningKey,
    trusted: Any,
    spec: DeltaSpec = SPLICED,
    versions: tuple[dict[str, bytes], ...] = (BASE, NEW),
) -> SetItem:
    old, old_tree = hand_made(tmp_path, "v1", versions[0])
    _, new_tree = hand_made(tmp_path, "v2", versions[1])
    first = write_set(tmp_path / "s1", [full_item(DOCS, V1, old, T1)], signing)
    import_set(object_store, tmp_path / "s1", trusted)
    item = delta_item(DOCS, V2, V1, old_tree, new_tree, T2, tmp_path / "b", spec)
    write_set(tmp_path / "s2", [item], signing, sequence=2, previous=(1, first))
    return item


def test_a_page_neither_carried_nor_in_the_base_at_its_path_publishes_nothing(
    tmp_path: Path, object_store: ObjectStore, signing: SigningKey, trusted: Any
) -> None:
    """A content the base holds at another path (what a tree-archive delta may leave out)
    is not enough for a splice: refused, naming the path and the remedy."""
    _, new_tree = hand_made(tmp_path, "peek", NEW)
    carried = [
        e.sha256 for e in tree_files(new_tree) if e.path in ("index.html", "guides/copy-of-c.html")
    ]
    spec = DeltaSpec(spliced=True, carried=carried)
    _base_imported_and_spliced_set(tmp_path, object_store, signing, trusted, spec)
    refused_publishing_nothing(
        object_store, tmp_path, trusted, r"moved/a\.html: its content .* neither"
    )


def test_a_base_replaced_in_the_bucket_is_refused_as_such_and_publishes_nothing(
    tmp_path: Path, object_store: ObjectStore, signing: SigningKey, trusted: Any
) -> None:
    """Objects are immutable to mirror, not to whoever holds the bucket's keys: a base whose
    bytes are not its manifest's is named, though the splice met it as another tree first."""
    _base_imported_and_spliced_set(tmp_path, object_store, signing, trusted)
    other = make_tar_gz(tmp_path / "other.tar.gz", {**BASE, "index.html": b"<h1>tampered</h1>\n"})
    object_store.client.put_object(
        Bucket=object_store.bucket,
        Key=object_store.key(DOCS, V1, "bundle.tar.gz"),
        Body=other.read_bytes(),
    )
    refused_publishing_nothing(object_store, tmp_path, trusted, "does not match its manifest")


def test_a_spliced_delta_on_a_zip_base_is_refused_before_any_upload(
    tmp_path: Path, object_store: ObjectStore, signing: SigningKey, trusted: Any
) -> None:
    old = write_zip(tmp_path / "v1.zip", BASE)
    old_tree = unpack(old, tmp_path / "v1")
    _, new_tree = hand_made(tmp_path, "v2", NEW)
    whole = dataclasses.replace(full_item(DOCS, V1, old, T1), archive_format="zip")
    first = write_set(tmp_path / "s1", [whole], signing)
    import_set(object_store, tmp_path / "s1", trusted)
    item = delta_item(DOCS, V2, V1, old_tree, new_tree, T2, tmp_path / "b", SPLICED)
    write_set(tmp_path / "s2", [item], signing, sequence=2, previous=(1, first))
    refused_publishing_nothing(object_store, tmp_path, trusted, r"is zip, not tar\.gz")


def test_a_file_list_naming_other_content_than_the_base_holds_at_a_kept_path_publishes_nothing(
    tmp_path: Path, object_store: ObjectStore, signing: SigningKey, trusted: Any
) -> None:
    """Every kept base file is hashed as it passes: a list that says guides/c.html holds
    other bytes of the same size, not carried, is refused at that file."""
    _, new_tree = hand_made(tmp_path, "peek", NEW)
    other = hashlib.sha256(b"<p>C</p>\n" * 100).hexdigest()
    files = [
        dataclasses.replace(e, sha256=other) if e.path == "guides/c.html" else e
        for e in tree_files(new_tree)
    ]
    spec = DeltaSpec(
        spliced=True, files=files, tree_sha256=tree_hash((e.path, e.sha256) for e in files)
    )
    _base_imported_and_spliced_set(tmp_path, object_store, signing, trusted, spec)
    refused_publishing_nothing(
        object_store, tmp_path, trusted, r"guides/c\.html: the base holds content"
    )


def test_an_import_killed_before_the_versions_manifest_learns_the_objects_digest_again(
    tmp_path: Path, object_store: ObjectStore, signing: SigningKey, trusted: Any
) -> None:
    """The spliced object is in place but not its version's manifest (a kill between the
    two): the next import finds the object by its tree and reads it back for its digest."""
    _base_imported_and_spliced_set(tmp_path, object_store, signing, trusted)
    import_set(object_store, tmp_path / "s2", trusted)
    manifest = layout.read_version_manifest(object_store, DOCS, V2)
    assert manifest is not None
    object_store.client.delete_object(
        Bucket=object_store.bucket, Key=layout.version_manifest_key(object_store, DOCS, V2)
    )
    again = import_set(object_store, tmp_path / "s2", trusted, allow_replay=True)
    (item,) = again.items
    assert (item.status, item.ref.sha256, item.ref.size) == (
        "published",
        manifest.sha256,
        manifest.size,
    )
    rewritten = layout.read_version_manifest(object_store, DOCS, V2)
    assert rewritten is not None
    assert (rewritten.sha256, rewritten.size, rewritten.object) == (
        manifest.sha256,
        manifest.size,
        manifest.object,
    )


@pytest.mark.parametrize(
    "extra",
    [
        Entry("guides/evil", kind="symlink", target="/etc/shadow"),
        Entry("guides/twin.html", kind="hardlink", target="index.html"),
        Entry("guides/pipe", kind="fifo"),
    ],
    ids=lambda e: e.kind,
)
def test_a_base_rewritten_with_a_member_no_bundle_holds_publishes_nothing(
    tmp_path: Path, object_store: ObjectStore, signing: SigningKey, trusted: Any, extra: Entry
) -> None:
    """Whoever holds the bucket's keys may rewrite the base's manifest to the bytes they put:
    the splice keeps a base's members it is not told to edit, so a link, a fifo or a device
    among them would be published in a version the chart's pods refuse (or follow). A bundle
    holds only regular files and directories (mirror.archive): the splice refuses the rest."""
    _base_imported_and_spliced_set(tmp_path, object_store, signing, trusted)
    other = write_tar(tmp_path / "other.tar.gz", [*entries_of(BASE), extra], compresslevel=1)
    _rewrite_base(tmp_path, object_store, other.read_bytes())
    refused_publishing_nothing(object_store, tmp_path, trusted, f"{extra.name}.*only regular files")


def _rewrite_base(tmp_path: Path, object_store: ObjectStore, other: bytes) -> None:
    """The base's object replaced by `other`, its manifest rewritten to match (whoever holds
    the bucket's keys can); its tree field left as signed."""
    key = object_store.key(DOCS, V1, "bundle.tar.gz")
    object_store.client.put_object(Bucket=object_store.bucket, Key=key, Body=other)
    base = layout.read_version_manifest(object_store, DOCS, V1)
    assert base is not None
    rewritten = base.model_copy(
        update={"sha256": hashlib.sha256(other).hexdigest(), "size": len(other)}
    )
    object_store.client.put_object(
        Bucket=object_store.bucket,
        Key=layout.version_manifest_key(object_store, DOCS, V1),
        Body=rewritten.to_bytes(),
    )


@pytest.mark.parametrize(
    ("records", "global_records"),
    [
        ({"GNU.sparse.name": "evil.html"}, {}),
        ({"GNU.sparse.map": "0,0", "GNU.sparse.realsize": "900"}, {}),
        ({}, {"GNU.sparse.name": "evil.html"}),
    ],
    ids=["renamed", "sparse-map", "global-rename"],
)
def test_a_base_whose_kept_file_tarfile_reads_as_another_publishes_nothing(
    tmp_path: Path,
    object_store: ObjectStore,
    signing: SigningKey,
    trusted: Any,
    records: dict[str, str],
    global_records: dict[str, str],
) -> None:
    """A kept file's bytes are hashed as the splice reads its extent; pax GNU.sparse records
    make tarfile (the chart's extraction, mirror.archive) read that member under another
    name or as other content: a published tree that is not the signed one. Refused."""
    _base_imported_and_spliced_set(tmp_path, object_store, signing, trusted)
    raw = io.BytesIO()
    with tarfile.open(
        fileobj=raw, mode="w:gz", format=tarfile.PAX_FORMAT, pax_headers=global_records
    ) as tar:
        for name, data in BASE.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            if name == "guides/c.html":  # kept by the splice (unchanged in NEW)
                info.pax_headers = records
            tar.addfile(info, io.BytesIO(data))
    _rewrite_base(tmp_path, object_store, raw.getvalue())
    # named as the splice met it, or as the base read again (through tarfile) shows it
    cause = r"GNU\.sparse|holds tree \w+, not the base tree|unsafe archive"
    refused_publishing_nothing(
        object_store, tmp_path, trusted, rf"2026-11-21/bundle\.tar\.gz.*({cause})"
    )


def test_an_object_in_place_claiming_the_tree_but_holding_another_publishes_nothing(
    tmp_path: Path, object_store: ObjectStore, signing: SigningKey, trusted: Any
) -> None:
    """An object at the new version's key whose tree-sha256 metadata names the signed tree
    is taken as this version spliced by an import killed before its manifest; its metadata
    is only a claim (anyone with the bucket's keys can write it): the object is read back for
    its digest, and its tree must be the signed one, else the digest recorded would make
    `chart check` vouch for whatever it holds."""
    item = _base_imported_and_spliced_set(tmp_path, object_store, signing, trusted)
    junk = make_tar_gz(tmp_path / "junk.tar.gz", {"index.html": b"<h1>not this</h1>\n"})
    key = object_store.key(DOCS, V2, "bundle.tar.gz")
    object_store.client.put_object(
        Bucket=object_store.bucket,
        Key=key,
        Body=junk.read_bytes(),
        Metadata={"tree-sha256": item.tree_sha256},
    )
    before = bucket_listing(object_store.client, object_store.bucket)
    with pytest.raises(IntegrityError, match=rf"{V2}/bundle\.tar\.gz .*holds tree"):
        import_set(object_store, tmp_path / "s2", trusted, work_dir=tmp_path)
    assert bucket_listing(object_store.client, object_store.bucket) == before
    assert layout.read_version_manifest(object_store, DOCS, V2) is None


def test_a_delta_blob_damaged_on_the_medium_is_named_as_such_and_publishes_nothing(
    tmp_path: Path, object_store: ObjectStore, signing: SigningKey, trusted: Any
) -> None:
    """A bit flipped in the delta's part on the USB disk: the set is damaged, not the base
    nor the packer; the error names the part (re-copy the set), and nothing is published."""
    _base_imported_and_spliced_set(tmp_path, object_store, signing, trusted)
    (part,) = (tmp_path / "s2" / "blobs").iterdir()
    data = bytearray(part.read_bytes())
    data[len(data) // 2] ^= 0x01
    part.write_bytes(bytes(data))
    before = bucket_listing(object_store.client, object_store.bucket)
    with pytest.raises(IntegrityError) as refused:
        import_set(object_store, tmp_path / "s2", trusted, work_dir=tmp_path)
    assert part.name in refused.value.message
    assert bucket_listing(object_store.client, object_store.bucket) == before
    assert no_uploads_left(object_store)


def test_one_spliced_set_imported_twice_at_once_publishes_its_version_once(
    tmp_path: Path, object_store: ObjectStore, signing: SigningKey, trusted: Any
) -> None:
    """Two operators import the same set at once (9 MiB: multipart): one splices and
    publishes; the other either finds it published meanwhile (read back, proved by its
    tree) or is refused as a replay; the version's manifest names the object's bytes."""
    item = _base_imported_and_spliced_set(
        tmp_path, object_store, signing, trusted, versions=MULTIPART
    )
    (tmp_path / "w1").mkdir()
    (tmp_path / "w2").mkdir()
    copy = tmp_path / "s2-copy"
    shutil.copytree(tmp_path / "s2", copy)

    def run(set_dir: Path, work: Path) -> str:
        try:
            return import_set(object_store, set_dir, trusted, work_dir=work).items[0].status
        except MirrorError as exc:
            return f"refused: {exc.message}"

    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        outcomes = list(pool.map(run, [tmp_path / "s2", copy], [tmp_path / "w1", tmp_path / "w2"]))
    assert "published" in outcomes, outcomes
    assert all(o in ("published", "already there") or "refused" in o for o in outcomes)
    manifest = layout.read_version_manifest(object_store, DOCS, V2)
    assert manifest is not None and manifest.tree_sha256 == item.tree_sha256
    archive = published(object_store, V2, tmp_path)
    assert manifest.sha256 == hashlib.sha256(archive.read_bytes()).hexdigest()
    assert inspect_archive(archive).tree_sha256 == item.tree_sha256
    assert no_uploads_left(object_store)


@pytest.mark.parametrize(
    "directories",
    [
        ["index.html/"],
        ["Guides/"],
        ["guides/c.html/deeper/"],
        ["guides/./c.html/"],
        ["moved/A.html/"],
        ["x/", "X/"],
        ["caf\u00e9/", "cafe\u0301/"],
        ["x/y/", "X/z/"],
    ],
    ids=[
        "at a carried file",
        "a case twin",
        "below a kept file",
        "at a kept file, not normalised",
        "a case twin of an added file",
        "two case twins of the base",
        "two NFC twins of the base",
        "below case twins",
    ],
)
def test_a_base_rewritten_with_a_directory_no_bundle_could_hold_beside_its_files_publishes_nothing(
    tmp_path: Path,
    object_store: ObjectStore,
    signing: SigningKey,
    trusted: Any,
    directories: list[str],
) -> None:
    """A splice keeps the base's directories; one added to the base in the bucket (its
    manifest rewritten) where the new tree has a file, or as a case or NFC twin of a path
    the archive holds, would publish an archive `mirror.archive` refuses and a pod cannot
    unpack: refused."""
    _base_imported_and_spliced_set(tmp_path, object_store, signing, trusted)
    entries = [*(Entry(d, kind="dir") for d in directories), *entries_of(BASE)]
    _rewrite_base(tmp_path, object_store, write_tar(tmp_path / "o.tar.gz", entries).read_bytes())
    refused_publishing_nothing(object_store, tmp_path, trusted, "unsafe archive")


@pytest.mark.parametrize(
    "extra",
    [
        Entry(".", data=b"<script>evil</script>"),
        Entry("guides/..", data=b"<script>evil</script>"),
        Entry("./", data=b"<script>evil</script>"),
    ],
    ids=["dot", "dot-dot below a directory", "dot-slash"],
)
def test_a_base_rewritten_with_a_file_at_the_root_publishes_nothing(
    tmp_path: Path, object_store: ObjectStore, signing: SigningKey, trusted: Any, extra: Entry
) -> None:
    """A file member whose name is the root itself ('.', 'guides/..') names no path the
    plan is asked about: kept as it is, it would publish bytes the signed tree does not
    hold, in an archive `mirror.archive` refuses ('has an empty path'). Refused."""
    _base_imported_and_spliced_set(tmp_path, object_store, signing, trusted)
    entries = [*entries_of(BASE), extra]
    _rewrite_base(tmp_path, object_store, write_tar(tmp_path / "o.tar.gz", entries).read_bytes())
    refused_publishing_nothing(object_store, tmp_path, trusted, "empty path")


@pytest.mark.parametrize("name", ["pad{}/", "./"], ids=["directories", "the root again"])
def test_a_base_rewritten_with_more_directories_than_an_archive_may_hold_members_publishes_nothing(
    tmp_path: Path,
    object_store: ObjectStore,
    signing: SigningKey,
    trusted: Any,
    monkeypatch: pytest.MonkeyPatch,
    name: str,
) -> None:
    """`mirror.archive` counts every member (directories too) against `max_files`; the
    list's files are counted as it is read, and each directory a splice writes must count
    beside them, or a base padded with empty directories in the bucket publishes an archive
    `mirror.archive` refuses ('past the limit of N members'). The limit lowered to 10 here:
    the new tree's 5 files and 2 directories fit, 30 more directories do not."""
    _base_imported_and_spliced_set(tmp_path, object_store, signing, trusted)
    monkeypatch.setattr(
        "mirror.airgap.publish._stream.ArchiveLimits",
        functools.partial(ArchiveLimits, max_files=10),
    )
    padding = [Entry(name.format(i), kind="dir") for i in range(30)]
    entries = [*padding, *entries_of(BASE)]
    _rewrite_base(tmp_path, object_store, write_tar(tmp_path / "o.tar.gz", entries).read_bytes())
    refused_publishing_nothing(object_store, tmp_path, trusted, "past the limit of 10 members")
