"""Provenance statements: real Ed25519 keys, real DSSE envelopes, and the README's recipe run
with openssl, coreutils and python3's standard library (tools that are not mirror) on real
archives, the hostile ones too."""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from mirror.archive import inspect_archive
from mirror.errors import IntegrityError
from mirror.integrity import hash_file
from mirror.transferset.keys import generate_keypair, load_public_key, load_signing_key
from mirror.transferset.provenance import (
    PAYLOAD_TYPE,
    pae,
    sign_statement,
    statement,
    verify_provenance,
)
from tests.fixtures.archives import Entry, entries_of, sample_site, write_tar, write_zip
from tests.fixtures.docs import documented

PREDICATE = {"domain": "docs.example.com", "vendor": {"job_id": "se_1", "page_count": 40}}


@pytest.fixture
def keys(tmp_path: Path) -> dict[str, object]:
    made = generate_keypair(tmp_path / "keys" / "transfer")
    other = generate_keypair(tmp_path / "keys" / "other")
    public = load_public_key(made.public_path)
    return {
        "signing": load_signing_key(made.private_path),
        "other": load_signing_key(other.private_path),
        "trusted": {public.key_id: public},
        "pub": made.public_path,
    }


def envelope_for(sha256: str, keys: dict[str, object], key: str = "signing") -> bytes:
    body = statement("docs.example.com/2026-11-24/bundle.tar.gz", sha256, PREDICATE)
    return sign_statement(body, keys[key])  # type: ignore[arg-type]


def test_a_signed_statement_verifies_and_says_what_it_was_given(keys: dict[str, object]) -> None:
    sha = "ab" * 32
    envelope = envelope_for(sha, keys)
    document = json.loads(envelope)
    assert document["payloadType"] == PAYLOAD_TYPE == "application/vnd.in-toto+json"
    body = json.loads(base64.b64decode(document["payload"]))
    assert body["_type"] == "https://in-toto.io/Statement/v1"
    assert body["subject"][0]["digest"] == {"sha256": sha}
    proven = verify_provenance(envelope, keys["trusted"], sha256=sha)  # type: ignore[arg-type]
    assert proven.predicate == PREDICATE and proven.key_id == document["signatures"][0]["keyid"]
    assert envelope_for(sha, keys) == envelope  # canonical: same input, same bytes


def test_pae_is_the_dsse_v1_encoding() -> None:
    assert pae("http://example.com/HelloWorld", b"hello world") == (
        b"DSSEv1 29 http://example.com/HelloWorld 11 hello world"
    )


def test_wrong_subject_wrong_key_and_tampering_are_refused(keys: dict[str, object]) -> None:
    sha = "ab" * 32
    trusted = keys["trusted"]
    with pytest.raises(IntegrityError, match="is about bundle abababababababab"):
        verify_provenance(envelope_for(sha, keys), trusted, sha256="cd" * 32)  # type: ignore[arg-type]
    with pytest.raises(IntegrityError, match="not trusted here"):
        verify_provenance(envelope_for(sha, keys, "other"), trusted, sha256=sha)  # type: ignore[arg-type]
    document = json.loads(envelope_for(sha, keys))
    body = base64.b64decode(document["payload"]).replace(b'"page_count": 40', b'"page_count": 4')
    document["payload"] = base64.b64encode(body).decode()
    with pytest.raises(IntegrityError, match="changed after signing"):
        verify_provenance(json.dumps(document).encode(), trusted, sha256=sha)  # type: ignore[arg-type]
    with pytest.raises(IntegrityError, match="not valid JSON"):
        verify_provenance(b"{", trusted, sha256=sha)  # type: ignore[arg-type]


def test_a_subject_is_returned_when_none_is_expected_and_must_be_a_sha256(
    keys: dict[str, object],
) -> None:
    proven = verify_provenance(envelope_for("ab" * 32, keys), keys["trusted"])  # type: ignore[arg-type]
    assert proven.sha256 == "ab" * 32
    with pytest.raises(IntegrityError, match="subject has no sha256"):
        verify_provenance(envelope_for("AB" * 32, keys), keys["trusted"])  # type: ignore[arg-type]


