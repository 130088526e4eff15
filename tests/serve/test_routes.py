"""mirror.serve.routes: the URL space, and every other target refused (pure)."""

from __future__ import annotations

import pytest

from mirror.serve.routes import BundleRoute, Page, Refusal, bundle_path, parse_target

D = "docs.example.com"


@pytest.mark.parametrize(
    ("target", "route"),
    [
        (f"/domains/{D}/2026-11-21/bundle.tar.gz", BundleRoute(D, "2026-11-21", "tar.gz")),
        (f"/domains/{D}/2026-11-21.3/bundle.zip", BundleRoute(D, "2026-11-21.3", "zip")),
        (f"/domains/{D}/current/bundle.tar.gz", BundleRoute(D, None, "tar.gz")),
        (f"/domains/{D}/current/bundle.tar.gz?x=1", BundleRoute(D, None, "tar.gz")),
        ("/domains/docs%2Eexample%2Ecom/current/bundle.tar.gz", BundleRoute(D, None, "tar.gz")),
        ("/", Page("status")),
        ("/healthz", Page("healthz")),
        ("/readyz", Page("readyz")),
        ("/metrics", Page("metrics")),
        # absolute-form (RFC 9112 3.2.2: a server MUST accept it); the authority is ignored
        (
            f"http://mirror-serve:8080/domains/{D}/current/bundle.tar.gz",
            BundleRoute(D, None, "tar.gz"),
        ),
        ("HTTP://127.0.0.1:8080/healthz", Page("healthz")),
        ("https://[::1]/readyz?x=1", Page("readyz")),
        ("http://mirror-serve", Page("status")),
        ("http://mirror-serve?x", Page("status")),
    ],
)
def test_the_routes(target: str, route: object) -> None:
    assert parse_target(target) == route


def test_a_bundle_path_parses_back_to_its_route() -> None:
    for label in ("2026-11-21", None):
        path = bundle_path(D, label, "tar.gz")
        assert parse_target(path) == BundleRoute(D, label, "tar.gz")


@pytest.mark.parametrize(
    "target",
    [
        f"/domains/{D}/../../etc/bundle.tar.gz",
        f"/domains/{D}/2026-11-21/../bundle.tar.gz",
        "/domains/%2e%2e/2026-11-21/bundle.tar.gz",
        f"/domains/{D}/%2E/bundle.tar.gz",
        f"/domains/{D}%2f2026-11-21/bundle.tar.gz",
        f"/domains/{D}/2026-11-21%2Fbundle.tar.gz",
        f"/domains/{D}/2026-11-21%5cbundle.tar.gz",
        f"/domains/{D}/2026-11-21/bundle.tar.gz%00",
        f"/domains/{D}/2026-11-21/bundle.tar.gz\x00",
        "/domains/%252e%252e/2026-11-21/bundle.tar.gz",
        "/domains/%c0%ae%c0%ae/2026-11-21/bundle.tar.gz",
        "/domains/%e2%80%ae/2026-11-21/bundle.tar.gz",
        f"/domains/{D}\\..\\bundle.tar.gz",
        f"/domains/{D}/2026-11-21/bundle.tar.gz%",
        f"/domains/{D}/2026-11-21/bundle.tar.gz%zz",
        "/domains/é/current/bundle.tar.gz",
        f"http://evil/domains/{D}/../current/bundle.tar.gz",
        f"http://evil/domains/{D}%2fcurrent/bundle.tar.gz",
        f"ftp://evil/domains/{D}/current/bundle.tar.gz",
        f"http:///domains/{D}/current/bundle.tar.gz",
        f"http://evil\\x/domains/{D}/current/bundle.tar.gz",
        "http://",
        "*",
        "/" + "a" * 2000,
    ],
)
def test_hostile_targets_are_bad_requests(target: str) -> None:
    refused = parse_target(target)
    assert isinstance(refused, Refusal) and refused.status == 400, refused
    assert "\n" not in refused.reason


@pytest.mark.parametrize(
    "target",
    [
        "/domains",
        f"/domains/{D}",
        f"/domains/{D}/2026-11-21",
        f"/domains/{D}/2026-11-21/manifest.json",
        f"/domains/{D}/2026-11-21/provenance.intoto.json",
        f"/domains/{D}/2026-11-21/bundle.exe",
        f"/domains/{D}//bundle.tar.gz",
        f"/domains/{D}/latest/bundle.tar.gz",
        f"/domains/{D}/2026-11-21/bundle.tar.gz/",
        "/domains/DOCS.example.com/current/bundle.tar.gz",
        "/domains/-x-/current/bundle.tar.gz",
        "/static-export/docs.example.com/index.json",
        "/healthz/",
        "//",
    ],
)
def test_anything_else_is_not_found(target: str) -> None:
    refused = parse_target(target)
    assert isinstance(refused, Refusal) and refused.status == 404, refused
