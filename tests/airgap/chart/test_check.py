"""mirror.airgap.chart.check: a values file's link fetched as the chart would."""

from __future__ import annotations

import hashlib
import http.server
import re
import socket
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from mirror.airgap import chart
from mirror.airgap.s3.objectstore import ObjectStore
from mirror.config import TargetSettings
from mirror.errors import (
    AuthError,
    IntegrityError,
    NotFound,
    OperationFailed,
)
from mirror.httpserver import QuietHTTPServer
from tests.airgap.chart.seeding import (
    DOMAIN,
    Seeded,
    check,
    fetch,
    write_for,
)

# --- chart check -----------------------------------------------------------------------------


def test_the_read_only_identity_renders_and_checks_but_cannot_promote(
    s3_read_only_client: Any,
    target_settings: TargetSettings,
    two_versions: tuple[Seeded, Seeded],
    tmp_path: Path,
) -> None:
    """The cluster's keys (Read and List only, as the README sets SeaweedFS up) are enough
    to render values and check their link; changing the bucket is refused, exit 4."""
    _, newest = two_versions
    reader = ObjectStore(s3_read_only_client, target_settings.bucket, target_settings.prefix)
    path = tmp_path / "values.yaml"
    values = write_for(reader, target_settings, path)
    assert values.version == newest.version
    assert fetch(values.bundle_url) == newest.archive.read_bytes()
    report = check(path, reader)
    assert report.error is None and report.exit_code == 0, report.error
    with pytest.raises(AuthError) as refused:
        chart.promote(reader, DOMAIN, newest.version)
    assert refused.value.exit_code == 4
    assert reader.read_json(reader.key(DOMAIN, "current.json")) == (None, None)


def test_check_passes_on_a_fresh_file(
    object_store: ObjectStore,
    target_settings: TargetSettings,
    two_versions: tuple[Seeded, Seeded],
    tmp_path: Path,
) -> None:
    _, newest = two_versions
    path = tmp_path / "values.yaml"
    write_for(object_store, target_settings, path)
    report = check(path, object_store, warn=86400)
    assert report.error is None, report.error
    assert report.exit_code == 0
    assert report.actual_sha256 == report.expected_sha256 == newest.sha256
    assert report.size == newest.size
    assert report.seconds_left is not None and report.seconds_left > 6 * 86400
    assert report.as_dict()["status"] == "ok"
    (line,) = report.lines()
    assert line.startswith(f"ok: {DOMAIN} {newest.version} from ")
    assert "X-Amz" not in line and "Signature" not in line

    document = yaml.safe_load(path.read_text())
    document["staticExport"]["enabled"] = False
    path.write_text(yaml.safe_dump(document))
    disabled = check(path, object_store, warn=86400)
    assert disabled.error is None and disabled.as_dict()["enabled"] is False
    assert disabled.lines()[1].startswith("note: staticExport.enabled is not true")


def test_check_warns_when_the_link_expires_soon(
    object_store: ObjectStore,
    target_settings: TargetSettings,
    two_versions: tuple[Seeded, Seeded],
    tmp_path: Path,
) -> None:
    path = tmp_path / "values.yaml"
    write_for(object_store, target_settings.model_copy(update={"presign_ttl": 3600.0}), path)
    report = check(path, object_store, warn=86400)
    assert report.status == "expiring"
    assert isinstance(report.error, OperationFailed) and report.exit_code == 1
    assert re.search(r" expires \S+Z, in (1h|59m\d*s?) \(warning at 1d\)", str(report.error))
    assert report.actual_sha256 == report.expected_sha256  # the bytes were still checked
    assert check(path, object_store, warn=600).error is None


def test_check_fails_on_an_expired_link(
    object_store: ObjectStore,
    target_settings: TargetSettings,
    two_versions: tuple[Seeded, Seeded],
    tmp_path: Path,
) -> None:
    path = tmp_path / "values.yaml"
    write_for(object_store, target_settings.model_copy(update={"presign_ttl": 1.0}), path)
    time.sleep(2.1)
    report = check(path, object_store)
    assert report.status == "expired"
    assert report.exit_code == 1
    message = str(report.error)
    assert "expired at" in message and "ago" in message and "chart values" in message
    assert "\n" not in message


