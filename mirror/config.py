"""Settings: TOML in, validated and typed settings out, with errors that name the key and file.

Where the file is: `--config`, then `$MIRROR_CONFIG`, then `/etc/mirror/config.toml`.
A path given explicitly must exist. When no file is found at all the command
refuses (exit 2) and names the places it looked, unless the caller explicitly
allows the embedded defaults (`mirror --defaults`, for trying things out): a
host that silently runs on defaults writes to places nobody chose. Unknown keys
are refused, so a typo never silently falls back to a default.

Secrets are never held in the settings themselves: `api_key()` reads the key
when it is needed, from `$MIRROR_API_KEY`, the file `api.key_file`, or the
systemd credential `admin-api-key` under `$CREDENTIALS_DIRECTORY`.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import re
import socket
import tomllib
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
)

from mirror.errors import ConfigError
from mirror.hostnames import normalize_domain
from mirror.logs import register_secret
from mirror.sites import DEFAULT_SITE, BaseRule, check_site_name
from mirror.units import parse_duration, parse_size

if TYPE_CHECKING:
    from mirror.archive import ArchiveLimits

log = logging.getLogger(__name__)

DEFAULT_CONFIG_PATH = Path("/etc/mirror/config.toml")
CREDENTIAL_NAME = "admin-api-key"
API_KEY_ENV = "MIRROR_API_KEY"
CONFIG_ENV = "MIRROR_CONFIG"

DEPRECATED_TRUSTED_KEYS = (
    "target.trusted_keys is deprecated (it meant two things): name the keys for what they "
    "check, target.transfer_keys on the air-gapped side (whose transfer sets are accepted) "
    "or transfer.receipt_keys on the connected side (whose receipts are believed)"
)

Duration = Annotated[float, BeforeValidator(parse_duration)]
Size = Annotated[int, BeforeValidator(parse_size)]


def _signing_key_source(value: object) -> object:
    """A `pkcs11:` URI (RFC 7512: a key in a token) stays as written; anything else is a
    key file's path."""
    if isinstance(value, str) and value[:7].lower() != "pkcs11:":
        return Path(value)
    return value


KeySource = Annotated[Path | str, BeforeValidator(_signing_key_source)]
"""Where a signing key is: a key file, or a key in a PKCS#11 token named by a `pkcs11:` URI
(`mirror.transferset.token.open_signing_key` loads either)."""
_TOLERANCE = re.compile(r"^\s*(?:(\d+(?:\.\d+)?)%)?\s*(?:or\s*)?(\d+)?\s*$")


def parse_page_tolerance(value: Any) -> tuple[float, int]:
    """`"2% or 2"` (a share of the reported pageCount or a number of pages, whichever is
    larger), `"5%"`, or `3` pages: as (percent, pages)."""
    if isinstance(value, tuple):
        return value
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return (0.0, value)
    match = _TOLERANCE.match(value) if isinstance(value, str) else None
    if not match or not any(match.groups()):
        raise ValueError('expected a share and/or pages such as "2% or 2", "5%" or 3')
    return (float(match.group(1) or 0), int(match.group(2) or 0))


PageTolerance = Annotated[tuple[float, int], BeforeValidator(parse_page_tolerance)]


def _normalize_domains(value: list[str] | None) -> list[str] | None:
    return None if value is None else [normalize_domain(domain) for domain in value]


Domain = Annotated[str, AfterValidator(normalize_domain)]
"""A domain as written in the settings, normalized (mirror.hostnames)."""
Domains = Annotated[list[str] | None, AfterValidator(_normalize_domains)]
"""Some domains (unset: every one), each normalized."""
SiteName = Annotated[str, AfterValidator(check_site_name)]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ApiSettings(_Section):
    """The vendor's admin API."""

    base_url: str = "https://api.mintlify.com"
    key_file: Path | None = None
    key_prefix: str = "mint_"
    project_id: str = ""
    timeout: Duration = 30.0
    ca_bundle: str = ""
    export_flow: Literal["global", "project"] = "global"
    max_starts_per_hour: int = Field(default=10, ge=1)
    poll_interval: Duration = 5.0
    max_poll_interval: Duration = 60.0
    retry_attempts: int = Field(default=6, ge=1)
    retry_timeout: Duration = 300.0
    job_timeout: Duration = Field(default=4 * 3600.0, gt=0)

    @field_validator("base_url")
    @classmethod
    def _url(cls, value: str) -> str:
        if not re.match(r"^https?://[^/\s]+", value):
            raise ValueError(f"must be an http(s) URL, got {value!r}")
        return value.rstrip("/")


