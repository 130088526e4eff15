"""What the vendor API's answers mean: the JSON object of a 2xx, one MirrorError for the rest.

Promises: `json_object` gives the JSON object of a 2xx answer or raises MirrorError (a body
that is not a JSON object, or JSON nested too deeply, says "a proxy or login page?").
`status_error` maps every other status to exactly one error with one line of text, the
vendor's own words included when it gave any (`vendor_text`, at most 200 characters on one
line; an error body cut for size says so): 401/403 -> AuthError, 404 -> NotFound, 400 ->
ConfigError, 409/408/429/5xx -> TemporaryFailure with the vendor's Retry-After, a redirect
or anything else -> MirrorError. Every text passes `scrub` (the caller hides its API key).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import httpx

from mirror.errors import AuthError, ConfigError, MirrorError, NotFound, TemporaryFailure

AUTH_HINT = "check the admin API key (api.key_file or $MIRROR_API_KEY)"
RETRYABLE_STATUSES = frozenset({408, 429})
ERROR_BODY_LIMIT = 64 * 1024
VENDOR_TEXT_LIMIT = 200
CUT = "mirror_body_cut"  # response extension: the error body was over ERROR_BODY_LIMIT


def vendor_text(response: httpx.Response) -> str | None:
    """The vendor's own error text: JSON `error` (or `message`), or a short plain-text body."""
    if response.extensions.get(CUT):
        return f"an error body of over {ERROR_BODY_LIMIT // 1024} KiB, cut unread"
    try:
        body = response.json()
    except (ValueError, RecursionError):  # RecursionError: JSON nested too deeply
        body = None
    if isinstance(body, Mapping):
        for field in ("error", "message", "detail"):
            text = body.get(field)
            if isinstance(text, str) and text.strip():
                return one_line(text)
        return None
    content_type = response.headers.get("content-type", "")
    if content_type.startswith("text/plain"):
        text = response.text.strip()
        if text and len(text) <= VENDOR_TEXT_LIMIT and "<" not in text:
            return one_line(text)
    return None


def one_line(text: str) -> str:
    """`text` on one line, cut to VENDOR_TEXT_LIMIT characters."""
    line = " ".join(text.split())
    return line if len(line) <= VENDOR_TEXT_LIMIT else line[: VENDOR_TEXT_LIMIT - 3] + "..."


def json_object(response: httpx.Response, endpoint: str, what: str) -> dict[str, Any]:
    """The JSON object of a 2xx answer."""
    try:
        data = response.json()
    except (ValueError, RecursionError):  # RecursionError: JSON nested too deeply
        data = None
    if not isinstance(data, dict):
        raise MirrorError(
            f"vendor API {endpoint} ({what}) answered HTTP {response.status_code} with a body "
            "that is not a JSON object; check api.base_url (a proxy or login page?)"
        )
    return data


def status_error(
    response: httpx.Response,
    endpoint: str,
    what: str,
    *,
    retry_after: float | None,
    scrub: Callable[[str], str],
) -> MirrorError:
    """The one error a non-2xx answer to `endpoint` stands for."""
    status = response.status_code
    text = vendor_text(response)
    said = f": {text}" if text else ""
    if status in (401, 403):
        refused = "refused the admin API key" if status == 401 else f"denied {what}"
        return AuthError(
            scrub(f"vendor API {refused} (HTTP {status} on {endpoint}){said}"), hint=AUTH_HINT
        )
    if status == 404:
        return NotFound(scrub(f"{what} not found at the vendor (HTTP 404 on {endpoint}){said}"))
    if status == 400:
        return ConfigError(
            scrub(f"vendor API rejected the request for {what} (HTTP 400 on {endpoint}){said}"),
            hint="check the domain, version and paths in the export settings",
        )
    if status == 409 or status >= 500 or status in RETRYABLE_STATUSES:
        message = scrub(f"vendor API answered HTTP {status} to {endpoint} ({what}){said}")
        return _not_now(status, message, retry_after)
    if 300 <= status < 400:
        location = response.headers.get("location", "")
        return MirrorError(
            scrub(
                f"vendor API answered {endpoint} with a redirect (HTTP {status}"
                f"{' to ' + location if location else ''}); check api.base_url"
            )
        )
    return MirrorError(scrub(f"vendor API answered HTTP {status} to {endpoint} ({what}){said}"))


def _not_now(status: int, message: str, retry_after: float | None) -> TemporaryFailure:
    """A busy (409) or failing vendor: try again later. Only a start gets here with
    408/429/5xx: reads retry these until their budget is spent."""
    hint = (
        "try again later"
        if status == 409
        else "a start is not retried after such an answer, to avoid a second job; try again later"
    )
    return TemporaryFailure(message, hint=hint, retry_after=retry_after)
