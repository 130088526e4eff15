"""RFC 7512 pkcs11: URIs as the settings name a key in a token: what is read, what is refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from mirror.config import settings_from_dict
from mirror.errors import ConfigError
from mirror.transferset.pkcs11uri import is_token_uri, parse_token_uri

MODULE = "module-path=/usr/lib/softhsm/libsofthsm2.so"


def test_a_uri_names_token_key_module_and_pin_file() -> None:
    text = (
        "pkcs11:token=mirror%20hsm;serial=0001;object=transfer;id=%01%ff;type=private"
        f"?{MODULE}&pin-source=file:///run/credentials/mirror.service/pin"
    )
    uri = parse_token_uri(text)
    assert uri.token == {"token": "mirror hsm", "serial": "0001"}
    assert (uri.label, uri.key_id) == ("transfer", b"\x01\xff")
    assert uri.module_path == Path("/usr/lib/softhsm/libsofthsm2.so")
    assert uri.pin_source == Path("/run/credentials/mirror.service/pin")
    assert str(uri) == text
    assert (
        uri.name == "pkcs11:token=mirror%20hsm;serial=0001;object=transfer;id=%01%ff;type=private"
    )


@pytest.mark.parametrize(
    "source",
    ["file:/etc/mirror/pin", "file:///etc/mirror/pin", "file://localhost/etc/mirror/pin",
     "/etc/mirror/pin", "file:/etc/mirror/p%69n"],
)  # fmt: skip
def test_pin_source_is_a_file_uri_or_an_absolute_path(source: str) -> None:
    uri = parse_token_uri(f"pkcs11:object=k?{MODULE}&pin-source={source}")
    assert uri.pin_source == Path("/etc/mirror/pin")


@pytest.mark.parametrize(
    ("text", "says"),
    [
        (f"pkcs11:object=k?{MODULE}&pin-value=1234", "pin-value puts the token's PIN"),
        (f"pkcs11:object=k?{MODULE}&pin-source=|/usr/bin/get-pin", "runs a program"),
        (f"pkcs11:object=k?{MODULE}&pin-source=file://vault/pin", "another host"),
        (f"pkcs11:object=k?{MODULE}&pin-source=pin.txt", "absolute path"),
        ("pkcs11:object=k?module-name=softhsm2", "module-name is not searched for"),
        ("pkcs11:object=k", "no module-path"),
        ("pkcs11:object=k?module-path=libsofthsm2.so", "absolute path"),
        (f"pkcs11:token=a?{MODULE}", "names no key"),
        (f"pkcs11:object=k;type=public?{MODULE}", "type=public"),
        (f"pkcs11:object=k;label=x?{MODULE}", "'label' is not an RFC 7512 attribute"),
        (f"pkcs11:object=k;object=j?{MODULE}", "object is given twice"),
        (f"pkcs11:object=k?{MODULE}&{MODULE}", "module-path is given twice"),
        ("/etc/mirror/transfer.key", "not a pkcs11: URI"),
    ],
)
def test_what_a_uri_cannot_say_is_one_config_error(text: str, says: str) -> None:
    with pytest.raises(ConfigError, match=None) as raised:
        parse_token_uri(text)
    assert raised.value.exit_code == 2
    assert says in str(raised.value)
    assert "1234" not in str(raised.value)


@pytest.mark.parametrize(
    "text",
    [
        f"pkcs11:object=k;pin-value=s3cr3t-PIN?{MODULE}",
        f"pkcs11:PIN-VALUE=s3cr3t-PIN;object=k?{MODULE}",
        "pkcs11:object=k;pin-value=s3cr3t-PIN",
    ],
)
def test_a_pin_written_into_the_path_is_refused_and_never_shown(text: str) -> None:
    """RFC 7512 puts pin-value in the query; one in the path was refused by a line that
    printed the path, PIN and all (trial37 D5)."""
    with pytest.raises(ConfigError) as refused:
        parse_token_uri(text)
    assert "s3cr3t-PIN" not in str(refused.value) and "pin-value" in str(refused.value).lower()


def test_vendor_attributes_are_allowed() -> None:
    assert parse_token_uri(f"pkcs11:object=k;x-vendor=1?{MODULE}&x-other=2").label == "k"


def test_the_settings_keep_a_uri_as_written_and_a_path_as_a_path() -> None:
    text = f"pkcs11:token=t;object=k?{MODULE}&pin-source=file:///etc//mirror/pin"
    token = settings_from_dict({"transfer": {"signing_key": text}}).transfer.signing_key
    assert token == text and is_token_uri(token)
    file = settings_from_dict({"transfer": {"signing_key": "/etc/k.key"}}).transfer.signing_key
    assert file == Path("/etc/k.key") and not is_token_uri(file)
