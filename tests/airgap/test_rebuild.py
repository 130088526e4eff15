"""Publishing versions carried as deltas (mirror/airgap/publish/), against SeaweedFS
server with real archives: simulator sites and hand-made trees, real signed sets."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest

from mirror.airgap import chart, layout
from mirror.airgap.importer import import_set
from mirror.airgap.publish import check_deltas, open_published
from mirror.airgap.publish._workdir import LOCK_NAME, WORK_PREFIX, locked_work_dir, remove_abandoned
from mirror.airgap.s3.objectstore import ObjectStore
from mirror.archive import inspect_archive
from mirror.config import TargetSettings
from mirror.errors import ConfigError, IntegrityError, TemporaryFailure
from mirror.transferset.format import RECEIPT, DeltaEntry, parse_manifest
from mirror.transferset.keys import SigningKey
from mirror.units import format_size
from tests.fixtures.cli import REPO
from tests.fixtures.deltasets import (
    DeltaSpec,
    SetItem,
    delta_item,
    full_item,
    hand_made,
    tree_files,
    write_set,
)
from tests.fixtures.s3 import bucket_listing

pytestmark = pytest.mark.s3

DOCS = "docs.example.com"
V1, V2, V3 = "2026-11-21", "2026-11-22", "2026-11-23"
T1, T2, T3 = "2026-11-21T03:00:00Z", "2026-11-22T03:00:00Z", "2026-11-23T03:00:00Z"
MiB = 1024 * 1024


def assert_delta(item: SetItem) -> DeltaEntry:
    assert item.delta is not None
    return item.delta


def download(store: ObjectStore, key: str) -> bytes:
    return b"".join(store.open_stream(key))


def test_a_delta_import_publishes_the_connected_sides_archive_and_chart_check_passes(
    tmp_path: Path,
    object_store: ObjectStore,
    target_settings: TargetSettings,
    signing: SigningKey,
    trusted: Any,
) -> None:
    """A spliced delta with the pack's recipe over the bucket's base object: the import
    replays it and publishes the very archive the connected side made and signed."""
    old, old_tree = hand_made(tmp_path, "v1", BASE)  # mostly its big file: a recipe worth it
    new, new_tree = hand_made(tmp_path, "v2", NEW)
    first = write_set(tmp_path / "s1", [full_item(DOCS, V1, old, T1)], signing)
    import_set(object_store, tmp_path / "s1", trusted)
    spec = DeltaSpec(recipe_base=old)
    item = delta_item(DOCS, V2, V1, old_tree, new_tree, T2, tmp_path / "blobs", spec)
    write_set(tmp_path / "s2", [item], signing, sequence=2, previous=(1, first))
    recipe = assert_delta(item).recipe
    assert recipe is not None and item.blob.size < recipe.size / 5
    work = tmp_path / "work"
    work.mkdir()

    result = import_set(object_store, tmp_path / "s2", trusted, work_dir=work)

    assert recipe.size <= 1.10 * new.stat().st_size  # the vendor's ratio, not the site's size
    key = object_store.key(DOCS, V2, "bundle.tar.gz")
    published = download(object_store, key)
    assert (hashlib.sha256(published).hexdigest(), len(published)) == (recipe.sha256, recipe.size)
    (tmp_path / "published.tar.gz").write_bytes(published)
    assert inspect_archive(tmp_path / "published.tar.gz").tree_sha256 == (
        inspect_archive(new).tree_sha256
    )
    (imported,) = result.items
    assert (imported.status, imported.ref.sha256, imported.ref.size) == (
        "published",
        recipe.sha256,
        recipe.size,
    )
    manifest = layout.read_version_manifest(object_store, DOCS, V2)
    assert manifest is not None
    assert (manifest.sha256, manifest.size, manifest.tree_sha256) == (
        recipe.sha256,
        recipe.size,
        item.tree_sha256,
    )
    extra = manifest.model_extra or {}
    assert extra == {"delta_base": V1, "delta_sha256": item.blob.sha256}
    receipt = json.loads((tmp_path / "s2" / RECEIPT).read_bytes())
    assert receipt["items"][0]["sha256"] == recipe.sha256
    assert receipt["items"][0]["size"] == recipe.size  # what `transfer ack` records
    assert receipt["items"][0]["tree_sha256"] == item.tree_sha256
    assert list(work.iterdir()) == []

    values = tmp_path / "values.yaml"
    chart.write_values(chart.render_values(object_store, target_settings, DOCS, V2), values)
    with httpx.Client(timeout=30) as http:
        report = chart.check_values_file(values, object_store, http, warn=60)
    assert report.error is None, report.error
    assert report.actual_sha256 == report.expected_sha256 == recipe.sha256


BIG = os.urandom(9 * MiB)  # the rebuilt archives pass the 8 MiB part size: multipart uploads
BASE = {
    "index.html": b"<h1>home</h1>\n",
    "guides/a.html": b"<p>a</p>\n" * 100,
    "guides/c.html": b"<p>c</p>\n" * 100,
    "assets/big.bin": BIG,
}
NEW = {
    "index.html": b"<h1>home, changed</h1>\n",
    "moved/a.html": BASE["guides/a.html"],
    "guides/c.html": BASE["guides/c.html"],
    "guides/copy-of-c.html": BASE["guides/c.html"],
    "assets/big.bin": BIG,
}
THIRD = {**NEW, "guides/new.html": b"<p>new</p>\n", "assets/big.bin": BIG[::-1]}


def test_importing_the_same_delta_again_is_already_there_without_rebuilding(
    tmp_path: Path, object_store: ObjectStore, signing: SigningKey, trusted: Any
) -> None:
    old, old_tree = hand_made(tmp_path, "v1", {"index.html": b"one\n", "a.html": b"a\n"})
    _, new_tree = hand_made(tmp_path, "v2", {"index.html": b"two\n", "a.html": b"a\n"})
    first = write_set(tmp_path / "s1", [full_item(DOCS, V1, old, T1)], signing)
    import_set(object_store, tmp_path / "s1", trusted)
    item = delta_item(DOCS, V2, V1, old_tree, new_tree, T2, tmp_path / "b")
    write_set(tmp_path / "s2", [item], signing, sequence=2, previous=(1, first))
    import_set(object_store, tmp_path / "s2", trusted)
    # Without the base's object any rebuild would fail: none happens.
    object_store.client.delete_object(
        Bucket=object_store.bucket, Key=object_store.key(DOCS, V1, "bundle.tar.gz")
    )
    before = bucket_listing(object_store.client, object_store.bucket)
    again = import_set(object_store, tmp_path / "s2", trusted, allow_replay=True)
    assert [i.status for i in again.items] == ["already there"]
    after = bucket_listing(object_store.client, object_store.bucket)
    assert {k: v for k, v in after.items() if "_mirror" not in k and "index" not in k} == {
        k: v for k, v in before.items() if "_mirror" not in k and "index" not in k
    }


def base_imported_and_delta_set(
    tmp_path: Path, object_store: ObjectStore, signing: SigningKey, trusted: Any
) -> tuple[Path, SetItem]:
    """V1 (BASE) imported whole; set s2 carrying V2 (NEW) as a delta against it, not imported.
    Returns V1's bundle and the delta item."""
    old, old_tree = hand_made(tmp_path, "v1", BASE)
    _, new_tree = hand_made(tmp_path, "v2", NEW)
    write_set(tmp_path / "s1", [full_item(DOCS, V1, old, T1)], signing)
    import_set(object_store, tmp_path / "s1", trusted)
    item = delta_item(DOCS, V2, V1, old_tree, new_tree, T2, tmp_path / "b")
    write_set(tmp_path / "s2", [item], signing, sequence=2)
    return old, item


