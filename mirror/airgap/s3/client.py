"""The boto3 S3 client the air-gapped side uses: timeouts, a deadline, how bytes are signed.

Promises:
- One S3 request, its retries included, ends within `target.deadline` plus one
  `target.read_timeout`: a hanging or dead endpoint is a TemporaryFailure (exit 75)
  naming the endpoint, not a command that waits twelve minutes.
- A streamed body is bounded too, not only each socket read of it: a read whose next piece
  has not come within `target.deadline` is given up (mirror.airgap.s3.paced, which every
  body `S3Bucket` reads goes through; `body_bounds` says the client's bounds).
- Payloads are not hashed for SigV4 (UNSIGNED-PAYLOAD): every body that is written
  carries its own checksum for the server to verify instead (Content-MD5 on small
  objects; a CRC32 or MD5 on each upload part, mirror.airgap.s3.multipart), so each byte
  is hashed once for sha256 and once by a cheap checksum, not twice by sha256.
  Headers, the method and the key stay signed.
- Credentials come from boto3's usual chain and are registered as secrets, so no log
  line can carry them.
"""

from __future__ import annotations

import queue
import threading
import time
import weakref
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import boto3
import botocore.config

from mirror.config import TargetSettings
from mirror.errors import TemporaryFailure
from mirror.logs import redacted_url, register_secret
from mirror.units import format_duration

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client
else:
    S3Client = Any

CONNECT_TIMEOUT = 10.0
DEADLINE_KEY = "mirror_deadline"

_BOUNDS: weakref.WeakKeyDictionary[Any, tuple[float, float]] = weakref.WeakKeyDictionary()


class DeadlineExceeded(TemporaryFailure):
    """The object store did not answer one request (and its retries) within the deadline."""


def make_s3_client(target: TargetSettings, *, max_attempts: int = 5) -> S3Client:
    """A boto3 S3 client for `target`: endpoint, region, addressing style, CA bundle,
    retries bounded by `target.deadline`."""
    config = botocore.config.Config(
        region_name=target.region or None,
        signature_version="s3v4",
        s3={"addressing_style": target.addressing_style, "payload_signing_enabled": False},
        retries={"max_attempts": max_attempts, "mode": "standard"},
        connect_timeout=min(CONNECT_TIMEOUT, target.read_timeout),
        read_timeout=target.read_timeout,
        request_checksum_calculation="when_required",
        response_checksum_validation="when_required",
    )
    session = boto3.session.Session()
    credentials = session.get_credentials()  # mistakes in its source: mirror.airgap.s3.credentials
    if credentials is not None:
        frozen = credentials.get_frozen_credentials()
        for secret in (frozen.access_key, frozen.secret_key, frozen.token):
            register_secret(secret)
    # a login in the endpoint's URL (a proxy's basic auth) is a secret too
    register_secret(urlsplit(target.endpoint_url).password)
    verify: str | bool = target.ca_bundle or True
    client = session.client(
        "s3", endpoint_url=target.endpoint_url or None, verify=verify, config=config
    )
    bound_by_deadline(client, target.deadline, target.read_timeout)
    return client


def bound_by_deadline(client: S3Client, deadline: float, read_timeout: float = 0.0) -> None:
    """Make every request of `client` give up once `deadline` seconds have passed since
    its first attempt: a retry that would start later raises DeadlineExceeded instead, and
    an attempt still waiting for its answer `read_timeout` after the deadline is given up
    (a server that trickles a byte within every read timeout would hold it for ever)."""
    endpoint = redacted_url(client.meta.endpoint_url)
    _BOUNDS[client] = (deadline, read_timeout)

    def exceeded(operation_name: str) -> DeadlineExceeded:
        return DeadlineExceeded(
            f"the object store at {endpoint} did not answer {operation_name or 'a request'} "
            f"within {format_duration(deadline)}",
            hint="check that the S3 server is up and reachable (target.endpoint_url); "
            "target.deadline sets how long to wait",
        )

    def start(context: dict[str, Any], **_: Any) -> None:
        context.setdefault(DEADLINE_KEY, time.monotonic() + deadline)

    def check(request: Any, operation_name: str = "", **_: Any) -> None:
        ends = getattr(request, "context", {}).get(DEADLINE_KEY)
        if ends is not None and time.monotonic() > ends:
            raise exceeded(operation_name)

    def send_within(request: Any, event_name: str = "", **_: Any) -> Any:
        ends = (getattr(request, "context", None) or {}).get(DEADLINE_KEY)
        if ends is None:
            return None  # botocore sends it
        waited = max(0.0, ends - time.monotonic()) + read_timeout
        http = client._endpoint.http_session  # type: ignore[attr-defined]  # botocore sends
        answer = _send_bounded(http, request, waited)
        if answer is None:
            raise exceeded(event_name.rsplit(".", 1)[-1])
        return answer

    client.meta.events.register("before-call.s3", start)
    client.meta.events.register("request-created.s3", check)
    client.meta.events.register("before-send.s3", send_within)


def body_bounds(client: S3Client) -> tuple[float, float] | None:
    """(deadline, read_timeout) of a client `bound_by_deadline` bounds; None for another."""
    return _BOUNDS.get(client)


def _send_bounded(http: Any, request: Any, seconds: float) -> Any:
    """botocore's own send (and, unless the answer is streamed, reading its body) in a daemon
    thread; its answer, or None when it has not come within `seconds`. Its exceptions are
    raised here, so botocore's retries treat them as they would their own."""
    box: queue.Queue[tuple[Any, BaseException | None]] = queue.Queue(maxsize=1)

    def run() -> None:
        try:
            response = http.send(request)
            if not request.stream_output:
                _ = response.content
            box.put((response, None))
        except BaseException as exc:  # handed to the waiting thread
            box.put((None, exc))

    threading.Thread(target=run, name="s3-send", daemon=True).start()
    try:
        response, error = box.get(timeout=seconds)
    except queue.Empty:
        return None
    if error is not None:
        raise error
    return response