def test_check_fails_on_a_replaced_object(
    object_store: ObjectStore,
    target_settings: TargetSettings,
    two_versions: tuple[Seeded, Seeded],
    tmp_path: Path,
) -> None:
    _, newest = two_versions
    path = tmp_path / "values.yaml"
    write_for(object_store, target_settings, path)
    tampered = newest.archive.read_bytes() + b"\0"
    object_store.client.put_object(Bucket=object_store.bucket, Key=newest.key, Body=tampered)
    report = check(path, object_store)
    assert report.status == "mismatch"
    assert isinstance(report.error, IntegrityError) and report.exit_code == 5
    assert "replaced or damaged" in str(report.error)
    assert report.actual_sha256 == hashlib.sha256(tampered).hexdigest()


def test_check_fails_on_a_missing_version(
    object_store: ObjectStore, two_versions: tuple[Seeded, Seeded], tmp_path: Path
) -> None:
    url, _ = object_store.presign_get(object_store.key(DOMAIN, "2030-01-01", "bundle.tar.gz"), 3600)
    path = tmp_path / "values.yaml"
    path.write_text(
        yaml.safe_dump(
            {"staticExport": {"enabled": True, "bundleUrl": url, "version": "2030-01-01"}}
        )
    )
    report = check(path, object_store)
    assert report.status == "missing"
    assert isinstance(report.error, NotFound) and report.exit_code == 3
    assert "2030-01-01 of docs.example.com does not exist" in str(report.error)
    assert "2026-11-20, 2026-11-21" in str(report.error)


def test_check_fails_when_the_object_is_gone(
    object_store: ObjectStore,
    target_settings: TargetSettings,
    two_versions: tuple[Seeded, Seeded],
    tmp_path: Path,
) -> None:
    _, newest = two_versions
    path = tmp_path / "values.yaml"
    write_for(object_store, target_settings, path)
    object_store.client.delete_object(Bucket=object_store.bucket, Key=newest.key)
    report = check(path, object_store)
    assert report.status == "missing" and report.exit_code == 3
    assert "HTTP 404" in str(report.error)


def test_check_fails_when_the_file_names_another_version(
    object_store: ObjectStore,
    target_settings: TargetSettings,
    two_versions: tuple[Seeded, Seeded],
    tmp_path: Path,
) -> None:
    path = tmp_path / "values.yaml"
    values = write_for(object_store, target_settings, path)
    document = values.helm_values()
    document["staticExport"]["version"] = "2026-11-20"
    path.write_text(yaml.safe_dump(document))
    report = check(path, object_store)
    assert report.status == "version-mismatch" and report.exit_code == 5
    assert "says version 2026-11-20 but its bundleUrl points at" in str(report.error)


class _S3Refusal(http.server.BaseHTTPRequestHandler):
    """Answers every GET like S3 refusing a presigned link."""

    code = "AccessDenied"
    message = "Request has expired"

    def do_GET(self) -> None:
        body = (
            '<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>'
            f"{self.code}</Code><Message>{self.message}</Message></Error>"
        ).encode()
        self.send_response(403)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def refusing_server() -> Iterator[tuple[str, type[_S3Refusal]]]:
    handler = type("Refusal", (_S3Refusal,), {})
    server = QuietHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", handler
    server.shutdown()
    server.server_close()


def test_check_reads_the_servers_expired_refusal(
    object_store: ObjectStore,
    two_versions: tuple[Seeded, Seeded],
    tmp_path: Path,
    refusing_server: tuple[str, type[_S3Refusal]],
) -> None:
    """A server whose clock is ahead refuses a link that looks valid here: still 'expired'."""
    base, handler = refusing_server
    signed = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    url = (
        f"{base}/bucket/static-export/{DOMAIN}/2026-11-21/bundle.tar.gz"
        f"?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Date={signed}&X-Amz-Expires=604800"
    )
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump({"staticExport": {"enabled": True, "bundleUrl": url}}))
    report = check(path, object_store)
    assert report.status == "expired" and report.exit_code == 1
    handler.code, handler.message = "SignatureDoesNotMatch", "The request signature we calculated"
    report = check(path, object_store)
    assert report.status == "refused" and report.exit_code == 4
    assert "SignatureDoesNotMatch" in str(report.error)


def test_check_reports_an_unreachable_server(
    object_store: ObjectStore, two_versions: tuple[Seeded, Seeded], tmp_path: Path
) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"http://127.0.0.1:{port}/b/static-export/{DOMAIN}/2026-11-21/bundle.tar.gz"
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump({"staticExport": {"enabled": True, "bundleUrl": url}}))
    report = check(path, object_store)
    assert report.status == "unreachable" and report.exit_code == 75