class DownloadSettings(_Section):
    """Bundle downloads from the storage host's presigned links."""

    min_speed: Size = Field(default=1024, ge=0)
    stall_time: Duration = Field(default=30.0, gt=0)


class StoreSettings(_Section):
    """The connected side's checksummed store."""

    path: Path = Path("/var/lib/mirror")
    database: str = ""
    keep: int = Field(default=10, ge=1)
    allow_case_twins: bool = False

    def archive_limits(self) -> ArchiveLimits:
        """The archive checks for bundles entering this store."""
        from mirror.archive import ArchiveLimits

        return ArchiveLimits(allow_case_twins=self.allow_case_twins)

    def database_url(self) -> str:
        return self.database or f"sqlite:///{self.path / 'mirror.db'}"


class ExportSettings(_Section):
    """One domain to export on a schedule."""

    domain: Domain
    every: Duration = Field(default=6 * 3600.0, gt=0)  # 0 would spend every start on one domain
    version: str | None = None
    paths: list[str] | None = None
    # Completeness (mirror.archive.completeness): fewer pages than the vendor's pageCount minus this
    # refuses the version; more broken internal links than `max_broken_links` refuses it too
    # (unset: they are recorded and shown, never refused).
    page_tolerance: PageTolerance = (2.0, 2)
    max_broken_links: int | None = Field(default=None, ge=0)


class DaemonSettings(_Section):
    listen: str = "127.0.0.1:9464"
    concurrency: int = Field(default=4, ge=1, le=64)
    jitter: float = Field(default=0.1, ge=0.0, le=0.5)
    lease: Duration = Field(default=30.0, ge=1.0)
    replica_host: str = ""

    @field_validator("listen")
    @classmethod
    def _listen(cls, value: str) -> str:
        if value and not re.match(r"^(\[[0-9a-fA-F:]+\]|[^:\s]+):\d{1,5}$", value):
            raise ValueError(f"must be HOST:PORT (or empty to turn off), got {value!r}")
        return value


SPOOL_BUDGET = 16 * 1024**3
"""The default `transfer.spool_budget` (README, "One-way link")."""


class TransferSettings(_Section):
    """The connected side's transfer sets: the key that signs them, and the keys whose
    receipts it believes for the site `default` (without `[[sites]]`)."""

    signing_key: KeySource | None = None
    """The key this side signs with (sets on the connected side, receipts on the air-gapped
    side): a key file, or a `pkcs11:` URI naming a key in a token."""
    receipt_keys: list[Path] = Field(default_factory=list)
    source_id: str = Field(default_factory=socket.gethostname)
    max_size: Size = 4 * 1024**3
    delta_max_ratio: float = Field(default=0.5, ge=0.0, le=1.0)
    """A version goes as a delta only when its delta blob is at most this share of the
    bundle (0 never sends deltas; `transfer pack --full` overrides it per pack)."""
    spool_budget: Size = Field(default=SPOOL_BUDGET, gt=0)
    """Disk the one-way receiver's sessions not yet landed may hold in its spool
    (mirror.oneway.budget): datagrams are not authenticated, so this bounds what forged
    ones can write. A set larger than this is not received."""


