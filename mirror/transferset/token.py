"""Ed25519 keys in a PKCS#11 token (an HSM, a smart card), wherever a key file is named.

A `pkcs11:` URI (RFC 7512, `mirror.transferset.pkcs11uri`) in `transfer.signing_key` names a
key in a token instead of a file; `open_signing_key` is the one place that tells them apart.

Promises:
- The private key never leaves the token: `mirror keys generate` makes it there (sensitive,
  never extractable), and every signature is made there (CKM_EDDSA). This process holds the
  URI and the public key, nothing more: there is no private key byte to leak.
- The PIN is read from the URI's `pin-source` file each time a session opens, and is never
  kept, printed or put into a message.
- A key in a token has the id the same key has in a file (sha256 of the raw public key),
  whether `mirror keys` or another tool (`pkcs11-tool --keypairgen --key-type
  EC:edwards25519`) made it.
- Every signature the token returns is checked against the key's public half before it is
  used: a token that signs with another key cannot sign a set (IntegrityError, exit 5).
- What a token cannot do is one line: a module, token, key or mechanism that is not there,
  or a key that is not Ed25519, is a ConfigError (exit 2); a PIN the token refuses or has
  locked is an AuthError (exit 4).
- A token removed and put back works again in the same process (a running receiver service
  imports with no restart): after any failure the module is finalized and initialised again
  at the next use (`_finalize`).
"""

from __future__ import annotations

import errno
import logging
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pkcs11
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from pkcs11 import Attribute, KeyType, Mechanism, ObjectClass, TokenFlag

from mirror.errors import AuthError, ConfigError, IntegrityError
from mirror.transferset.keys import SigningKey, key_id_of, load_signing_key
from mirror.transferset.pkcs11uri import TokenURI, is_token_uri, parse_token_uri

if TYPE_CHECKING:
    from pkcs11._pkcs11 import lib as Library

log = logging.getLogger(__name__)

MAX_PIN_FILE = 4096
ED25519_OID = bytes.fromhex("06032b6570")
"""CKA_EC_PARAMS of an Ed25519 key: the DER of OID 1.3.101.112 (what mirror writes)..."""
ED25519_NAME = b"\x13\x0cedwards25519"
"""...or the DER PrintableString `edwards25519` (what pkcs11-tool and SoftHSM2 write)."""
PIN_REFUSED: dict[type[Exception], str] = {
    pkcs11.PinIncorrect: "refused the PIN",
    pkcs11.PinInvalid: "refused the PIN",
    pkcs11.PinLenRange: "refused the PIN (wrong length)",
    pkcs11.PinExpired: "says the PIN has expired",
    pkcs11.PinLocked: "has locked the PIN after too many wrong tries",
}
GONE = (
    pkcs11.TokenNotPresent,
    pkcs11.DeviceRemoved,
    pkcs11.TokenNotRecognised,
    pkcs11.SlotIDInvalid,
    pkcs11.SessionHandleInvalid,
    pkcs11.SessionClosed,
    pkcs11.DeviceError,
)


def open_signing_key(source: Path | str) -> SigningKey:
    """The signing key the settings name: a key in a token (a `pkcs11:` URI) or a key file."""
    if is_token_uri(source):
        return load_token_key(str(source))
    return load_signing_key(Path(source))


@dataclass(frozen=True)
class TokenSigner:
    """Signs in the token (`mirror.transferset.keys.Signer`); holds no secret."""

    uri: TokenURI
    public: Ed25519PublicKey

    def public_key(self) -> Ed25519PublicKey:
        return self.public

    def sign(self, data: bytes) -> bytes:
        with _session(self.uri) as session:
            private = _key(session, self.uri, ObjectClass.PRIVATE_KEY)
            if not isinstance(private, pkcs11.SignMixin):
                raise ConfigError(f"{self.uri.name}: the token's key cannot sign (no CKA_SIGN)")
            signature = bytes(private.sign(data, mechanism=Mechanism.EDDSA))
        try:
            self.public.verify(signature, data)
        except InvalidSignature:
            raise IntegrityError(
                f"{self.uri.name}: the token's signature does not verify with the key's "
                "public half; the token signed with another key or is faulty"
            ) from None
        return signature


def load_token_key(text: str) -> SigningKey:
    """The key `text` names, found in its token (with its PIN, so a wrong one shows here)."""
    uri = parse_token_uri(text)
    with _session(uri) as session:
        _key(session, uri, ObjectClass.PRIVATE_KEY)
        public = _ed25519(_key(session, uri, ObjectClass.PUBLIC_KEY), uri)
    return SigningKey(key_id_of(public), uri.name, TokenSigner(uri, public))


