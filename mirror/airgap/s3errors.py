"""What an S3 API's refusal means: botocore errors as one-line MirrorErrors with exit codes.

Promises: the message names the bucket (and key) and the error code, never a
credential and never the server's prose; a refused credential is AuthError
(exit 4), a missing bucket NotFound (3), throttling, 5xx and unreachable
servers TemporaryFailure (75), a TLS failure ConfigError (2).
"""

from __future__ import annotations

import botocore.exceptions

from mirror.errors import (
    AuthError,
    ConfigError,
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
        code, status = error_code(exc), http_status(exc)
        if code in MISSING_BUCKET_CODES:
            return NotFound(f"{where} does not exist", hint="create it or fix target.bucket")
        if code in AUTH_CODES or status == 403:
            return AuthError(
                f"S3 refused the credentials for {where} ({code or status})",
                hint="check the S3 credentials (environment, profile or role) "
                "and the bucket policy",
            )
        if code in TEMPORARY_CODES or status >= 500:
            return TemporaryFailure(
                f"S3 {action} of {thing} failed with {code or status}; try again later"
            )
        return OperationFailed(f"S3 {action} of {thing} failed with {code or status}")
    if isinstance(exc, botocore.exceptions.NoCredentialsError):
        return AuthError(
            "no S3 credentials found",
            hint="set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, AWS_PROFILE or a role",
        )
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