class TargetSettings(_Section):
    """The air-gapped object store. S3 credentials come from boto3's usual chain."""

    endpoint_url: str = ""
    bucket: str = ""
    prefix: str = "static-export"
    region: str = "us-east-1"
    ca_bundle: str = ""
    addressing_style: Literal["path", "virtual", "auto"] = "path"
    transfer_keys: list[Path] = Field(default_factory=list)
    """The public keys whose transfer sets this air-gapped side accepts."""
    receipt_keys: list[Path] = Field(default_factory=list)
    """The public keys whose verification records this air-gapped side believes (its own
    receipt key's `receipt.pub`, and any key it signed with before a rotation): `chart
    check --provenance` and `mirror evidence` check each version's record with them. The
    connected side's `transfer.receipt_keys` names the same keys, for receipts."""
    trusted_keys: list[Path] = Field(default_factory=list)
    """Deprecated (`DEPRECATED_TRUSTED_KEYS`): stands in for `transfer_keys` here and for
    `transfer.receipt_keys` on the connected side, whichever is not set."""
    url_mode: Literal["presigned", "plain", "serve"] = "presigned"
    """How `chart values` links the bundle: `presigned` (an S3 link, 7 days at most), `plain`
    (`public_base_url`: a bucket readable in the cluster) or `serve` (`serve.public_url`: the
    URL of `mirror serve`, which never expires)."""
    presign_ttl: Duration = 7 * 86400.0
    presign_endpoint_url: str = ""
    public_base_url: str = ""
    work_dir: Path | None = None
    """Where `transfer import` rebuilds versions carried as deltas (None: the system's
    temporary directory); it needs room for the version's files plus its base's archive."""
    deadline: Duration = 60.0
    """The longest one S3 request may take, its retries included: a hanging or dead
    endpoint ends the command (exit 75) after about this long plus one read timeout."""
    read_timeout: Duration = 20.0
    part_checksum: Literal["crc32", "md5"] = "crc32"
    """The checksum each uploaded part and object carries for the server to verify
    (`x-amz-checksum-crc32`, or `Content-MD5` for servers without the newer headers)."""
    site: str = ""
    """This air-gapped installation's site name (issue 22): when set, `transfer import`
    refuses a set packed for another named site (exit 5). Empty: any set."""
    conditional_writes: Literal["require", "emulate"] = "require"
    """`require`: refuse a server that ignores `If-None-Match`/`If-Match`; `emulate`: use
    it anyway, checking with HEAD before each write (safe against re-runs, not against
    two imports writing the same bucket at the same moment)."""

    def accepted_keys(self) -> list[Path]:
        """The public keys whose transfer sets are accepted: `transfer_keys`, or the
        deprecated `trusted_keys` when it is not set."""
        return list(self.transfer_keys or self.trusted_keys)

    @field_validator("endpoint_url", "presign_endpoint_url", "public_base_url")
    @classmethod
    def _url(cls, value: str) -> str:
        """Empty (AWS's own endpoint; no other name for the pods), or an http(s) URL: boto3
        would take `minio:9000` for a bare path and fail on the first request."""
        if value and not re.match(r"^https?://[^/\s]+", value):
            raise ValueError(f"must be an http(s) URL like https://s3.internal:9000, got {value!r}")
        return value

    @field_validator("presign_ttl")
    @classmethod
    def _ttl(cls, value: float) -> float:
        if not 1 <= value <= 7 * 86400:
            raise ValueError("must be between 1s and 7d (the S3 limit for presigned links)")
        return value

    @field_validator("site")
    @classmethod
    def _site(cls, value: str) -> str:
        return check_site_name(value) if value else value

    @field_validator("prefix")
    @classmethod
    def _prefix(cls, value: str) -> str:
        return value.strip("/")


class SiteSettings(_Section):
    """One air-gapped site fed from this host (`[[sites]]`, issue 22; `mirror.sites`): its
    own chain of sets, acknowledged versions and delta bases. `trusted_keys` are the keys
    its receipts are signed with; `domains` (unset: every one) the domains it takes;
    `delta_bases` what a delta may go against (`acknowledged`: only what the site's
    receipts confirmed; `packed`: also what an earlier set for it carried, today's rule)."""

    name: SiteName
    trusted_keys: list[Path] = Field(default_factory=list)
    domains: Domains = None
    delta_bases: BaseRule = "acknowledged"

    def takes(self, domain: str) -> bool:
        return self.domains is None or domain in self.domains