@pytest.mark.parametrize("compression", ["libdeflate", "stored blocks"])
def test_a_tree_archive_delta_an_earlier_release_packed_is_refused_before_any_upload(
    compression: str, tmp_path: Path, object_store: ObjectStore, signing: SigningKey, trusted: Any
) -> None:
    """The way this release dropped (docs/delta.md): a tree-archive delta, as earlier
    releases packed for a zip base (compressed by libdeflate) or before libdeflate (stored
    deflate blocks, no `compression`), is refused with exit 2 and the one remedy, before
    anything is uploaded or a work directory made."""
    old, old_tree = hand_made(tmp_path, "v1", {"index.html": b"one\n", "a.html": b"a\n"})
    _, new_tree = hand_made(tmp_path, "v2", {"index.html": b"two\n", "a.html": b"a\n"})
    first = write_set(tmp_path / "s1", [full_item(DOCS, V1, old, T1)], signing)
    import_set(object_store, tmp_path / "s1", trusted)
    named = {"compression": None} if compression == "stored blocks" else {}
    spec = DeltaSpec(spliced=False, delta=named)
    item = delta_item(DOCS, V2, V1, old_tree, new_tree, T2, tmp_path / "b", spec)
    write_set(tmp_path / "s2", [item], signing, sequence=2, previous=(1, first))
    before = bucket_listing(object_store.client, object_store.bucket)
    with pytest.raises(ConfigError) as refused:
        import_set(object_store, tmp_path / "s2", trusted, work_dir=tmp_path)
    assert refused.value.exit_code == 2
    assert f"{DOCS} {V2}: its delta is a tree archive" in refused.value.message
    assert "mirror transfer pack --full --from-set 2 OUT" in str(refused.value)
    assert bucket_listing(object_store.client, object_store.bucket) == before
    assert list(tmp_path.glob(f"{WORK_PREFIX}*")) == []


