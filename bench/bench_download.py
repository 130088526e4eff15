"""Download throughput and memory: mirror's resumable, hashing download vs curl and sha256sum.

A bundle of BENCH_DOWNLOAD_MIB (default 500) MiB is served by the simulator on
loopback. Measured in the same run: `curl -o FILE` of a fresh link, `sha256sum`
of the file, and mirror's download (stream + sha256 in one pass + fsync
checkpoints) in a fresh interpreter, so its peak RSS is its own. A second
mirror run at a quarter of the size shows that memory does not grow with size.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path

import httpx

from bench.common import Measurement, baseline_rss_mib, print_table, python_timed, run_timed
from mirror.sim import SimConfig, Simulator

DOWNLOAD_CODE = """
import sys, httpx
from pathlib import Path
from mirror.vendor.client import BundleLink
from mirror.vendor.download import download_bundle
url, dest = sys.argv[1], Path(sys.argv[2])
link = BundleLink(job_id="bench", url=url, size_bytes=None, expires_at=None)
with httpx.Client(timeout=60) as http:
    result = download_bundle(http, link, dest, refresh_link=lambda: link)
Path(sys.argv[3]).write_text(result.sha256)
"""


def _completed_job(sim: Simulator, domain: str) -> str:
    headers = {"Authorization": f"Bearer {sim.key}"}
    with httpx.Client(base_url=sim.url, headers=headers, timeout=600) as http:
        job_id = str(http.post("/v1/static-export/jobs", json={"domain": domain}).json()["jobId"])
        while http.get(f"/v1/static-export/jobs/{job_id}").json()["status"] != "completed":
            time.sleep(0.2)
        while True:
            answer = http.post(f"/v1/static-export/jobs/{job_id}/bundle")
            if answer.status_code == 200:
                return job_id
            time.sleep(0.2)


def _fresh_link(sim: Simulator, job_id: str) -> str:
    headers = {"Authorization": f"Bearer {sim.key}"}
    answer = httpx.post(f"{sim.url}/v1/static-export/jobs/{job_id}/bundle", headers=headers)
    return str(answer.json()["bundleUrl"])


def _mirror_download(sim: Simulator, job_id: str, work: Path, label: str, size: int) -> Measurement:
    dest = work / f"{label}.part"
    digest_file = work / f"{label}.sha256"
    code = DOWNLOAD_CODE.replace("sys.argv[1]", repr(_fresh_link(sim, job_id)))
    code = code.replace("sys.argv[2]", repr(str(dest))).replace(
        "sys.argv[3]", repr(str(digest_file))
    )
    measurement = python_timed(label, code, size)
    if digest_file.read_text() != sim.bundle_sha256(job_id):
        raise SystemExit(f"{label}: sha256 differs from the simulator's")
    dest.unlink()
    return measurement


def main() -> None:
    size_mib = int(os.environ.get("BENCH_DOWNLOAD_MIB", "500"))
    work = Path(tempfile.mkdtemp(prefix="mirror-bench-"))
    try:
        with Simulator(
            SimConfig(queue_seconds=0.0, run_seconds=0.1, bundle_size=size_mib * 1024**2)
        ) as sim:
            sim.start()
            big = _completed_job(sim, "big.bench.test")
            small_sim_size = size_mib // 4
            curl_file = work / "curl.tar.gz"
            link = _fresh_link(sim, big)
            size = int(httpx.head(link).headers["content-length"])
            rows = [run_timed("curl -o FILE", ["curl", "-sSf", "-o", str(curl_file), link], size)]
            rows.append(run_timed("sha256sum FILE", ["sha256sum", str(curl_file)], size))
            rows.append(
                Measurement(
                    "curl, then sha256sum",
                    rows[0].seconds + rows[1].seconds,
                    size,
                    max(rows[0].peak_rss_mib or 0, rows[1].peak_rss_mib or 0),
                )
            )
            curl_file.unlink()
            rows.append(_mirror_download(sim, big, work, "mirror download (+sha256)", size))
            sim.config.bundle_size = small_sim_size * 1024**2
            small = _completed_job(sim, "small.bench.test")
            small_size = int(httpx.head(_fresh_link(sim, small)).headers["content-length"])
            rows.append(_mirror_download(sim, small, work, "mirror download, 1/4 size", small_size))
        print_table(rows, "curl -o FILE")
        baseline = baseline_rss_mib("httpx, mirror.vendor.client, mirror.vendor.download")
        print(f"interpreter + the download's imports alone: {baseline:.0f} MiB peak RSS")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
