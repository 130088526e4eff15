"""Preflight: whether the settings can serve a command, decided in one place before it starts.

A configuration that parses may still be one a command cannot use: a key file that is not
there, no [[exports]] for the daemon, no bucket for an import. `require(settings, purpose)`
is the one judge of that. `mirror config check --for PURPOSE` runs it, and every command
that needs settings runs it for its own purpose at its start (the daemon before it reports
ready), so a configuration `config check` approves is one the command can use, and one it
refuses, the command refuses at once with the same one line and exit code (2 for a
configuration mistake, nothing set up included; 4 for a credential source that is set up
and could not produce credentials; never a retry loop).

The purposes and the commands that start with them are `PURPOSES`; `files`, the default of
`config check`, asks only that every file the settings name (keys, key files, CA files, the
store and work directories) can be used, since one file serves both sides of the air gap
and only the operator knows which commands a host runs. Values the command line gives
instead of the settings (`--trusted-key`, `--signing-key`, `--domain`) are `Given`.

Nothing here writes anything, and no check talks to the network: the vendor API and the
object store answer for themselves when the command runs. Each check imports what it uses
inside it, so `config check --help` lists the purposes without loading boto3 or the keys.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from mirror.errors import ConfigError

if TYPE_CHECKING:
    from mirror.config import Settings
    from mirror.transferset.keys import PublicKey, SigningKey

Purpose = Literal[
    "files",
    "daemon",
    "export",
    "api",
    "db",
    "pack",
    "verify",
    "import",
    "ack",
    "push",
    "chart",
    "refresh",
]
DEFAULT_PURPOSE: Purpose = "files"
PURPOSES: dict[Purpose, str] = {
    "files": "every file the settings name is usable (the default)",
    "daemon": "mirror daemon",
    "export": "export run",
    "api": "export start|status|bundle, agent-job get|watch",
    "db": "db upgrade",
    "pack": "transfer pack (but --dry-run), bundle-self",
    "verify": "transfer verify, transfer receive",
    "import": "transfer import (and transfer receive --import)",
    "ack": "transfer ack",
    "push": "transfer push",
    "chart": "chart values|promote|rollback|history|check|gc",
    "refresh": "chart refresh",
}


@dataclass(frozen=True)
class Given:
    """What the command line gives in place of a setting."""

    trusted_keys: tuple[Path, ...] = ()
    """`--trusted-key`: instead of target.transfer_keys."""
    signing_key: Path | str | None = None
    """`bundle-self --signing-key` (a key file or a `pkcs11:` URI): instead of
    transfer.signing_key."""
    domains: tuple[str, ...] = ()
    """`chart refresh --domain`: instead of the [[exports]] domains."""


Check = Callable[["Settings", Given], None]


def require(settings: Settings, purpose: Purpose, given: Given | None = None) -> None:
    """Return when `settings` (with `given`) can serve `purpose`; otherwise raise the first
    problem as its one-line error (module docstring)."""
    for check in CHECKS[purpose]:
        check(settings, given or Given())


# ---- what a command loads, through the same checks -------------------------------------


def signing_key(settings: Settings | None, given: Given | None = None) -> SigningKey:
    """The key this side signs with: `--signing-key`, else transfer.signing_key (`settings`
    None: the command line gives the key, and no settings file is read)."""
    from mirror.outbound.pack import signing_key_from_settings
    from mirror.transferset.token import open_signing_key

    path = (given or Given()).signing_key
    if path is not None:
        return open_signing_key(path)
    if settings is None:
        raise ConfigError("no signing key given", hint="pass --signing-key FILE.key (or a URI)")
    return signing_key_from_settings(settings)


def transfer_keys(settings: Settings, given: Given | None = None) -> dict[str, PublicKey]:
    """The public keys whose transfer sets are accepted (`--trusted-key`, else
    target.transfer_keys); ConfigError (exit 2) when there is none."""
    from mirror.transferset.keys import load_trusted_keys
    from mirror.transferset.trust import require_trusted

    trusted = load_trusted_keys((given or Given()).trusted_keys or settings.target.accepted_keys())
    require_trusted(trusted)
    return trusted


def record_keys(settings: Settings) -> dict[str, PublicKey]:
    """The public keys whose verification records this air-gapped side believes
    (target.receipt_keys); ConfigError (exit 2) when there is none."""
    from mirror.transferset.keys import load_trusted_keys

    trusted = load_trusted_keys(settings.target.receipt_keys)
    if not trusted:
        raise ConfigError(
            "no target.receipt_keys: no verification record can be checked",
            hint="name this site's receipt.pub (`mirror keys show` of transfer.signing_key "
            "here) in target.receipt_keys",
        )
    return trusted


def receipt_signing_key(settings: Settings) -> SigningKey | None:
    """The key the air-gapped side signs its receipts with (its transfer.signing_key), if set."""
    from mirror.airgap.importer import receipt_key_from

    return receipt_key_from(settings.transfer.signing_key)


# ---- the checks ---------------------------------------------------------------------------


def _exports(settings: Settings, given: Given) -> None:
    if not settings.exports:
        raise ConfigError(
            f"no domains to export: no [[exports]] in {settings.source or 'the embedded defaults'}",
            hint="add an [[exports]] table with a domain; the daemon would only idle",
        )


def _api_key(settings: Settings, given: Given) -> None:
    settings.api_key()
    _vendor_ca_file(settings)


def _vendor_ca_file(settings: Settings) -> None:
    """api.ca_bundle, loaded as the vendor client loads it."""
    from mirror.vendorapi.transport import build_http_client

    build_http_client(timeout=settings.api.timeout, ca_bundle=settings.api.ca_bundle).close()


def _store_path(settings: Settings, given: Given) -> None:
    from mirror.store.blobs import BlobStore

    BlobStore(settings.store.path).check_not_a_file()


def _signing_key(settings: Settings, given: Given) -> None:
    signing_key(settings, given)


def _transfer_keys(settings: Settings, given: Given) -> None:
    transfer_keys(settings, given)


def _receipt_signing_key(settings: Settings, given: Given) -> None:
    receipt_signing_key(settings)


def _receipt_keys(settings: Settings, given: Given) -> None:
    from mirror.transferset.keys import load_trusted_keys

    for site in settings.site_list():
        load_trusted_keys(site.trusted_keys)


def _bucket(settings: Settings, given: Given) -> None:
    from mirror.airgap.s3.credentials import check_credentials

    if not settings.target.bucket:
        raise ConfigError(
            "target.bucket is not set", hint="name the internal object store's bucket"
        )
    _ca_file(settings.target.ca_bundle, "target.ca_bundle")
    check_credentials()


def _work_dir(settings: Settings, given: Given) -> None:
    from mirror.airgap.publish import check_writable

    if settings.target.work_dir is not None:
        check_writable(Path(settings.target.work_dir))


def _refresh(settings: Settings, given: Given) -> None:
    from mirror.airgap.chart.refresh import values_paths

    domains = list(given.domains) or [export.domain for export in settings.exports]
    values_paths(settings.chart.values_path, domains)


def _named_files(settings: Settings, given: Given) -> None:
    """Every file the settings name, as the commands that use it would read it."""
    from mirror.config import read_api_key_file
    from mirror.transferset.keys import load_trusted_keys
    from mirror.transferset.token import open_signing_key

    if settings.api.key_file is not None and not read_api_key_file(settings.api.key_file):
        raise ConfigError(f"the admin API key from {settings.api.key_file} is empty")
    _vendor_ca_file(settings)
    _ca_file(settings.target.ca_bundle, "target.ca_bundle")
    _store_path(settings, given)
    if settings.transfer.signing_key is not None:
        open_signing_key(settings.transfer.signing_key)
    load_trusted_keys(settings.target.accepted_keys())
    _receipt_keys(settings, given)
    _work_dir(settings, given)


def _ca_file(path: str, setting: str) -> None:
    """A CA file the settings name must load as one (boto3 reads it only at its first TLS
    connection)."""
    import ssl

    if not path:
        return
    try:
        ssl.create_default_context().load_verify_locations(cafile=path)
    except (OSError, ssl.SSLError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ConfigError(
            f"{setting}: cannot load CA file {path}: {reason}",
            hint='point it at a PEM file of the CA certificates, or set it to ""',
        ) from None


CHECKS: dict[Purpose, tuple[Check, ...]] = {
    "files": (_named_files,),
    "daemon": (_exports, _api_key, _store_path),
    "export": (_api_key, _store_path),
    "api": (_api_key,),
    "db": (_store_path,),
    "pack": (_signing_key, _store_path),
    "verify": (_transfer_keys,),
    "import": (_bucket, _transfer_keys, _receipt_signing_key, _work_dir),
    "ack": (_receipt_keys, _store_path),
    "push": (_signing_key, _store_path, _bucket),
    "chart": (_bucket,),
    "refresh": (_bucket, _refresh),
}