def generate_in_token(text: str) -> SigningKey:
    """Make a new Ed25519 key pair in the token as `text`'s `object=` (and `id=`): sensitive
    and never extractable; never replaces an object of that label or id."""
    uri = parse_token_uri(text)
    if uri.label is None:
        raise ConfigError(f"{uri.name}: name the new key with object=LABEL")
    with _session(uri, read_write=True) as session:
        for attribute, value in ((Attribute.LABEL, uri.label), (Attribute.ID, uri.key_id)):
            if value is not None and next(session.get_objects({attribute: value}), None):
                raise ConfigError(
                    f"{uri.name}: the token already holds an object with this "
                    f"{'label' if attribute == Attribute.LABEL else 'id'}; refusing to "
                    "replace a key"
                )
        public, _ = session.generate_keypair(
            KeyType.EC_EDWARDS,
            store=True,
            label=uri.label,
            id=uri.key_id,
            public_template={Attribute.EC_PARAMS: ED25519_OID},
            private_template={
                Attribute.SENSITIVE: True,
                Attribute.EXTRACTABLE: False,
                Attribute.PRIVATE: True,
            },
        )
        key = _ed25519(public, uri)
    return SigningKey(key_id_of(key), uri.name, TokenSigner(uri, key))


@contextmanager
def _session(uri: TokenURI, *, read_write: bool = False) -> Iterator[pkcs11.Session]:
    """A session logged in to `uri`'s token, which can sign with Ed25519; every PKCS#11
    failure inside it (the caller's too) becomes its one-line error."""
    with _translated(uri):
        library = _library(uri)
        try:
            token = _token(library, uri)
            if Mechanism.EDDSA not in token.slot.get_mechanisms():
                raise ConfigError(
                    f"{uri.name}: token {token.label!r} cannot sign with Ed25519 (no CKM_EDDSA "
                    "mechanism)",
                    hint="use a token that supports EdDSA (PKCS#11 3.0)",
                )
            pin = _pin(uri, token)
            with token.open(rw=read_write, user_pin=pin) as session:
                yield session
        except Exception:
            _finalize(library, uri)
            raise


def _finalize(library: Library, uri: TokenURI) -> None:
    """After any failure, the module is finalized (C_Finalize), so the next session
    initialises it again (`pkcs11.lib` does when it is not) and sees the tokens as they are
    then: a module keeps what it found at C_Initialize, and a token removed and put back
    failed every later signature of a running service until it was restarted (trial K12).
    Sessions are opened per use, so none of this process is left open."""
    try:
        library.finalize()
    except pkcs11.PKCS11Error as exc:
        log.debug("%s: finalizing the module failed (%s)", uri.name, _reason(exc))


@contextmanager
def _translated(uri: TokenURI) -> Iterator[None]:
    try:
        yield
    except tuple(PIN_REFUSED) as exc:
        raise AuthError(
            f"{uri.name}: the token {PIN_REFUSED[type(exc)]} in {uri.pin_source}",
            hint="check the PIN file; a token locks its PIN after a few wrong tries",
        ) from None
    except GONE:
        raise ConfigError(
            f"{uri.name}: the token went away (removed, or its module lost it)",
            hint="insert the token and run the command again",
        ) from None
    except pkcs11.PKCS11Error as exc:
        raise ConfigError(
            f"{uri.name}: the token or its module failed ({_reason(exc)})",
            hint="if the token was removed, insert it and run the command again",
        ) from None


