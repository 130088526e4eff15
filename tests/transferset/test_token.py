"""Ed25519 keys in a PKCS#11 token (SoftHSM2): made there by `mirror keys` or by pkcs11-tool,
never extractable, signing there, with the key ids of key files; and what a token cannot do,
as one line and its exit code."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pkcs11
import pytest

from mirror.errors import ConfigError, IntegrityError
from mirror.transferset.keys import load_public_key, verify_signature, write_public_key
from mirror.transferset.token import TokenSigner, open_signing_key
from tests.fixtures.cli import mirror_cli
from tests.fixtures.tokens import SoftHSM


def shown(hsm: SoftHSM, key: str, *args: str, env: dict[str, str] | None = None) -> str:
    """The key id `mirror keys show KEY` prints."""
    done = mirror_cli("--json", "keys", "show", key, *args, env=env or hsm.env)
    assert done.returncode == 0, done.stderr
    assert hsm.pin not in done.stdout + done.stderr
    return str(json.loads(done.stdout)["key_id"])


def test_a_key_mirror_makes_in_a_token_is_never_extractable(
    softhsm: SoftHSM, tmp_path: Path
) -> None:
    made = mirror_cli(
        "--json", "keys", "generate", "--out", softhsm.uri("transfer"),
        "--public", str(tmp_path / "transfer.pub"), env=softhsm.env,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    document = json.loads(made.stdout)
    assert document["private_key"] == "pkcs11:token=mirror;object=transfer"
    assert softhsm.pin not in made.stdout + made.stderr
    assert shown(softhsm, softhsm.uri("transfer")) == document["key_id"]
    assert load_public_key(tmp_path / "transfer.pub").key_id == document["key_id"]
    listed = softhsm.tool("--list-objects", "--type", "privkey").stdout
    assert "label:      transfer" in listed
    assert "sensitive, always sensitive, never extractable, local" in listed
    assert not list(tmp_path.glob("*.key"))

    again = mirror_cli(
        "keys", "generate", "--out", softhsm.uri("transfer"),
        "--public", str(tmp_path / "again.pub"), env=softhsm.env,
    )  # fmt: skip
    assert again.returncode == 2 and "refusing to replace a key" in again.stderr
    assert not (tmp_path / "again.pub").exists()


def test_the_same_key_has_the_same_id_in_a_file_and_in_a_token(
    softhsm: SoftHSM, tmp_path: Path
) -> None:
    made = mirror_cli("--json", "keys", "generate", "--out", str(tmp_path / "file"))
    assert made.returncode == 0, made.stderr
    softhsm.import_key(tmp_path / "file.key", "imported")
    key_id = json.loads(made.stdout)["key_id"]
    assert shown(softhsm, softhsm.uri("imported")) == key_id
    assert shown(softhsm, str(tmp_path / "file.pub")) == key_id


def test_a_key_pkcs11_tool_made_signs_in_the_token(in_process: SoftHSM, tmp_path: Path) -> None:
    """The standard tool's key (its CKA_EC_PARAMS is the curve's name, not its OID): found,
    its signature made in the token and checked with the public half written for the other
    side, and its private value refused to anyone who asks."""
    import pkcs11

    in_process.tool("--keypairgen", "--key-type", "EC:edwards25519", "--label", "receipt")
    key = open_signing_key(in_process.uri("receipt"))
    assert "SigningKey(key_id=" in repr(key) and in_process.pin not in repr(key)
    assert isinstance(key._private, TokenSigner)  # what this process holds: URI, public key
    assert set(vars(key._private)) == {"uri", "public"}
    write_public_key(tmp_path / "receipt.pub", key.public)
    trusted = load_public_key(tmp_path / "receipt.pub")
    assert trusted.key_id == key.key_id
    document = key.signature_document(b"receipt bytes")
    assert verify_signature(b"receipt bytes", document, {key.key_id: trusted}, what="r", name="s")
    with pytest.raises(IntegrityError):
        verify_signature(b"receipt byteS", document, {key.key_id: trusted}, what="r", name="s")
    token = pkcs11.lib(str(in_process.module)).get_token(token_label="mirror")
    with token.open(user_pin=in_process.pin) as session:
        private = session.get_key(object_class=pkcs11.ObjectClass.PRIVATE_KEY, label="receipt")
        with pytest.raises(pkcs11.AttributeSensitive):
            private[pkcs11.Attribute.VALUE]


def test_a_token_removed_before_the_signature_is_one_config_error(in_process: SoftHSM) -> None:
    key = open_signing_key(in_process.uri(_tool_key(in_process)))
    in_process.remove_token("mirror")
    with pytest.raises(ConfigError) as raised:
        key.sign(b"manifest")
    assert "pkcs11:token=mirror;object=k:" in str(raised.value)
    assert "insert it" in str(raised.value) and "\n" not in str(raised.value)


def test_a_token_put_back_signs_again_in_the_same_process(in_process: SoftHSM) -> None:
    """Removed (its directory moved away, as the trial did) under a running process: one
    ConfigError; put back: the next signature is made, with no restart (trial K12: every
    later try failed with GeneralError until the process was restarted)."""
    key = open_signing_key(in_process.uri(_tool_key(in_process)))
    key.sign(b"before")
    tokens = in_process.root / "tokens"
    tokens.rename(in_process.root / "tokens.away")
    tokens.mkdir()
    with pytest.raises(ConfigError, match="insert it"):
        key.sign(b"manifest")
    tokens.rmdir()
    (in_process.root / "tokens.away").rename(tokens)
    for attempt in range(2):  # and again: the module stays usable
        signature = key.sign(b"manifest %d" % attempt)
        key.public.key.verify(signature, b"manifest %d" % attempt)


def test_a_token_holding_another_key_under_the_name_cannot_sign(in_process: SoftHSM) -> None:
    """The key replaced (another key under the same name) after it was loaded: the token's
    signature does not verify with the key loaded before, so nothing is signed with it."""
    key = open_signing_key(in_process.uri(_tool_key(in_process)))
    for kind in ("privkey", "pubkey"):
        in_process.tool("--delete-object", "--type", kind, "--label", "k")
    _tool_key(in_process)
    with pytest.raises(IntegrityError, match="does not verify with the key's public half"):
        key.sign(b"manifest")


def test_the_slot_and_module_a_uri_names_choose_the_token(in_process: SoftHSM) -> None:
    """slot-id, slot-description and library-manufacturer, when they describe the token's
    slot and module, find it (and sign); when they do not, nothing matches (above)."""
    _tool_key(in_process)
    library = pkcs11.lib(str(in_process.module))
    slot = library.get_token(token_label="mirror").slot
    named = f";slot-id={slot.slot_id};library-manufacturer={library.manufacturer_id};object=k"
    key = open_signing_key(in_process.uri("k").replace(";object=k", named.replace(" ", "%20")))
    key.public.key.verify(key.sign(b"manifest"), b"manifest")


def _tool_key(hsm: SoftHSM) -> str:
    hsm.tool("--keypairgen", "--key-type", "EC:edwards25519", "--label", "k")
    return "k"


def _wrong_pin(hsm: SoftHSM) -> tuple[str, dict[str, str]]:
    wrong = hsm.root / "wrong-pin"
    wrong.write_text("not-the-pin\n")
    wrong.chmod(0o600)
    return hsm.uri("k", pin_file=wrong), hsm.env


FAILURES: dict[
    str, tuple[Callable[[SoftHSM], tuple[str, dict[str, str]]], int, str | tuple[str, ...]]
] = {
    "wrong PIN": (_wrong_pin, 4, "the token refused the PIN in"),
    "missing PIN file": (
        lambda h: (h.uri("k", pin_file=h.root / "absent"), h.env),
        2,
        "the PIN file",
    ),
    "missing object": (lambda h: (h.uri("absent"), h.env), 2, "holds no private key"),
    "missing token": (lambda h: (h.uri("k", token="absent"), h.env), 2, "no token matches"),
    "removed token": (
        lambda h: (h.remove_token("mirror"), (h.uri("k"), h.env))[1],
        2,
        "no token matches",
    ),
    "missing module": (
        lambda h: (h.uri("k").replace(str(h.module), "/usr/lib/absent.so"), h.env),
        2,
        "/usr/lib/absent.so does not exist",
    ),
    "missing mechanism": (lambda h: (h.uri("k"), h.without_eddsa()), 2, "no CKM_EDDSA"),
    # a second key under the name: the line was followed by a traceback (trial37 D6)
    "two keys under the name": (
        lambda h: (_tool_key(h), (h.uri("k"), h.env))[1],
        2,
        "several private keys match",
    ),
    # a FIFO nobody writes hung the command (trial37 G5)
    "PIN file a FIFO": (
        lambda h: (os.mkfifo(h.root / "fifo"), (h.uri("k", pin_file=h.root / "fifo"), h.env))[1],
        2,
        "not a regular file",
    ),
    # slot-* and library-* were accepted and ignored (trial37 G4): RFC 7512, all must match
    "slot-id of no slot": (
        lambda h: (h.uri("k").replace(";object=k", ";slot-id=99;object=k"), h.env),
        2,
        "no token matches",
    ),
    "another module's library-manufacturer": (
        lambda h: (h.uri("k").replace(";object=k", ";library-manufacturer=Other;object=k"), h.env),
        2,
        "is not the library-* the URI names",
    ),
    # two tokens of one label: slot-id= or serial= chooses (hostile37: the hint said insert it)
    "two tokens of one label": (
        lambda h: (h.add_token("mirror"), (h.uri("k"), h.env))[1],
        2,
        ("2 tokens match in", "serial= or slot-id="),
    ),
    "PIN in the settings": (
        lambda h: (h.uri("k", extra=f"&pin-value={h.pin}"), h.env),
        2,
        "pin-value puts the token's PIN in the settings",
    ),
}


@pytest.mark.parametrize("case", sorted(FAILURES))
def test_what_a_token_cannot_do_is_one_line_and_its_code(softhsm: SoftHSM, case: str) -> None:
    _tool_key(softhsm)
    make, code, says = FAILURES[case]
    uri, env = make(softhsm)
    done = mirror_cli("keys", "show", uri, env=env)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == code, done.stderr
    assert len(lines) == 1 and lines[0].startswith("mirror: error: pkcs11:"), done.stderr
    for part in (says,) if isinstance(says, str) else says:
        assert part in lines[0], lines[0]
    assert softhsm.pin not in done.stdout + done.stderr