class ServeSettings(_Section):
    """`mirror serve` (mirror.serve): the bucket's versions over HTTP for the vendor's pods,
    verified, from a local cache."""

    listen: str = "0.0.0.0:8080"
    public_url: str = ""
    """The address the pods use (`http://mirror-serve.docs-mirror.svc:8080`): the base of
    the links `chart values` renders with `target.url_mode = "serve"`."""
    cache_dir: Path = Path("/var/cache/mirror/serve")
    cache_max: Size = Field(default=20 * 1024**3, ge=0)
    """Bytes of bundles kept; least recently served go first, never a domain's current
    version or its rollback target."""
    idle_timeout: Duration = Field(default=30.0, gt=0)
    """A client that sends or takes nothing for this long is cut (a stalled pod never holds
    a thread longer)."""
    header_timeout: Duration = Field(default=10.0, gt=0)
    """A request's line and headers must all arrive within this time of its first byte, or
    it is answered 408 and cut (a client trickling bytes under idle_timeout holds no slot
    longer)."""
    drain_timeout: Duration = Field(default=25.0, ge=0)
    """On SIGTERM: transfers under way may finish for this long (then they are cut); below
    Kubernetes' terminationGracePeriodSeconds less the preStop delay."""
    poll_interval: Duration = Field(default=30.0, ge=1.0)
    """How often the bucket's pointers are read: the moving URL follows `chart promote` and
    `chart rollback` within this time (plus one bucket deadline)."""
    max_clients: int = Field(default=512, ge=1)
    """Connections served at once; one more is answered 503 (but /healthz and /readyz, which
    have slots of their own)."""
    domains: Domains = None
    """The domains to serve (unset: every domain with an index in the bucket)."""
    require_provenance: bool = False
    """Refuse (502) a version without a provenance statement signed by `target.transfer_keys`
    (a version imported from a set that carried none); with it unset, a version's statement
    is still verified whenever it has one and keys are trusted."""

    @field_validator("listen")
    @classmethod
    def _listen(cls, value: str) -> str:
        return check_listen(value)

    @field_validator("public_url")
    @classmethod
    def _url(cls, value: str) -> str:
        return check_public_url(value)


def check_public_url(value: str) -> str:
    """`serve.public_url` without its trailing slash: empty, or an http(s) URL the bundle
    paths can be appended to. A query or a fragment would swallow the path (`…/?x=1/domains/…`
    is no link), and a user name or password would be printed by `config check` and written
    into every values file: ValueError (exit 2) for each, never echoing the password."""
    if not value:
        return value
    if not re.match(r"^https?://[^/\s]+", value):
        raise ValueError(f"must be an http(s) URL like http://mirror-serve:8080, got {value!r}")
    parts = urlsplit(value)
    if "@" in parts.netloc:
        raise ValueError(
            "must not hold a user name or password (it would be written into every values "
            "file): give the address alone, like http://mirror-serve:8080"
        )
    if "?" in value or "#" in value:
        raise ValueError(
            f"must have no query or fragment (the bundle paths are appended to it), got {value!r}"
        )
    return value.rstrip("/")


_HOST_LABEL = re.compile(r"^(?!-)[A-Za-z0-9-]{1,63}(?<!-)$")


def check_listen(value: str) -> str:
    """HOST:PORT with a port 0-65535 (0: any free one) and a host that is an IPv4 address,
    a bracketed IPv6 address or a host name; ValueError saying what is wrong."""
    host, colon, port = value.rpartition(":")
    if not colon or not host or not re.fullmatch(r"[0-9]{1,5}", port):
        raise ValueError(f"must be HOST:PORT, got {value!r}")
    if int(port) > 65535:
        raise ValueError(f"port {port} is not in 0-65535, in {value!r}")
    if host.startswith("["):
        try:
            ipaddress.IPv6Address(host.removeprefix("[").removesuffix("]"))
        except ValueError:
            raise ValueError(f"{host} is not an IPv6 address, in {value!r}") from None
        if not host.endswith("]"):
            raise ValueError(f"must be HOST:PORT, got {value!r}")
    elif re.fullmatch(r"[0-9.]+", host):
        try:
            ipaddress.IPv4Address(host)
        except ValueError:
            raise ValueError(f"{host} is not an IPv4 address, in {value!r}") from None
    elif len(host) > 253 or not all(_HOST_LABEL.match(p) for p in host.rstrip(".").split(".")):
        raise ValueError(f"{host!r} is not an IP address or a host name, in {value!r}")
    return value


class ChartSettings(_Section):
    values_path: str = ""
    on_change: str = ""
    refresh_before: Duration = 86400.0


