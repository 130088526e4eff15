"""`mirror target check` and the import's first probe, against a real S3 server (which
verifies checksums and honours conditional writes) and moto (which verifies no checksum)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from mirror.airgap.s3.objectstore import ObjectStore, make_s3_client
from mirror.airgap.s3.probe import require_safe_writes, run_checks
from mirror.config import TargetSettings
from mirror.errors import ConfigError
from tests.fixtures.cli import mirror_cli, write_config
from tests.fixtures.s3 import bucket_listing

pytestmark = pytest.mark.s3


@pytest.fixture
def moto_target(moto_s3_endpoint: str) -> TargetSettings:
    """A bucket on moto: the fault here is a server that verifies no checksum."""
    target = TargetSettings(endpoint_url=moto_s3_endpoint, bucket=f"probe-{uuid.uuid4().hex[:8]}")
    make_s3_client(target).create_bucket(Bucket=target.bucket)
    return target


def check_config(tmp_path: Path, target: TargetSettings, **extra: Any) -> Path:
    document = {
        "target": {
            "endpoint_url": target.endpoint_url,
            "bucket": target.bucket,
            "region": "us-east-1",
            **extra,
        }
    }
    return write_config(tmp_path / "target.toml", document)


def rows(stdout: str) -> dict[str, str]:
    return {check["name"]: check["status"] for check in json.loads(stdout)["checks"]}


def test_target_check_passes_on_a_server_that_verifies(
    tmp_path: Path, target_settings: TargetSettings, object_store: ObjectStore
) -> None:
    config = check_config(tmp_path, target_settings)
    result = mirror_cli("--config", str(config), "target", "check", "--json")
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["schema"] == "mirror.target.check/1" and document["ok"] is True
    assert rows(result.stdout) == {
        "credentials and bucket": "ok",
        "clock skew": "ok",
        "conditional writes": "ok",
        "checksums enforced": "ok",
        "multipart list and abort": "ok",
        "presigned GET": "ok",
    }
    assert bucket_listing(object_store.client, object_store.bucket) == {}  # cleaned up
    human = mirror_cli("--config", str(config), "target", "check")
    assert human.returncode == 0 and "checksums enforced" in human.stdout


def test_target_check_refuses_a_server_that_accepts_a_wrong_checksum(
    tmp_path: Path, moto_target: TargetSettings
) -> None:
    result = mirror_cli(
        "--config", str(check_config(tmp_path, moto_target)), "target", "check", "--json"
    )
    assert result.returncode == 2, result.stderr
    assert rows(result.stdout)["checksums enforced"] == "fail"
    assert "wrong crc32" in result.stderr and 'part_checksum = "md5"' in result.stderr


def test_the_printed_remedy_md5_read_back_passes_on_moto(
    tmp_path: Path, moto_target: TargetSettings
) -> None:
    config = check_config(tmp_path, moto_target, part_checksum="md5")
    result = mirror_cli("--config", str(config), "target", "check", "--json")
    assert result.returncode == 0, result.stderr
    assert rows(result.stdout)["checksums enforced"] == "warn"  # read back, not enforced


def test_wrong_credentials_are_exit_4_in_one_row(
    tmp_path: Path, target_settings: TargetSettings
) -> None:
    config = check_config(tmp_path, target_settings)
    refused = mirror_cli(
        "--config",
        str(config),
        "target",
        "check",
        "--json",
        env={"AWS_SECRET_ACCESS_KEY": "not-the-secret"},
        timeout=60,
    )
    assert refused.returncode == 4, refused.stderr
    assert rows(refused.stdout) == {"credentials and bucket": "fail"}
    assert "not-the-secret" not in refused.stdout + refused.stderr


def test_import_refuses_a_server_without_checksums_and_runs_with_md5_read_back(
    moto_target: TargetSettings,
) -> None:
    store = ObjectStore.from_settings(moto_target)
    with pytest.raises(ConfigError, match="does not verify what it stores"):
        require_safe_writes(store)
    md5 = ObjectStore.from_settings(moto_target.model_copy(update={"part_checksum": "md5"}))
    require_safe_writes(md5)
    assert md5.conditional_writes is True
    assert bucket_listing(md5.client, md5.bucket) == {}


def test_every_check_reports_on_a_real_server(object_store: ObjectStore) -> None:
    checks = run_checks(object_store)
    assert [check.status for check in checks] == ["ok"] * 6
    assert all(check.error is None for check in checks)


def test_the_import_check_and_target_check_leave_nothing_in_a_versioned_bucket(
    tmp_path: Path, versioned_object_store: ObjectStore, target_settings: TargetSettings
) -> None:
    """A bucket that keeps every version: each write the probes made is deleted by its
    VersionId, and no delete marker is made (a delete by key left two versions and a marker
    behind at every import, for good)."""
    store = versioned_object_store
    require_safe_writes(store)
    checked = mirror_cli(
        "--config", str(check_config(tmp_path, target_settings)), "target", "check", "--json"
    )
    assert checked.returncode == 0, checked.stderr
    listed = store.client.list_object_versions(Bucket=store.bucket)
    assert listed.get("Versions", []) == [] and listed.get("DeleteMarkers", []) == []