def test_a_delta_without_room_to_rebuild_is_exit_75_naming_needed_free_and_where(
    tmp_path: Path, object_store: ObjectStore, signing: SigningKey, trusted: Any
) -> None:
    old, item = base_imported_and_delta_set(tmp_path, object_store, signing, trusted)
    manifest = parse_manifest((tmp_path / "s2" / "manifest.json").read_bytes())
    check_deltas(object_store, manifest, work_dir=tmp_path)
    with pytest.raises(TemporaryFailure) as refused:
        check_deltas(object_store, manifest, work_dir=tmp_path, free_space=lambda _: 5 * MiB)
    assert refused.value.exit_code == 75
    assert f"not enough space in {tmp_path}" in refused.value.message
    assert f"{format_size(5 * MiB)} free" in refused.value.message
    assert f"{format_size(item.blob.size + old.stat().st_size)} needed" in refused.value.message
    assert "target.work_dir" in str(refused.value)
    with pytest.raises(ConfigError, match="is not a directory"):
        check_deltas(object_store, manifest, work_dir=tmp_path / "absent")


@pytest.mark.parametrize("case", ["unused content", "base in the same set"])
def test_a_delta_the_importer_cannot_trust_publishes_nothing(
    case: str, tmp_path: Path, object_store: ObjectStore, signing: SigningKey, trusted: Any
) -> None:
    old, old_tree = hand_made(tmp_path, "v1", {"index.html": b"one\n", "a.html": b"a\n"})
    _, new_tree = hand_made(tmp_path, "v2", {"index.html": b"two\n", "a.html": b"a\n"})
    stray = b"carried but used by no file\n"
    full = full_item(DOCS, V1, old, T1)
    if case == "unused content":
        first = write_set(tmp_path / "s1", [full], signing)
        import_set(object_store, tmp_path / "s1", trusted)
        honest = tree_files(new_tree)
        extra = hashlib.sha256(stray).hexdigest()
        carried = [e.sha256 for e in honest if e.path == "index.html"] + [extra]
        spec = DeltaSpec(carried=carried, content={extra: stray})
        item = delta_item(DOCS, V2, V1, old_tree, new_tree, T2, tmp_path / "b", spec)
        write_set(tmp_path / "s2", [item], signing, sequence=2, previous=(1, first))
        message = "which no file uses"
    else:
        item = delta_item(DOCS, V2, V1, old_tree, new_tree, T2, tmp_path / "b")
        write_set(tmp_path / "s2", [full, item], signing)
        message = "of the same set"
    before = bucket_listing(object_store.client, object_store.bucket)
    with pytest.raises(IntegrityError, match=message):
        import_set(object_store, tmp_path / "s2", trusted, work_dir=tmp_path)
    assert bucket_listing(object_store.client, object_store.bucket) == before
    assert not object_store.client.list_multipart_uploads(Bucket=object_store.bucket).get("Uploads")