class Settings(_Section):
    """Every setting, validated. `source` is the file it came from (None: embedded defaults)."""

    api: ApiSettings = Field(default_factory=ApiSettings)
    store: StoreSettings = Field(default_factory=StoreSettings)
    download: DownloadSettings = Field(default_factory=DownloadSettings)
    exports: list[ExportSettings] = Field(default_factory=list)
    daemon: DaemonSettings = Field(default_factory=DaemonSettings)
    transfer: TransferSettings = Field(default_factory=TransferSettings)
    target: TargetSettings = Field(default_factory=TargetSettings)
    chart: ChartSettings = Field(default_factory=ChartSettings)
    serve: ServeSettings = Field(default_factory=ServeSettings)
    sites: list[SiteSettings] = Field(default_factory=list)
    source: Path | None = Field(default=None, exclude=True)

    @field_validator("exports")
    @classmethod
    def _unique_domains(cls, value: list[ExportSettings]) -> list[ExportSettings]:
        seen: set[str] = set()
        for export in value:
            if export.domain in seen:
                raise ValueError(f"domain {export.domain!r} is listed twice")
            seen.add(export.domain)
        return value

    @field_validator("sites")
    @classmethod
    def _unique_sites(cls, value: list[SiteSettings]) -> list[SiteSettings]:
        names = [site.name for site in value]
        for name in names:
            if names.count(name) > 1:
                raise ValueError(f"site {name!r} is listed twice")
        return value

    def receipt_keys(self) -> list[Path]:
        """The public keys whose receipts the site `default` is believed with:
        `transfer.receipt_keys`, or the deprecated `target.trusted_keys` when it is not set."""
        return list(self.transfer.receipt_keys or self.target.trusted_keys)

    def site_list(self) -> list[SiteSettings]:
        """The configured sites; with no `[[sites]]`, the one implicit site `default`, whose
        receipts are trusted by `receipt_keys()` and whose deltas follow today's rule."""
        if self.sites:
            return list(self.sites)
        implicit = SiteSettings(
            name=DEFAULT_SITE, trusted_keys=self.receipt_keys(), delta_bases="packed"
        )
        return [implicit]

    def site(self, name: str | None) -> SiteSettings:
        """The site `name` names, or the only one when `name` is None; ConfigError (exit 2)
        naming the configured sites otherwise."""
        sites = self.site_list()
        known = ", ".join(site.name for site in sites)
        if name is None:
            if len(sites) == 1:
                return sites[0]
            raise ConfigError(
                f"{len(sites)} sites are configured ({known}); say which one",
                hint=f"pass --site NAME (one of {known})",
            )
        for site in sites:
            if site.name == name:
                return site
        raise ConfigError(
            f"no site named {name!r} is configured (sites: {known})",
            hint="add a [[sites]] table with that name, or pass --site with one of those",
        )

    def export_for(self, domain: str) -> ExportSettings:
        """The configured export of `domain`, or a default one for an ad-hoc run."""
        for export in self.exports:
            if export.domain == domain.lower():
                return export
        return ExportSettings(domain=domain)

    def api_key(self) -> str:
        """The admin API key; ConfigError (exit 2) when none is configured at all, or when the
        configured file is missing, unreadable, empty or not UTF-8 text (4 is for a key the
        vendor refuses)."""
        key = os.environ.get(API_KEY_ENV, "").strip()
        origin = f"${API_KEY_ENV}"
        if not key:
            key_path = self.api.key_file
            if key_path is None and os.environ.get("CREDENTIALS_DIRECTORY"):
                key_path = Path(os.environ["CREDENTIALS_DIRECTORY"]) / CREDENTIAL_NAME
            if key_path is None:
                raise ConfigError(
                    "no admin API key configured",
                    hint=f"set ${API_KEY_ENV} or api.key_file, or pass the systemd credential "
                    f"{CREDENTIAL_NAME!r}",
                )
            origin = str(key_path)
            key = read_api_key_file(key_path)
        if not key:
            raise ConfigError(f"the admin API key from {origin} is empty")
        register_secret(key)
        if self.api.key_prefix and not key.startswith(self.api.key_prefix):
            log.warning(
                "the admin API key from %s does not start with %r; using it anyway",
                origin,
                self.api.key_prefix,
            )
        return key

    def redacted(self) -> dict[str, Any]:
        """The effective settings for display; no secret is ever part of them."""
        document = self.model_dump(mode="json")
        document["api"]["key_source"] = _key_source(self.api.key_file)
        return document


