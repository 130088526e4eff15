from __future__ import annotations

from pathlib import Path

import pytest

from mirror.config import Settings, load_settings, settings_from_dict
from mirror.errors import ConfigError
from tests.fixtures.cli import REPO, mirror_cli, write_config


def test_no_config_anywhere_refuses_naming_the_places(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MIRROR_CONFIG", raising=False)
    monkeypatch.setattr("mirror.config.DEFAULT_CONFIG_PATH", Path("/nonexistent/mirror.toml"))
    with pytest.raises(ConfigError) as refused:
        load_settings(None)
    assert refused.value.exit_code == 2
    for place in ("--config", "$MIRROR_CONFIG", "/nonexistent/mirror.toml", "--defaults"):
        assert place in str(refused.value)


def test_defaults_when_allowed_and_default_path_absent(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MIRROR_CONFIG", raising=False)
    monkeypatch.setattr("mirror.config.DEFAULT_CONFIG_PATH", Path("/nonexistent/mirror.toml"))
    settings = load_settings(None, allow_defaults=True)
    assert settings.source is None
    assert settings.api.export_flow == "global"
    assert settings.store.database_url().startswith("sqlite:///")


def test_explicit_path_must_exist(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_settings(tmp_path / "missing.toml")


def test_env_variable_names_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write_config(tmp_path / "c.toml", {"api": {"timeout": "10s"}})
    monkeypatch.setenv("MIRROR_CONFIG", str(path))
    assert load_settings(None).api.timeout == 10


def test_errors_name_key_and_file(tmp_path: Path) -> None:
    path = write_config(tmp_path / "c.toml", {"api": {"timeout": "soon"}})
    with pytest.raises(ConfigError) as info:
        load_settings(path)
    assert str(path) in str(info.value)
    assert "api.timeout" in str(info.value)
    assert info.value.exit_code == 2


def test_unknown_key_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"store\.pth: unknown key"):
        settings_from_dict({"store": {"pth": "/x"}})


def test_bad_toml(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text("[api\nbase_url=")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_settings(path)


def test_exports_validated() -> None:
    settings = settings_from_dict(
        {"exports": [{"domain": "Docs.Example.COM", "every": "1h", "paths": ["index"]}]}
    )
    assert settings.exports[0].domain == "docs.example.com"
    assert settings.exports[0].every == 3600
    with pytest.raises(ConfigError, match=r"exports\.0\.domain"):
        settings_from_dict({"exports": [{"domain": "https://docs.example.com/"}]})
    with pytest.raises(ConfigError, match="listed twice"):
        settings_from_dict({"exports": [{"domain": "a.example"}, {"domain": "a.example"}]})
    with pytest.raises(ConfigError, match=r"exports\.0\.every: Input should be greater than 0"):
        settings_from_dict({"exports": [{"domain": "a.example", "every": "0s"}]})


def test_presign_ttl_capped_at_seven_days() -> None:
    with pytest.raises(ConfigError, match=r"target\.presign_ttl"):
        settings_from_dict({"target": {"presign_ttl": "8d"}})


def test_download_limits_and_job_timeout() -> None:
    defaults = Settings()
    assert (defaults.download.min_speed, defaults.download.stall_time) == (1024, 30.0)
    assert defaults.api.job_timeout == 4 * 3600
    settings = settings_from_dict(
        {"download": {"min_speed": "64KiB", "stall_time": "2s"}, "api": {"job_timeout": "90m"}}
    )
    assert (settings.download.min_speed, settings.download.stall_time) == (65536, 2.0)
    assert settings.api.job_timeout == 5400
    assert settings_from_dict({"download": {"min_speed": 0}}).download.min_speed == 0
    with pytest.raises(ConfigError, match=r"download\.stall_time"):
        settings_from_dict({"download": {"stall_time": "0s"}})


def test_api_key_sources(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MIRROR_API_KEY", raising=False)
    monkeypatch.delenv("CREDENTIALS_DIRECTORY", raising=False)
    with pytest.raises(ConfigError, match="no admin API key"):
        Settings().api_key()
    key_file = tmp_path / "key"
    key_file.write_text("mint_fromfile\n")
    settings = settings_from_dict({"api": {"key_file": str(key_file)}})
    assert settings.api_key() == "mint_fromfile"
    monkeypatch.setenv("MIRROR_API_KEY", "mint_fromenv")
    assert settings.api_key() == "mint_fromenv"
    monkeypatch.delenv("MIRROR_API_KEY")
    creds = tmp_path / "creds"
    creds.mkdir()
    (creds / "admin-api-key").write_text("mint_fromsystemd")
    monkeypatch.setenv("CREDENTIALS_DIRECTORY", str(creds))
    assert Settings().api_key() == "mint_fromsystemd"


def test_unreadable_key_file_is_a_config_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MIRROR_API_KEY", raising=False)
    settings = settings_from_dict({"api": {"key_file": str(tmp_path / "nope")}})
    with pytest.raises(ConfigError, match="cannot read the admin API key file") as info:
        settings.api_key()
    assert info.value.exit_code == 2


def test_config_check_redacts_the_key(tmp_path: Path) -> None:
    secret = "mint_" + "s3cr3t" * 5
    key_file = tmp_path / "key"
    key_file.write_text(secret)
    path = write_config(
        tmp_path / "c.toml",
        {
            "api": {"key_file": str(key_file), "base_url": "https://u:apipw@api.example"},
            "store": {"path": str(tmp_path / "s"), "database": "postgresql+psycopg://u:pw@h/db"},
            "target": {"endpoint_url": "https://minio:s3pw@minio.internal:9000"},
        },
    )
    for env in ({}, {"MIRROR_API_KEY": secret}):
        result = mirror_cli("--json", "--config", str(path), "config", "check", env=env)
        assert result.returncode == 0, result.stderr
        assert secret not in result.stdout + result.stderr
        assert ":pw@" not in result.stdout
        assert "apipw" not in result.stdout and "s3pw" not in result.stdout
        assert '"valid": true' in result.stdout


def test_config_check_exit_2_on_bad_file(tmp_path: Path) -> None:
    path = write_config(tmp_path / "c.toml", {"daemon": {"concurrency": 0}})
    result = mirror_cli("--config", str(path), "config", "check")
    assert result.returncode == 2
    assert "daemon.concurrency" in result.stderr
    assert str(path) in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_example_config_is_valid_and_complete() -> None:
    """config.example.toml must validate and mention every settings key."""
    path = REPO / "config.example.toml"
    settings = load_settings(path)
    text = path.read_text()
    for section_name, section in Settings.model_fields.items():
        if section_name in ("source", "exports", "sites"):
            continue
        model = section.annotation
        for key in model.model_fields:  # type: ignore[union-attr]
            assert f"{key} =" in text, f"config.example.toml lacks {section_name}.{key}"
    assert settings.exports


@pytest.mark.parametrize(
    ("listen", "says"),
    [
        ("127.0.0.1:99999", "port 99999 is not in 0-65535"),
        ("127.0.0.1:65536", "port 65536 is not in 0-65535"),
        ("999.0.0.1:8080", "999.0.0.1 is not an IPv4 address"),
        ("[::zz]:8080", "is not an IPv6 address"),
        ("bad host:8080", "is not an IP address or a host name"),
        ("localhost", "must be HOST:PORT"),
    ],
)
def test_serve_listen_is_an_address_that_can_be_bound(listen: str, says: str) -> None:
    """Refused when the settings are read (exit 2, naming serve.listen), so `config check`
    refuses it too, and never an OverflowError from bind() at start."""
    with pytest.raises(ConfigError, match=r"serve\.listen") as refused:
        settings_from_dict({"serve": {"listen": listen}})
    assert says in str(refused.value) and refused.value.exit_code == 2
    for good in ("0.0.0.0:8080", "[::1]:0", "mirror-serve.docs-mirror.svc:65535"):
        assert settings_from_dict({"serve": {"listen": good}}).serve.listen == good


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("http://127.0.0.1:18080/?x=1", "no query or fragment"),
        ("http://mirror-serve:8080/docs?", "no query or fragment"),
        ("http://mirror-serve:8080/#top", "no query or fragment"),
        ("https://reader:s3cr3t-pw@mirror-serve:8080", "must not hold a user name or password"),
        ("https://reader@mirror-serve:8080", "must not hold a user name or password"),
    ],
)
def test_serve_public_url_is_a_base_the_bundle_paths_can_follow(url: str, says: str) -> None:
    """A query or fragment in serve.public_url swallows the paths appended to it, a user
    name or password would be written into every values file: refused when the settings are
    read (exit 2, naming serve.public_url), the password never repeated (trial3637 G6)."""
    with pytest.raises(ConfigError, match=r"serve\.public_url") as refused:
        settings_from_dict({"serve": {"public_url": url}})
    assert says in str(refused.value)
    assert refused.value.exit_code == 2 and "s3cr3t-pw" not in str(refused.value)
    for good in ("http://mirror-serve.docs-mirror.svc:8080/", "https://[::1]:8443/mirror"):
        assert settings_from_dict({"serve": {"public_url": good}}).serve.public_url == good.rstrip(
            "/"
        )


def test_config_check_refuses_a_port_out_of_range(tmp_path: Path) -> None:
    path = write_config(tmp_path / "c.toml", {"serve": {"listen": "127.0.0.1:99999"}})
    result = mirror_cli("--config", str(path), "config", "check")
    assert result.returncode == 2 and "serve.listen" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_relative_paths_are_taken_from_the_config_files_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One rule for every path a config file names: from its own directory, not from where
    the command happens to run (a unit's working directory is /)."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    document = {
        "store": {"path": "store"},
        "serve": {"cache_dir": "relcache"},
        "target": {"transfer_keys": ["keys/transfer.pub", "/abs/x.pub"], "ca_bundle": "ca.pem"},
        "transfer": {"signing_key": "transfer.key"},
        "api": {"key_file": "api.key"},
        "chart": {"values_path": "values/{domain}.yaml"},
        "sites": [{"name": "north", "trusted_keys": ["north.pub"]}],
    }
    here = tmp_path / "etc"
    here.mkdir()
    settings = load_settings(write_config(here / "c.toml", document))
    assert settings.store.path == here / "store"
    assert settings.serve.cache_dir == here / "relcache"
    assert settings.target.transfer_keys == [here / "keys/transfer.pub", Path("/abs/x.pub")]
    assert settings.target.ca_bundle == str(here / "ca.pem")
    assert settings.transfer.signing_key == here / "transfer.key"
    assert settings.api.key_file == here / "api.key"
    assert settings.chart.values_path == str(here / "values/{domain}.yaml")
    assert settings.sites[0].trusted_keys == [here / "north.pub"]
    assert settings.store.database_url() == f"sqlite:///{here / 'store' / 'mirror.db'}"
    pkcs11 = "pkcs11:token=mirror;object=transfer"
    document["transfer"] = {"signing_key": pkcs11}
    token = load_settings(write_config(here / "d.toml", document))
    assert token.transfer.signing_key == pkcs11  # a token's URI is no path
    assert settings_from_dict({"serve": {"cache_dir": "rel"}}).serve.cache_dir == Path("rel")