def _reason(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def _library(uri: TokenURI) -> Library:
    path = uri.module_path
    if not path.is_file():
        raise ConfigError(
            f"{uri.name}: the PKCS#11 module {path} does not exist",
            hint="install the token's module or correct module-path",
        )
    try:
        return pkcs11.lib(str(path))
    except pkcs11.PKCS11Error as exc:
        raise ConfigError(
            f"{uri.name}: {path} is not a PKCS#11 module that loads here ({_reason(exc)})"
        ) from None


def _matches(wanted: dict[str, str], facts: dict[str, str]) -> bool:
    """Every attribute of `wanted` that `facts` describes has the value the URI gives."""
    return all(wanted[name] == value for name, value in facts.items() if name in wanted)


def _token_facts(token: pkcs11.Token) -> dict[str, str]:
    slot = token.slot
    return {
        "manufacturer": token.manufacturer_id,
        "model": token.model,
        "slot-id": str(slot.slot_id),
        "slot-description": slot.slot_description,
        "slot-manufacturer": slot.manufacturer_id,
    }


def _library_matches(library: Library, wanted: dict[str, str]) -> bool:
    version = library.library_version
    return _matches(
        wanted,
        {
            "library-manufacturer": library.manufacturer_id,
            "library-description": library.library_description,
            "library-version": f"{version[0]}.{version[1]}",
        },
    )


def _token(library: Library, uri: TokenURI) -> pkcs11.Token:
    """The one token the URI's token attributes match."""
    wanted = uri.token
    serial = wanted.get("serial")
    if not _library_matches(library, wanted):
        raise ConfigError(
            f"{uri.name}: the module {uri.module_path} is not the library-* the URI names",
            hint="drop the library-* attributes or name the module they describe",
        )
    found = [
        token
        for token in library.get_tokens(
            token_label=wanted.get("token"), token_serial=serial.encode() if serial else None
        )
        if _matches(wanted, _token_facts(token))
    ]
    if len(found) == 1:
        chosen: pkcs11.Token = found[0]
        return chosen
    there = sorted(token.label for token in library.get_tokens() if token.label)
    what = "no token matches" if not found else f"{len(found)} tokens match"
    raise ConfigError(
        f"{uri.name}: {what} in {uri.module_path} (tokens there: "
        f"{', '.join(map(repr, there)) or 'none'})",
        hint="insert the token, or name one with token= (and serial=)"
        if not found
        else "name one of them with serial= or slot-id= beside token=",
    )


def _read_pin_file(path: Path) -> tuple[bytes, int]:
    """The PIN file's first bytes and its permission bits. Opened without blocking and
    refused unless a regular file: a FIFO or a device named there would hang the command."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    with open(fd, "rb") as handle:
        status = os.fstat(fd)
        if not stat.S_ISREG(status.st_mode):
            raise OSError(errno.EINVAL, "not a regular file")
        return handle.read(MAX_PIN_FILE + 1), stat.S_IMODE(status.st_mode)


def _pin(uri: TokenURI, token: pkcs11.Token) -> str | None:
    """The PIN from the pin-source file (its last line break dropped), or None when the
    URI names no file and the token needs no login."""
    path = uri.pin_source
    if path is None:
        if TokenFlag.LOGIN_REQUIRED in token.flags:
            raise ConfigError(
                f"{uri.name}: token {token.label!r} needs a PIN",
                hint="add pin-source=file:/path/to/pin-file to the URI",
            )
        return None
    try:
        data, mode = _read_pin_file(path)
    except FileNotFoundError:
        raise ConfigError(f"{uri.name}: the PIN file {path} does not exist") from None
    except OSError as exc:
        raise ConfigError(f"{uri.name}: cannot read the PIN file {path}: {exc.strerror}") from None
    try:
        pin = data.decode("utf-8").removesuffix("\n").removesuffix("\r")
    except UnicodeDecodeError:
        pin = ""
    if not pin or len(data) > MAX_PIN_FILE or "\n" in pin:
        raise ConfigError(f"{uri.name}: the PIN file {path} does not hold one UTF-8 PIN")
    if mode & 0o077:
        log.warning("the PIN file %s is readable by other users; chmod 600 it", path)
    return pin


def _key(session: pkcs11.Session, uri: TokenURI, kind: ObjectClass) -> pkcs11.Key:
    half = "private" if kind == ObjectClass.PRIVATE_KEY else "public"
    several = False
    try:
        key = session.get_key(object_class=kind, label=uri.label, id=uri.key_id)
    except pkcs11.NoSuchKey:
        raise ConfigError(
            f"{uri.name}: the token holds no {half} key of that object/id",
            hint=f"list its keys: pkcs11-tool --module {uri.module_path} --list-objects --login",
        ) from None
    except pkcs11.MultipleObjectsReturned:
        several = True  # raised below, once the exception (and the search it holds) is gone
    if several:
        # Raised inside the except clause, the error kept the library's search generator
        # alive (its context's traceback) until after the module was finalized, whose
        # clean-up then printed a traceback after the one line (trial37 D6).
        raise ConfigError(f"{uri.name}: several {half} keys match; name one with id= in the URI")
    if key.key_type != KeyType.EC_EDWARDS:
        raise ConfigError(f"{uri.name}: the key is {key.key_type.name}, not Ed25519")
    return key


def _ed25519(public: pkcs11.Key, uri: TokenURI) -> Ed25519PublicKey:
    """The Ed25519 key of a token's public key object (CKA_EC_POINT: the DER OCTET STRING
    of the 32 raw bytes, or, from some tokens, the raw bytes alone)."""
    if public[Attribute.EC_PARAMS] not in (ED25519_OID, ED25519_NAME):
        raise ConfigError(f"{uri.name}: the key is an Edwards key, but not Ed25519 (Ed448?)")
    point = bytes(public[Attribute.EC_POINT])
    if len(point) == 34 and point[:2] == b"\x04\x20":
        point = point[2:]
    if len(point) != 32:
        raise ConfigError(f"{uri.name}: the token's public key is not 32 bytes of Ed25519")
    return Ed25519PublicKey.from_public_bytes(point)
