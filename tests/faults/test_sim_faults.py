"""The simulator answers like the vendor's API gateway (issue 8, class 12).

Unsupported methods get 405 with `Allow` and a JSON error (never the standard library's
501 HTML page), and schemathesis, fed the vendor's own OpenAPI files from
`../shared/vendor/`, finds no server error (5xx) in `mirror sim serve`. The schema cases
are skipped when that folder is absent (it is not part of the repository).
"""

from __future__ import annotations

import socket
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from mirror.sim import Simulator

VENDOR = Path(__file__).resolve().parents[2] / ".." / "shared" / "vendor"
SPECS = sorted(VENDOR.glob("*openapi*.json")) if VENDOR.is_dir() else []
EXAMPLES = 8  # per operation: enough to hit every branch the specs describe, in seconds


@pytest.mark.fault("8.12 unsupported method on the simulator", "405, Allow, JSON error body")
@pytest.mark.parametrize("method", ["OPTIONS", "PUT", "DELETE", "PATCH", "TRACE", "BREW"])
def test_unsupported_methods_get_405_with_allow_and_json(
    sim: Simulator, method: str, fault_got: list[str]
) -> None:
    auth = {"Authorization": f"Bearer {sim.key}"}
    response = httpx.request(method, sim.url + "/v1/static-export/jobs/se_1", headers=auth)
    fault_got.append(f"{response.status_code} Allow: {response.headers.get('allow')}")
    assert response.status_code == 405
    assert response.headers["allow"] == "GET, HEAD"
    assert response.headers["content-type"] == "application/json"
    assert response.json() == {"error": "Method not allowed"}


@pytest.mark.fault("8.12 malformed request (header too long)", "431 with a JSON error body")
def test_a_malformed_request_gets_a_json_error(sim: Simulator, fault_got: list[str]) -> None:
    request = b"GET /v1/static-export/jobs HTTP/1.1\r\nX-Long: " + b"a" * 70_000 + b"\r\n\r\n"
    with socket.create_connection(("127.0.0.1", sim.port), timeout=10) as connection:
        connection.sendall(request)
        answer = b""
        while chunk := connection.recv(65536):
            answer += chunk
    head, _, body = answer.decode("latin-1").partition("\r\n\r\n")
    fault_got.append(head.splitlines()[0])
    assert head.startswith("HTTP/1.1 431")
    assert "Content-Type: application/json" in head and body.startswith('{"error": ')


@pytest.mark.fault("8.12 schemathesis over the vendor's OpenAPI files", "no 5xx from the simulator")
@pytest.mark.skipif(not SPECS, reason=f"no vendor OpenAPI files in {VENDOR}")
@pytest.mark.timeout(120)
@pytest.mark.parametrize("spec", SPECS, ids=[p.name for p in SPECS])
def test_schemathesis_finds_no_server_error(
    sim: Simulator, spec: Path, fault_got: list[str]
) -> None:
    schemathesis = pytest.importorskip("schemathesis")
    from hypothesis import HealthCheck, Phase, given, settings

    schema = schemathesis.openapi.from_path(spec)
    servers = schema.raw_schema.get("servers") or [{"url": ""}]
    base_url = sim.url + urlsplit(servers[0]["url"]).path.rstrip("/")
    headers = {"Authorization": f"Bearer {sim.key}"}
    server_errors: list[str] = []
    calls = 0
    for result in schema.get_all_operations():
        operation = result.ok()

        @settings(
            max_examples=EXAMPLES,
            deadline=None,
            database=None,
            derandomize=True,
            phases=[Phase.explicit, Phase.generate],
            suppress_health_check=list(HealthCheck),
        )
        @given(case=operation.as_strategy())
        def call(case: object, label: str = operation.label) -> None:
            nonlocal calls
            response = case.call(base_url=base_url, headers=headers, timeout=10)  # type: ignore[attr-defined]
            calls += 1
            if response.status_code >= 500:
                server_errors.append(f"{response.status_code} {label}")

        call()
    fault_got.append(f"{spec.name[:30]}: {calls} calls, {len(server_errors)} 5xx")
    assert calls > 0
    assert server_errors == []
