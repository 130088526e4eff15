"""Presigned links and S3 error bodies: one reading for the vendor download and chart check."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from mirror.errors import ConfigError
from mirror.links import (
    is_expired_answer,
    link_expired,
    link_expiry,
    s3_error,
    safe_url,
)

T0 = datetime(2026, 11, 22, 2, 0, tzinfo=UTC)
SIGNED = (
    "https://h.example/b/d/v/bundle.tar.gz?X-Amz-Date=20261122T020000Z&X-Amz-Expires=3600"
    "&X-Amz-Signature=secret"
)


def test_safe_url_drops_the_signature() -> None:
    assert safe_url(SIGNED) == "https://h.example/b/d/v/bundle.tar.gz"
    assert "secret" not in safe_url(SIGNED)


def test_link_expiry_reads_sigv4_and_sigv2_and_refuses_garbage() -> None:
    assert link_expiry(SIGNED) == T0 + timedelta(hours=1)
    assert link_expiry("https://h/x?Expires=1795312800") == datetime.fromtimestamp(1795312800, UTC)
    assert link_expiry("https://h/x") is None
    with pytest.raises(ConfigError, match="unreadable signature parameters"):
        link_expiry("https://h/x?X-Amz-Date=yesterday&X-Amz-Expires=1")


def test_link_expired_prefers_the_announced_time_and_falls_back_to_the_signature() -> None:
    later = T0 + timedelta(hours=2)
    assert link_expired(SIGNED, None, later)
    assert not link_expired(SIGNED, None, T0)
    assert not link_expired(SIGNED, T0 + timedelta(hours=3), later)
    assert link_expired("https://h/x", T0, T0)
    assert not link_expired("https://h/x", None, later)
    assert not link_expired("https://h/x?Expires=soon", None, later)  # the server will say


def test_s3_error_bodies() -> None:
    body = "<Error><Code> AccessDenied </Code><Message>Request has expired</Message></Error>"
    error = s3_error(body)
    assert (error.code, error.message) == ("AccessDenied", "Request has expired")
    assert error.detail() == "AccessDenied: Request has expired"
    assert s3_error("<html>bad gateway</html>").detail() == ""
    assert s3_error(f"<Code>{'x' * 500}</Code>").code == ""
    assert is_expired_answer(403, body)
    assert not is_expired_answer(404, body)
    assert not is_expired_answer(403, "<Code>SignatureDoesNotMatch</Code>")