def test_a_refusal_while_streaming_is_raised_again_by_every_later_read(
    tmp_path: Path, object_store: ObjectStore, signing: SigningKey, trusted: Any
) -> None:
    old, old_tree = hand_made(tmp_path, "v1", BASE)  # mostly its big file: a recipe worth it
    _, new_tree = hand_made(tmp_path, "v2", NEW)
    write_set(tmp_path / "s1", [full_item(DOCS, V1, old, T1)], signing)
    import_set(object_store, tmp_path / "s1", trusted)
    spec = DeltaSpec(
        recipe_base=old,
        recipe_damage=lambda s, lit, e: (s, lit, e.model_copy(update={"sha256": "0" * 64})),
    )
    item = delta_item(DOCS, V2, V1, old_tree, new_tree, T2, tmp_path / "b", spec)
    write_set(tmp_path / "s2", [item], signing, sequence=2)
    (entry,) = parse_manifest((tmp_path / "s2" / "manifest.json").read_bytes()).items
    refusal = "the archive of the delta's recipe hashes to"
    with open_published(
        tmp_path / "s2", entry, object_store, sequence=2, work_dir=tmp_path
    ) as archive:
        with pytest.raises(IntegrityError, match=refusal):
            while archive.read(1000):
                pass
        with pytest.raises(IntegrityError, match=refusal):
            archive.read(1000)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(WORK_PREFIX)]


