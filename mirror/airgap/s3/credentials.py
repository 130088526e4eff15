"""Opening the object store from the settings, with the S3 credential source's mistakes named.

boto3 resolves credentials when the client is made: an `$AWS_PROFILE` naming no profile,
a shared credentials file with half a key pair, an unparsable config file or a
`credential_process` that fails surface there as botocore exceptions that name nothing an
operator would look for. `open_object_store` turns each into one line with its exit code:
a mistake in the configuration (a profile that does not exist, a file that is incomplete
or unreadable) is ConfigError (exit 2); a source that is set up but could not produce
credentials (a failing credential process, an expired SSO login) is AuthError (exit 4).
Nothing the source printed is repeated: it may hold a secret.
"""

from __future__ import annotations

import os

import boto3.session
import botocore.exceptions

from mirror.airgap.s3.errors import no_credentials
from mirror.airgap.s3.objectstore import ObjectStore
from mirror.config import TargetSettings
from mirror.errors import AuthError, ConfigError, MirrorError

_HINT = "S3 credentials come from boto3's usual chain: the environment, AWS_PROFILE, a role"


def open_object_store(target: TargetSettings) -> ObjectStore:
    """The ObjectStore of `target`; ConfigError when the bucket is unset or the credential
    source is misconfigured, AuthError when it cannot produce credentials (module
    docstring)."""
    if not target.bucket:
        raise ConfigError(
            "target.bucket is not set", hint="name the internal object store's bucket"
        )
    try:
        return ObjectStore.from_settings(target)
    except botocore.exceptions.BotoCoreError as exc:
        raise credential_source_error(exc) from None


def check_credentials() -> None:
    """Resolve the S3 credentials as `open_object_store`'s client does; raise what its first
    request would meet when the source is set up wrong or yields nothing (`no_credentials`:
    a credentials file the environment names that is not there is named)."""
    try:
        credentials = boto3.session.Session().get_credentials()
    except botocore.exceptions.BotoCoreError as exc:
        raise credential_source_error(exc) from None
    if credentials is None:
        raise no_credentials()


def credential_source_error(exc: botocore.exceptions.BotoCoreError) -> MirrorError:
    """One line for an error of the S3 credential source (module docstring)."""
    if isinstance(exc, botocore.exceptions.ProfileNotFound):
        profile = exc.kwargs.get("profile", os.environ.get("AWS_PROFILE", ""))
        return ConfigError(
            f"the AWS profile {profile!r} (from $AWS_PROFILE or AWS_DEFAULT_PROFILE) does not "
            "exist in the AWS config or credentials file",
            hint="name a profile that exists there, or unset AWS_PROFILE",
        )
    if isinstance(exc, botocore.exceptions.PartialCredentialsError):
        provider = exc.kwargs.get("provider", "the credential source")
        missing = exc.kwargs.get("cred_var", "a value")
        return ConfigError(
            f"incomplete S3 credentials in {provider}: {missing} is missing", hint=_HINT
        )
    if isinstance(
        exc,
        botocore.exceptions.ConfigParseError
        | botocore.exceptions.InvalidConfigError
        | botocore.exceptions.ConfigNotFound,
    ):
        return ConfigError(f"the AWS config for the S3 credentials is unusable: {exc}", hint=_HINT)
    if isinstance(exc, botocore.exceptions.CredentialRetrievalError):
        provider = exc.kwargs.get("provider", "the credential source")
        return AuthError(f"the S3 credentials could not be obtained from {provider}", hint=_HINT)
    return AuthError(f"the S3 credentials could not be obtained: {type(exc).__name__}", hint=_HINT)