def read_api_key_file(path: Path) -> str:
    """The admin API key file's text, stripped; ConfigError (exit 2) when it is missing,
    unreadable or not UTF-8 text (the caller refuses an empty one, naming where it came from)."""
    try:
        return path.read_bytes().decode("utf-8").strip()
    except OSError as exc:
        raise ConfigError(
            f"cannot read the admin API key file {path}: {exc.strerror}",
            hint="check api.key_file (or the systemd credential) and its permissions",
        ) from None
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"the admin API key file {path} is not UTF-8 text (byte {exc.start}); "
            "write the key as plain text"
        ) from None


def _key_source(key_file: Path | None) -> str:
    if os.environ.get(API_KEY_ENV):
        return f"${API_KEY_ENV} (set, redacted)"
    if key_file is not None:
        return f"{key_file} ({'present' if key_file.exists() else 'missing'})"
    if os.environ.get("CREDENTIALS_DIRECTORY"):
        return f"systemd credential {CREDENTIAL_NAME}"
    return "none"


def resolve_config_path(explicit: str | Path | None) -> tuple[Path, bool]:
    """The config file to read, and whether it was asked for explicitly."""
    if explicit:
        return Path(explicit), True
    env = os.environ.get(CONFIG_ENV)
    if env:
        return Path(env), True
    return DEFAULT_CONFIG_PATH, False


def load_settings(explicit: str | Path | None = None, *, allow_defaults: bool = False) -> Settings:
    """Read and validate the settings; ConfigError (exit 2) names the key and the file.

    With no file anywhere, the embedded defaults apply only when `allow_defaults`.
    """
    path, required = resolve_config_path(explicit)
    if not path.exists():
        if required:
            raise ConfigError(f"config file {path} does not exist")
        if allow_defaults:
            return Settings()
        raise ConfigError(
            f"no config file found (looked at --config: not given, ${CONFIG_ENV}: not set, "
            f"{path}: absent)",
            hint="write one from config.example.toml, or pass --defaults to try the "
            "embedded defaults",
        )
    try:
        document = tomllib.loads(path.read_bytes().decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"config file {path} is not UTF-8 text (byte {exc.start}); TOML files are UTF-8"
        ) from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None
    except RecursionError:
        raise ConfigError(f"config file {path} nests too deeply to be a settings file") from None
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
    return settings_from_dict(document, source=path)


def settings_from_dict(document: dict[str, Any], *, source: Path | None = None) -> Settings:
    where = f"config file {source}" if source else "settings"
    try:
        settings = Settings.model_validate(document)
    except ValidationError as exc:
        first = exc.errors()[0]
        key = ".".join(str(part) for part in first["loc"]) or "(top level)"
        message = first["msg"].removeprefix("Value error, ")
        if first["type"] == "extra_forbidden":
            message = "unknown key"
        more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        raise ConfigError(f"{where}: {key}: {message}{more}") from None
    if settings.target.trusted_keys:
        log.warning("%s: %s", where, DEPRECATED_TRUSTED_KEYS)
    if source is not None:
        settings = _anchored(settings, source.absolute().parent)
    return settings.model_copy(update={"source": source})


STR_PATHS = ("ca_bundle", "values_path")
"""Settings that name a file but are strings (empty means none): anchored all the same."""


def _anchored(model: Any, base: Path) -> Any:
    """`model` with every relative path in it taken from `base`, the config file's directory:
    the one rule for every file and directory a config file names (store.path,
    serve.cache_dir, key files, work_dir, ca_bundle, values_path), wherever the command runs."""
    update = {}
    for name in type(model).model_fields:
        value = getattr(model, name)
        if name in STR_PATHS and isinstance(value, str) and value:
            anchored: Any = str(_anchor(Path(value), base))
        else:
            anchored = _anchor(value, base)
        if anchored is not value and anchored != value:
            update[name] = anchored
    return model.model_copy(update=update) if update else model


def _anchor(value: Any, base: Path) -> Any:
    if isinstance(value, Path):
        return value if value.is_absolute() else base / value
    if isinstance(value, BaseModel):
        return _anchored(value, base)
    if isinstance(value, list):
        return [_anchor(item, base) for item in value]
    return value
