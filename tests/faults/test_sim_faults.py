"""The simulator answers like the vendor's API gateway (issue 8, class 12).

Unsupported methods get 405 with `Allow` and a JSON error (never the standard library's
501 HTML page), and schemathesis, fed the vendor's own OpenAPI files (copies in
tests/fixtures/vendor_openapi/, SOURCES.md there says where each comes from), finds no
server error (5xx) in `mirror sim serve`. Schemathesis runs in the test's temporary
directory, so its cache (`.schemathesis/`) is never written into the source tree.
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from mirror.sim import Simulator
from tests.fixtures.campaign import ONLY_IN_MAKE_FAULTS, examples

VENDOR = Path(__file__).resolve().parents[1] / "fixtures" / "vendor_openapi"
SPECS = sorted(VENDOR.glob("*openapi*.json"))
# per operation (make faults: 8, enough to hit every branch the specs describe); the coverage
# phase sends every method and boundary value whatever this number
EXAMPLES = examples(3, 8)
# the admin API and the static-export API as the vendor serves it now; the older static-export
# copies (a branch, an index) describe the same operations: make faults runs them too
IN_MAKE_TEST = {"admin-openapi.main-HEAD.json", "static-export-openapi.main-HEAD.json"}


def method(name: str) -> Any:
    fault = pytest.mark.fault(f"8.12 simulator answers {name}", "405, Allow, JSON error body")
    return pytest.param(name, marks=fault, id=name)


def vendor_spec(path: Path) -> Any:
    case = f"8.12 schemathesis over {path.name.removesuffix('.json')}"
    fault = pytest.mark.fault(case[:60], "no 5xx; 405 with Allow for unlisted methods")
    marks = [fault] if path.name in IN_MAKE_TEST else [fault, ONLY_IN_MAKE_FAULTS]
    return pytest.param(path, marks=marks, id=path.name)


@pytest.mark.parametrize("method", [method(m) for m in ("OPTIONS", "PUT", "TRACE", "BREW")])
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


@pytest.mark.timeout(360)
@pytest.mark.parametrize("spec", [vendor_spec(p) for p in SPECS])
def test_schemathesis_finds_no_server_error(
    sim: Simulator, spec: Path, tmp_path: Path, fault_got: list[str]
) -> None:
    """`schemathesis run` as a user would: its examples, coverage (which also sends methods
    the spec does not list) and fuzzing phases, a few examples each, a fixed seed."""
    document = json.loads(spec.read_text())
    servers = document.get("servers") or [{"url": ""}]
    base_url = sim.url + urlsplit(servers[0]["url"]).path.rstrip("/")
    result = subprocess.run(
        [
            str(Path(sys.executable).with_name("schemathesis")),
            "run",
            str(spec.resolve()),
            "--url",
            base_url,
            "--header",
            f"Authorization: Bearer {sim.key}",
            "--checks",
            "not_a_server_error,unsupported_method,allow_header_conformance",
            "--phases",
            "examples,coverage,fuzzing",
            "--max-examples",
            str(EXAMPLES),
            "--seed",
            "1",
            "--workers",
            "1",
            "--no-color",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,  # schemathesis keeps a cache in the working directory
        timeout=300,
        check=False,
    )
    counted = re.search(r"(\d+) generated, (\d+) passed", result.stdout)
    fault_got.append(counted.group(0) if counted else "no summary")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]


def test_the_vendor_openapi_files_are_in_the_repository() -> None:
    """The schema cases above run on every checkout: the specs are test data in the tree."""
    names = {path.name for path in SPECS}
    assert len(names) == 4 and "admin-openapi.main-HEAD.json" in names, names
    assert (VENDOR / "SOURCES.md").is_file()
