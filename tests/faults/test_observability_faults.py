"""What an operator sees when the network's name service fails: `mirror export run` with
a vendor host that does not resolve gives up within seconds with one line naming it
(exit 75), and each retry before that is one readable warning."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from mirror.vendorapi.transport import DNS_ATTEMPTS
from tests.fixtures.cli import mirror_cli, write_config


@pytest.mark.fault("11.6 vendor host does not resolve", "exit 75 within seconds, host named")
def test_an_unresolvable_vendor_host_fails_fast_and_names_it(
    tmp_path: Path, fault_got: list[str]
) -> None:
    config = write_config(
        tmp_path / "config.toml",
        {
            "api": {"base_url": "http://vendor-api.invalid", "retry_timeout": "300s"},
            "store": {"path": str(tmp_path / "store")},
            "exports": [{"domain": "docs.example.com", "every": "1h"}],
        },
    )
    began = time.monotonic()
    done = mirror_cli(
        "--config",
        str(config),
        "-v",
        "export",
        "run",
        "docs.example.com",
        env={"MIRROR_API_KEY": "mint_dns_fault_key_1234"},
    )
    elapsed = time.monotonic() - began
    errors = [line for line in done.stderr.splitlines() if line.startswith("mirror: error:")]
    retries = [line for line in done.stderr.splitlines() if '"logger": "mirror.retry"' in line]
    fault_got.append(f"exit {done.returncode} after {elapsed:.1f}s, {len(retries)} retry lines")
    assert done.returncode == 75, done.stderr
    assert len(errors) == 1 and "'vendor-api.invalid'" in errors[0], done.stderr
    assert "cannot resolve" in errors[0]
    assert len(retries) == DNS_ATTEMPTS - 1
    assert "Traceback" not in done.stderr and "mint_dns_fault_key_1234" not in done.stderr
    assert elapsed < 60  # DNS_ATTEMPTS tries, not the 300 s retry_timeout