class Recipe:
    """The README's by-hand check (`provenance-verify`), run with sh, openssl and python3 in
    a directory of its own on an envelope and an archive named as the README names it."""

    def __init__(self, root: Path, keys: dict[str, object], envelope: bytes) -> None:
        self.root = root
        self.envelope = envelope
        self.text = documented("provenance-verify").replace(
            "/etc/mirror/transfer.pub", str(keys["pub"])
        )
        self.runs = 0

    def run(
        self, archive: Path, envelope: bytes | None = None, name: str = "bundle.tar.gz"
    ) -> subprocess.CompletedProcess[str]:
        self.runs += 1
        work = self.root / f"check-{self.runs}"
        work.mkdir()
        shutil.copyfile(archive, work / name)
        (work / "provenance.intoto.json").write_bytes(envelope or self.envelope)
        script = self.text.replace("bundle.tar.gz", name)
        return subprocess.run(
            ["sh", "-e", "-c", script], cwd=work, capture_output=True, text=True, check=False
        )


@pytest.fixture
def signed_site(keys: dict[str, object], tmp_path: Path) -> tuple[Recipe, dict[str, bytes]]:
    """The recipe, over a statement signed for the vendor's bundle of `sample_site()`."""
    site = sample_site()
    vendor = write_tar(tmp_path / "vendor.tar.gz", site)
    predicate = {**PREDICATE, "tree_sha256": inspect_archive(vendor).tree_sha256}
    body = statement(
        "docs.example.com/2026-11-24/bundle.tar.gz", hash_file(vendor).sha256, predicate
    )
    recipe = Recipe(tmp_path, keys, sign_statement(body, keys["signing"]))  # type: ignore[arg-type]
    return recipe, site


def test_the_documented_recipe_passes_on_every_archive_of_the_signed_tree(
    signed_site: tuple[Recipe, dict[str, bytes]], tmp_path: Path
) -> None:
    """The vendor's bundle, and the same site in other bytes as a delta's import makes it
    (other member order, compression, directories, './' names, tar format) or as a zip."""
    recipe, site = signed_site
    entries = [Entry("./", kind="dir"), Entry("./docs", kind="dir")]
    entries += [Entry(f"./{name}", data) for name, data in reversed(site.items())]
    others = [
        (tmp_path / "vendor.tar.gz", "bundle.tar.gz"),
        (write_tar(tmp_path / "a.tar.gz", entries, compresslevel=1), "bundle.tar.gz"),
        (write_tar(tmp_path / "b.tar.gz", site, tar_format=tarfile.GNU_FORMAT), "bundle.tar.gz"),
        (write_zip(tmp_path / "c.zip", site), "bundle.zip"),
    ]
    for archive, name in others:
        good = recipe.run(archive, name=name)
        assert good.returncode == 0, good.stdout + good.stderr
        assert "Signature Verified Successfully" in good.stdout
        assert f"{name}: tree OK" in good.stdout


def test_the_documented_recipe_fails_on_another_site_a_link_or_another_signer(
    signed_site: tuple[Recipe, dict[str, bytes]], keys: dict[str, object], tmp_path: Path
) -> None:
    recipe, site = signed_site
    changed = {**site, "index.html": b"<html><body>tampered</body></html>\n"}
    link = [*entries_of(site), Entry("assets/current", kind="symlink", target="/etc")]
    twice = [*entries_of(site), Entry("./index.html", b"<html>second</html>\n")]
    outside = [*entries_of(site), Entry("docs/../../escape.html", b"x")]
    hostile = [
        (write_tar(tmp_path / "changed.tar.gz", changed), "bundle.tar.gz", "tree "),
        (write_tar(tmp_path / "link.tar.gz", link), "bundle.tar.gz", "not a file or a dir"),
        (write_tar(tmp_path / "twice.tar.gz", twice), "bundle.tar.gz", "there twice"),
        (write_tar(tmp_path / "outside.tar.gz", outside), "bundle.tar.gz", "outside the site"),
        (write_zip(tmp_path / "link.zip", link), "bundle.zip", "not a file or a dir"),
    ]
    for archive, name, said in hostile:
        refused = recipe.run(archive, name=name)
        assert refused.returncode != 0, (archive, refused.stdout)
        assert "Signature Verified Successfully" in refused.stdout
        assert said in refused.stderr and refused.stderr.rstrip().endswith("FAILED")
    vendor = tmp_path / "vendor.tar.gz"
    other_key = envelope_for("ab" * 32, keys, "other")
    assert recipe.run(vendor, other_key).returncode != 0  # another key
    document = json.loads(recipe.envelope)
    body = base64.b64decode(document["payload"]).replace(b'"page_count": 40', b'"page_count": 4')
    document["payload"] = base64.b64encode(body).decode()
    changed_after = json.dumps(document, indent=2).encode()
    refused = recipe.run(vendor, changed_after)
    assert refused.returncode != 0 and "Signature Verified Successfully" not in refused.stdout
