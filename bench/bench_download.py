"""Download: mirror's resumable, hashing, fsyncing download of one bundle from the simulator
on loopback vs `curl | tee FILE | openssl dgst -sha256; sync FILE` (the same promise from
the shell) and vs `curl -o FILE` (no hash, no fsync: the floor)."""

from __future__ import annotations

import sys

import httpx

from bench.common import RSS_HEADROOM_MIB, SIZE_MIB, MiB, Row, Side, compare, imports_rss_mib
from bench.setting import Setting

DOWNLOAD_CODE = """
import sys, httpx
from pathlib import Path
from mirror.vendorapi.client import BundleLink
from mirror.vendorapi.download import download_bundle
url, dest, out = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
link = BundleLink(job_id="bench", url=url, size_bytes=None, expires_at=None)
with httpx.Client(timeout=60) as http:
    result = download_bundle(http, link, dest, refresh_link=lambda: link)
out.write_text(result.sha256)
"""
TEE_RECIPE = 'curl -sSf "$1" | tee "$2" | openssl dgst -sha256 -r > "$3"; sync "$2"'


def run(s: Setting) -> list[Row]:
    s.sim.config.bundle_size = SIZE_MIB * MiB
    job = s.completed_job("download.bench.test")
    expected = s.sim.bundle_sha256(job)
    size = int(httpx.head(s.fresh_link(job)).headers["content-length"])
    dest, digest = s.work / "download.part", s.work / "download.sha256"

    def check() -> None:
        if digest.read_text().split(" ")[0].strip() != expected:
            raise SystemExit("download: the sha256 differs from the simulator's")
        dest.unlink()
        digest.unlink()

    def mirror_argv() -> list[str]:
        link = s.fresh_link(job)
        return [sys.executable, "-c", DOWNLOAD_CODE, link, str(dest), str(digest)]

    def tee_argv() -> list[str]:
        return ["sh", "-c", TEE_RECIPE, "tee", s.fresh_link(job), str(dest), str(digest)]

    def curl_argv() -> list[str]:
        return ["curl", "-sSf", "-o", str(dest), s.fresh_link(job)]

    mirror = Side("mirror download", mirror_argv, after=check, env=s.env)
    budget = imports_rss_mib(mirror_argv()[3:], s.work, s.env, DOWNLOAD_CODE) + RSS_HEADROOM_MIB
    check()
    rows = [
        compare(
            Row(
                "download",
                "download_bundle",
                "curl | tee | openssl dgst; sync",
                size,
                target="(was 1.30x)",
                rss_budget_mib=budget,
            ),
            mirror,
            Side("tee", tee_argv, after=check, env=s.env),
        ),
        compare(
            Row(
                "download",
                "download_bundle",
                "curl -o FILE",
                size,
                target="(was 0.48x)",
                rss_budget_mib=budget,
            ),
            mirror,
            Side("curl -o", curl_argv, after=lambda: dest.unlink(), env=s.env),
        ),
    ]
    return rows
