"""Presigned links and S3's error answers: one reading for the vendor download and `chart check`.

A presigned link carries its secret in the query string and its expiry in the
signature parameters; S3 explains a refusal in a small XML body.

Promises:
- `safe_url` drops the query string (the signature), so a link can go into a
  log line or an error message without its credential.
- `link_expiry` reads when a SigV4 (`X-Amz-Date` + `X-Amz-Expires`) or SigV2
  (`Expires`) link stops working; None for an unsigned link; ConfigError when the
  parameters are there but unreadable.
- `s3_error` reads `<Code>` and `<Message>` of an S3 error body (bounded lengths);
  `is_expired_answer` says whether an answer is S3's "the link has expired".
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from urllib.parse import parse_qsl, urlsplit

from mirror.errors import ConfigError

_S3_CODE = re.compile(r"<Code>\s*([^<]{1,100}?)\s*</Code>")
_S3_MESSAGE = re.compile(r"<Message>\s*([^<]{1,300}?)\s*</Message>")


def safe_url(url: str) -> str:
    """The link without its query string (the signature), for logs and messages."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}{parts.path}"


def link_expiry(url: str) -> datetime | None:
    """When a presigned link expires, from its signature (SigV4 or SigV2); None if unsigned."""
    query = {name.lower(): value for name, value in parse_qsl(urlsplit(url).query)}
    try:
        if "x-amz-date" in query and "x-amz-expires" in query:
            signed = datetime.strptime(query["x-amz-date"], "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)
            return signed + timedelta(seconds=int(query["x-amz-expires"]))
        if "expires" in query:
            return datetime.fromtimestamp(int(query["expires"]), UTC)
    except (ValueError, OverflowError):
        raise ConfigError(
            "bundleUrl has unreadable signature parameters (X-Amz-Date/X-Amz-Expires or Expires)"
        ) from None
    return None


def link_expired(url: str, announced: datetime | None, now: datetime) -> bool:
    """True when the link's expiry has passed: the announced one, else its signature's
    (an unreadable signature counts as no expiry: the server will say so)."""
    expires_at = announced
    if expires_at is None:
        try:
            expires_at = link_expiry(url)
        except ConfigError:
            return False
    return expires_at is not None and now >= expires_at


@dataclass(frozen=True)
class S3Error:
    """`<Code>` and `<Message>` of an S3 error body; "" where absent."""

    code: str
    message: str

    def detail(self) -> str:
        """`Code: Message`, either alone, or "" when the body said neither."""
        return ": ".join(part for part in (self.code, self.message) if part)


def s3_error(body: str) -> S3Error:
    code = _S3_CODE.search(body)
    message = _S3_MESSAGE.search(body)
    return S3Error(code.group(1) if code else "", message.group(1) if message else "")


def is_expired_answer(status: int, body: str) -> bool:
    """S3's answer to an expired presigned link: 403 AccessDenied `Request has expired`."""
    lowered = body.lower()
    return status == 403 and (
        "request has expired" in lowered or ("accessdenied" in lowered and "expired" in lowered)
    )
