"""Presigned download links that look and fail like S3's (SigV4 query style)."""

from __future__ import annotations

import hashlib
import hmac
import math
import secrets
import threading
from dataclasses import dataclass
from datetime import UTC, datetime
from urllib.parse import parse_qsl, urlencode
from xml.sax.saxutils import escape

_ALGORITHM = "AWS4-HMAC-SHA256"
_REQUIRED = (
    "X-Amz-Algorithm",
    "X-Amz-Credential",
    "X-Amz-Date",
    "X-Amz-Expires",
    "X-Amz-SignedHeaders",
    "X-Amz-Signature",
)


@dataclass
class Link:
    token: str
    job_id: str
    filename: str
    issued_at: float
    expires_at: float
    revoked: bool = False

    def expired(self, now: float) -> bool:
        return self.revoked or now > self.expires_at


@dataclass(frozen=True)
class LinkCheck:
    """The outcome of checking a download request: a link, or an S3 error to answer."""

    link: Link | None
    status: int = 200
    code: str = ""
    message: str = ""
    extra: tuple[tuple[str, str], ...] = ()


def download_filename(domain: str, when: float) -> str:
    """`{subdomain}-export-{YYYY-MM-DD}.tar.gz`, as the vendor names its downloads."""
    subdomain = domain.split(".", 1)[0] or "site"
    return f"{subdomain}-export-{datetime.fromtimestamp(when, UTC):%Y-%m-%d}.tar.gz"


def amz_date(when: float) -> str:
    return f"{datetime.fromtimestamp(when, UTC):%Y%m%dT%H%M%SZ}"


class LinkIssuer:
    """Issues signed links, remembers them, and checks requests against them."""

    def __init__(self, secret: bytes | None = None) -> None:
        self._secret = secret or secrets.token_bytes(32)
        self._links: dict[str, Link] = {}
        self._lock = threading.Lock()

    def _sign(self, path: str, params: dict[str, str]) -> str:
        canonical = path + "?" + urlencode(sorted(params.items()))
        return hmac.new(self._secret, canonical.encode(), hashlib.sha256).hexdigest()

    def issue(
        self, base_url: str, job_id: str, domain: str, ttl: float, now: float
    ) -> tuple[str, Link]:
        """A fresh link to the job's bundle, valid for `ttl` seconds from `now`."""
        token = secrets.token_hex(16)
        link = Link(token, job_id, download_filename(domain, now), now, now + ttl)
        path = f"/_dl/{token}/{link.filename}"
        params = {
            "X-Amz-Algorithm": _ALGORITHM,
            "X-Amz-Credential": f"SIMACCESSKEY/{datetime.fromtimestamp(now, UTC):%Y%m%d}"
            "/us-east-1/s3/aws4_request",
            "X-Amz-Date": amz_date(now),
            "X-Amz-Expires": str(max(1, math.ceil(ttl))),
            "X-Amz-SignedHeaders": "host",
        }
        params["X-Amz-Signature"] = self._sign(path, params)
        with self._lock:
            self._links[token] = link
        return f"{base_url}{path}?{urlencode(params)}", link

    def expire_all(self) -> None:
        with self._lock:
            for link in self._links.values():
                link.revoked = True

    def check(self, path: str, query: str, now: float) -> LinkCheck:
        """Signature first, then existence, then expiry, as S3 does."""
        params = dict(parse_qsl(query, keep_blank_values=True))
        if any(name not in params for name in _REQUIRED):
            return LinkCheck(
                None,
                403,
                "AccessDenied",
                "Query-string authentication version 4 requires the X-Amz-Algorithm, "
                "X-Amz-Credential, X-Amz-Signature, X-Amz-Date, X-Amz-SignedHeaders, "
                "and X-Amz-Expires parameters.",
            )
        signature = params.pop("X-Amz-Signature")
        if not hmac.compare_digest(self._sign(path, params), signature):
            return LinkCheck(
                None,
                403,
                "SignatureDoesNotMatch",
                "The request signature we calculated does not match the signature you provided. "
                "Check your key and signing method.",
            )
        token = path.split("/")[2] if path.count("/") >= 3 else ""
        with self._lock:
            link = self._links.get(token)
        if link is None:
            return LinkCheck(None, 404, "NoSuchKey", "The specified key does not exist.")
        if link.expired(now):
            return LinkCheck(
                None,
                403,
                "AccessDenied",
                "Request has expired",
                (
                    ("X-Amz-Expires", params["X-Amz-Expires"]),
                    ("Expires", _iso(link.expires_at)),
                    ("ServerTime", _iso(now)),
                ),
            )
        return LinkCheck(link)


def _iso(when: float) -> str:
    return f"{datetime.fromtimestamp(when, UTC):%Y-%m-%dT%H:%M:%SZ}"


def s3_error_xml(code: str, message: str, extra: tuple[tuple[str, str], ...] = ()) -> bytes:
    """S3's error document."""
    request_id = secrets.token_hex(8).upper()
    fields = "".join(f"<{name}>{escape(value)}</{name}>" for name, value in extra)
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f"<Error><Code>{code}</Code><Message>{escape(message)}</Message>{fields}"
        f"<RequestId>{request_id}</RequestId><HostId>{secrets.token_urlsafe(24)}</HostId></Error>"
    ).encode()
