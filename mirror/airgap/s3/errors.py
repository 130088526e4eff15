"""What an S3 API's refusal means: botocore errors as one-line MirrorErrors with exit codes.

Promises: the message names the bucket (and key) and the error code, never a
credential and never the server's prose; a refused credential is AuthError
(exit 4), no credentials at all ConfigError (2), a missing bucket NotFound (3),
throttling, 5xx and unreachable servers TemporaryFailure (75), a TLS failure
ConfigError (2). Three refusals are named for what they are, with their remedy: a
clock the server finds too far off (ConfigError: retrying cannot help), a server out
of space (TemporaryFailure, named as such), and bytes that failed the server's
checksum (IntegrityError: damaged on the way; nothing of them is kept).
"""

from __future__ import annotations

import os

import botocore.exceptions

from mirror.errors import (
    AuthError,
    ConfigError,
    IntegrityError,
    MirrorError,
    NotFound,
    OperationFailed,
    TemporaryFailure,
)

AUTH_CODES = frozenset(
    {
        "403",
        "AccessDenied",
        "InvalidAccessKeyId",
        "SignatureDoesNotMatch",
        "InvalidToken",
        "ExpiredToken",
        "TokenRefreshRequired",
        "AuthorizationHeaderMalformed",
        "InvalidSecurity",
        "AllAccessDisabled",
    }
)
MISSING_BUCKET_CODES = frozenset({"NoSuchBucket"})
MISSING_KEY_CODES = frozenset({"NoSuchKey", "404", "NotFound"})
CONFLICT_CODES = frozenset({"PreconditionFailed", "412", "ConditionalRequestConflict", "409"})
UNSUPPORTED_CODES = frozenset({"NotImplemented", "501"})
SKEW_CODES = frozenset({"RequestTimeTooSkewed"})
DIGEST_CODES = frozenset(
    {"BadDigest", "InvalidDigest", "XAmzContentSHA256Mismatch", "XAmzContentChecksumMismatch"}
)
CAPACITY_CODES = frozenset(
    {"XMinioStorageFull", "InsufficientStorage", "StorageFull", "EntityTooLarge", "507"}
)
# Servers that report a full disk as InternalError say so only in the message.
CAPACITY_MESSAGES = ("no writable volumes", "no space left", "storage full", "disk full")
WRITES = frozenset({"PUT", "upload part", "create multipart upload", "probe"})
TEMPORARY_CODES = frozenset(
    {"SlowDown", "ServiceUnavailable", "InternalError", "RequestTimeout", "Throttling", "503"}
)


def error_code(exc: botocore.exceptions.ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", "") or "")


def http_status(exc: botocore.exceptions.ClientError) -> int:
    return int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)


def s3_failure(exc: Exception, action: str, *, thing: str, where: str) -> MirrorError:
    """The MirrorError for a failed S3 `action` on `thing` (at `where`)."""
    if isinstance(exc, botocore.exceptions.ClientError):
        return _refusal(exc, action, thing=thing, where=where)
    if isinstance(exc, botocore.exceptions.NoCredentialsError):
        return no_credentials()
    if isinstance(exc, botocore.exceptions.SSLError):
        return ConfigError(
            f"TLS verification failed for the object store ({where})",
            hint="set target.ca_bundle to the internal CA file",
        )
    if isinstance(
        exc,
        botocore.exceptions.EndpointConnectionError
        | botocore.exceptions.ConnectionClosedError
        | botocore.exceptions.ReadTimeoutError
        | botocore.exceptions.ConnectTimeoutError,
    ):
        return TemporaryFailure(
            f"cannot reach the object store for {where}",
            hint="check target.endpoint_url and the network",
        )
    if isinstance(exc, botocore.exceptions.BotoCoreError):
        return OperationFailed(f"S3 {action} of {thing} failed: {type(exc).__name__}")
    raise exc


CREDENTIAL_FILES = ("AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE")


def no_credentials() -> ConfigError:
    """No S3 credentials anywhere: nothing was refused, nothing was set up (exit 2, as for
    the admin API key). A file the environment names for them that is not there (boto3
    passes over it in silence) is named."""
    for variable in CREDENTIAL_FILES:
        named = os.environ.get(variable)
        if named and not os.path.isfile(os.path.expanduser(named)):
            return ConfigError(
                f"no S3 credentials found: ${variable} names {named}, which does not exist",
                hint=f"mount or write the file there, or unset {variable}",
            )
    return ConfigError(
        "no S3 credentials found",
        hint="set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, AWS_PROFILE or a role",
    )


def _refusal(
    exc: botocore.exceptions.ClientError, action: str, *, thing: str, where: str
) -> MirrorError:
    """What the server's answer (an error code, an HTTP status) means."""
    code, status = error_code(exc), http_status(exc)
    if code in MISSING_BUCKET_CODES:
        return NotFound(f"{where} does not exist", hint="create it or fix target.bucket")
    named = _named_refusal(exc, action, thing=thing, where=where)
    if named is not None:
        return named
    if code == "AccessDenied" and action in WRITES:
        return AuthError(
            f"S3 refused {action} of {thing} (AccessDenied): these credentials may not "
            f"write to {where}",
            hint="use the import's identity (read, write, list), not the cluster's "
            "read-only one, or allow writes under target.prefix in the bucket policy",
        )
    if code in AUTH_CODES or status == 403:
        return AuthError(
            f"S3 refused the credentials for {where} ({code or status})",
            hint="check the S3 credentials (environment, profile or role) and the bucket policy",
        )
    if (code in TEMPORARY_CODES or status >= 500) and action in WRITES:
        return TemporaryFailure(
            f"S3 {action} of {thing} failed with {code or status}: the server could not "
            "store it (after retries)",
            hint="if it recurs, the server is likely out of space or volumes (SeaweedFS "
            "logs 'No writable volumes'): free space or add volumes, then run again",
        )
    if code in TEMPORARY_CODES or status >= 500:
        return TemporaryFailure(
            f"S3 {action} of {thing} failed with {code or status}; try again later"
        )
    return OperationFailed(f"S3 {action} of {thing} failed with {code or status}")


def _named_refusal(
    exc: botocore.exceptions.ClientError, action: str, *, thing: str, where: str
) -> MirrorError | None:
    """Clock skew, a full server and a failed checksum, each by its name and remedy."""
    code, status = error_code(exc), http_status(exc)
    message = str(exc.response.get("Error", {}).get("Message", "") or "").lower()
    if code in SKEW_CODES:
        return ConfigError(
            f"the object store ({where}) refused the request: this host's clock differs "
            "from the server's by more than it allows (RequestTimeTooSkewed)",
            hint="set the clock by NTP (chronyc makestep or timedatectl set-ntp true); run again",
        )
    if code in CAPACITY_CODES or status == 507 or any(m in message for m in CAPACITY_MESSAGES):
        return TemporaryFailure(
            f"the object store ({where}) is out of space: S3 {action} of {thing} "
            f"failed with {code or status}",
            hint="free space or add volumes on the S3 server, then run again",
        )
    if code in DIGEST_CODES:
        return IntegrityError(
            f"S3 {action} of {thing}: the server found the bytes damaged on the way "
            f"({code}); nothing of them was kept",
            hint="run again; if it recurs, check the network path to the object store",
        )
    return None
