"""RFC 7512 `pkcs11:` URIs: which key in which token, the module that reaches the token, and
the file that holds its PIN. Text in, a `TokenURI` or one ConfigError (exit 2) out; no I/O.

    pkcs11:token=mirror;object=transfer?module-path=/usr/lib/softhsm/libsofthsm2.so
        &pin-source=file:/run/credentials/mirror.service/token-pin

Promises:
- The PIN comes only from the file `pin-source` names (a `file:` URI or an absolute path):
  a URI with `pin-value` is refused, so no PIN is ever in the settings, the command line or
  the environment; `|program` sources are refused (no program is run for a PIN).
- `module-path` is required: the module (a shared library) is loaded from where the
  operator says, never found by a search.
- An attribute RFC 7512 does not define, or one given twice, is refused rather than
  ignored: a URI that names a key differently than it reads would sign with another key.
- `str()` is the URI as written (no secret is in it); `name` is its path part, which is
  what messages show (`shown`: a `pin-value` there by mistake is shown without its value).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, unquote_to_bytes

from mirror.errors import ConfigError

SCHEME = "pkcs11:"
TOKEN_ATTRIBUTES = ("token", "manufacturer", "model", "serial")
SLOT_ATTRIBUTES = ("slot-manufacturer", "slot-description", "slot-id")
LIBRARY_ATTRIBUTES = ("library-manufacturer", "library-description", "library-version")
PATH_ATTRIBUTES = (
    *TOKEN_ATTRIBUTES,
    "object",
    "id",
    "type",
    "library-manufacturer",
    "library-description",
    "library-version",
    "slot-manufacturer",
    "slot-description",
    "slot-id",
)
QUERY_ATTRIBUTES = ("module-path", "module-name", "pin-source", "pin-value")
HINT = (
    "write it as pkcs11:token=LABEL;object=KEY?module-path=/path/to/module.so"
    "&pin-source=file:/path/to/pin-file"
)


@dataclass(frozen=True)
class TokenURI:
    """A key in a token, as a `pkcs11:` URI names it."""

    text: str
    module_path: Path
    pin_source: Path | None
    token: dict[str, str]
    """How the token is matched: `token` (its label), `manufacturer`, `model`, `serial`;
    and its slot and module: `slot-*`, `library-*` (RFC 7512: every attribute given must
    match)."""
    label: str | None
    key_id: bytes | None
    """CKA_ID of the key's objects (`id=`), when the URI names it."""

    def __str__(self) -> str:
        return self.text

    @property
    def name(self) -> str:
        """The path part (token and object): what a message names."""
        return shown(self.text)


def shown(text: str) -> str:
    """The URI as a message shows it: its path part (the query names files, no secret), with
    the value of any `pin-value` put there by mistake hidden (RFC 7512 has it in the query;
    a PIN written into the path was printed by the refusal that named the path: trial37 D5)."""
    scheme, _, path = text.partition("?")[0].partition(":")
    items = [
        f"{item.partition('=')[0]}=…" if item.partition("=")[0].lower() == "pin-value" else item
        for item in path.split(";")
    ]
    return f"{scheme}:{';'.join(items)}"


def is_token_uri(source: object) -> bool:
    """True for a `pkcs11:` URI (a key in a token), False for a key file's path."""
    return isinstance(source, str) and source[: len(SCHEME)].lower() == SCHEME


def parse_token_uri(text: str) -> TokenURI:
    """The key `text` names; ConfigError (exit 2) naming what is wrong with it."""
    if not is_token_uri(text):
        raise ConfigError(f"{text!r} is not a pkcs11: URI", hint=HINT)
    path_part, _, query_part = text[len(SCHEME) :].partition("?")
    path = _attributes(path_part, ";", PATH_ATTRIBUTES, text)
    query = _attributes(query_part, "&", QUERY_ATTRIBUTES, text)
    name = shown(text)
    if "pin-value" in query:
        raise ConfigError(
            f"{name}: pin-value puts the token's PIN in the settings; refusing it",
            hint="write the PIN to a file readable only by mirror and name it with "
            "pin-source=file:/path",
        )
    if "module-path" not in query:
        why = "module-name is not searched for" if "module-name" in query else "no module-path"
        raise ConfigError(f"{name}: {why}; name the PKCS#11 module's file", hint=HINT)
    if path.get("type", "private") != "private":
        raise ConfigError(
            f"{name}: type={path['type']} is not the private key mirror signs with",
            hint="write type=private or leave type out",
        )
    if "object" not in path and "id" not in path:
        raise ConfigError(f"{name}: names no key (object= or id=)", hint=HINT)
    return TokenURI(
        text=text,
        module_path=_absolute(unquote(query["module-path"]), "module-path", name),
        pin_source=_pin_source(query["pin-source"], name) if "pin-source" in query else None,
        token={k: unquote(v) for k, v in path.items() if k not in ("object", "id", "type")},
        label=unquote(path["object"]) if "object" in path else None,
        key_id=unquote_to_bytes(path["id"]) if "id" in path else None,
    )


def _attributes(part: str, separator: str, known: tuple[str, ...], text: str) -> dict[str, str]:
    """{name: raw value} of one part of the URI; unknown or repeated names are refused."""
    found: dict[str, str] = {}
    for item in filter(None, part.split(separator)):
        key, equals, value = item.partition("=")
        key = key.lower()
        if not equals or (key not in known and not key.startswith("x-")):
            raise ConfigError(f"{shown(text)}: {key!r} is not an RFC 7512 attribute", hint=HINT)
        if key in found:
            raise ConfigError(f"{shown(text)}: {key} is given twice")
        found[key] = value
    return found


def _pin_source(value: str, name: str) -> Path:
    """The PIN file: `file:/abs`, `file:///abs`, `file://localhost/abs` or `/abs`."""
    decoded = unquote(value)
    if decoded.startswith("|"):
        raise ConfigError(
            f"{name}: pin-source runs a program; mirror reads the PIN from a file only",
            hint="pin-source=file:/path/to/pin-file",
        )
    if decoded.lower().startswith("file:"):
        decoded = decoded[len("file:") :]
        if decoded.startswith("//"):
            host, slash, rest = decoded[2:].partition("/")
            if host not in ("", "localhost"):
                raise ConfigError(f"{name}: pin-source names another host ({host})")
            decoded = slash + rest
    return _absolute(decoded, "pin-source", name)


def _absolute(value: str, attribute: str, name: str) -> Path:
    if not value.startswith("/"):
        raise ConfigError(f"{name}: {attribute} must be an absolute path, got {value!r}")
    return Path(value)