def test_only_work_directories_of_dead_rebuilds_are_removed(tmp_path: Path) -> None:
    live, lock = locked_work_dir(tmp_path)
    dead = tmp_path / f"{WORK_PREFIX}dead"
    dead.mkdir()
    (dead / LOCK_NAME).touch()  # a lock file nobody holds: its process is gone
    lockless = tmp_path / f"{WORK_PREFIX}lockless"
    lockless.mkdir()  # killed between making the directory and its lock
    other = tmp_path / "something-else"
    other.mkdir()
    cut_short = tmp_path / f".{WORK_PREFIX}removing-{WORK_PREFIX}x"
    cut_short.mkdir()  # a removal killed half-way
    try:
        remove_abandoned(tmp_path)
        assert sorted(p.name for p in tmp_path.iterdir()) == sorted([live.name, other.name])
    finally:
        os.close(lock)
    remove_abandoned(tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == [other.name]


def test_a_work_directory_being_made_is_never_judged(tmp_path: Path) -> None:
    """While one import holds the work root's lock (making its directory), another's sweep
    waits for it instead of finding a directory without its lock yet."""
    root_fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    fcntl.flock(root_fd, fcntl.LOCK_EX)
    half_made = tmp_path / f"{WORK_PREFIX}half-made"
    half_made.mkdir()
    sweep = threading.Thread(target=remove_abandoned, args=(tmp_path,))
    sweep.start()
    sweep.join(0.3)
    assert sweep.is_alive() and half_made.exists()
    lock = os.open(half_made / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(lock, fcntl.LOCK_EX)
    os.close(root_fd)
    sweep.join(120)
    try:
        assert not sweep.is_alive() and half_made.exists()
    finally:
        os.close(lock)


def _read_only_mount(where: Path) -> None:
    where.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64m,ro", "tmpfs", str(where)],
        capture_output=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip("cannot mount a read-only tmpfs here (needs root)")


def test_a_read_only_work_directory_is_a_config_error_before_any_upload(
    tmp_path: Path, object_store: ObjectStore, signing: SigningKey, trusted: Any
) -> None:
    base_imported_and_delta_set(tmp_path, object_store, signing, trusted)
    read_only = tmp_path / "ro"
    _read_only_mount(read_only)
    try:
        before = bucket_listing(object_store.client, object_store.bucket)
        with pytest.raises(ConfigError, match=f"target.work_dir {read_only} is not writable"):
            import_set(object_store, tmp_path / "s2", trusted, work_dir=read_only)
        assert bucket_listing(object_store.client, object_store.bucket) == before
    finally:
        subprocess.run(["umount", str(read_only)], check=False)


def test_no_usable_temp_directory_is_a_config_error_naming_work_dir(tmp_path: Path) -> None:
    """work_dir unset in a pod whose root file system is read-only: /tmp and its fallbacks
    are not writable, so there is no temp dir to rebuild in."""
    probe = (
        "from mirror.airgap.publish._workdir import work_root\n"
        "from mirror.errors import ConfigError\n"
        "try:\n    work_root(None)\n"
        "except ConfigError as exc:\n    print(exc.exit_code, exc)\n"
    )
    # The checkout and its venv may live under /tmp (CI, a fresh clone): they stay reachable
    # through bind mounts made before /tmp and /var/tmp are hidden.
    kept = {"/tmp/": "/run/mirror-test-tmp/", "/var/tmp/": "/run/mirror-test-var-tmp/"}

    def reachable(path: str) -> str:
        for hidden, there in kept.items():
            if path.startswith(hidden):
                return there + path[len(hidden) :]
        return path

    repo = str(REPO)
    script = (
        "mkdir -p /run/mirror-test-tmp /run/mirror-test-var-tmp "
        "&& mount --rbind /tmp /run/mirror-test-tmp "
        "&& mount --rbind /var/tmp /run/mirror-test-var-tmp "
        "&& mount -t tmpfs -o ro tmpfs /tmp && mount -t tmpfs -o ro tmpfs /var/tmp && cd /proc "
        f"&& TMPDIR=/nonexistent PYTHONPATH={reachable(repo + '/')} "
        f'exec {reachable(sys.executable)} -c "$0"'
    )
    done = subprocess.run(
        ["unshare", "-m", "sh", "-c", script, probe], capture_output=True, text=True, check=False
    )
    if any(word in done.stderr for word in ("unshare failed", "mount:", "mkdir:")):
        pytest.skip("cannot make the temp directories read-only here (needs root)")
    assert done.stdout.startswith("2 no writable temporary directory"), done.stderr
    assert "target.work_dir" in done.stdout


def test_a_base_whose_object_is_gone_is_refused_before_any_upload_naming_the_remedy(
    tmp_path: Path, object_store: ObjectStore, signing: SigningKey, trusted: Any
) -> None:
    """The base's manifest is there, its bundle is not (deleted by hand or a lifecycle
    rule): refused like a missing base (exit 5, `pack --full`), not a bare 'does not exist'
    (exit 3) from the middle of the upload."""
    base_imported_and_delta_set(tmp_path, object_store, signing, trusted)
    object_store.client.delete_object(
        Bucket=object_store.bucket, Key=object_store.key(DOCS, V1, "bundle.tar.gz")
    )
    before = bucket_listing(object_store.client, object_store.bucket)
    with pytest.raises(IntegrityError) as refused:
        import_set(object_store, tmp_path / "s2", trusted, work_dir=tmp_path)
    assert refused.value.exit_code == 5
    assert "transfer pack --full --from-set 2 OUT" in str(refused.value)
    assert bucket_listing(object_store.client, object_store.bucket) == before
