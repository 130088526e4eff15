"""Every line a long-running command writes is a JSON object (issue 37, item 5; trial3637
W5), and the README's log queries answer from it: run as a service runs it (stdout and
stderr to files, not a terminal), each of `mirror daemon`, `mirror serve` and `mirror
transfer receive` (a service: no --once) does some work and is stopped by SIGTERM; every
line of its stdout and its stderr, merged as `kubectl logs` and `journalctl -o cat` merge
them, is one JSON object with the fields README.md's Monitoring section names (`time`,
`level`, `logger`, `message`), the lines that matter are there, no secret of its
environment (the vendor key, the S3 secret key) is in anything it wrote, and each jq
program of README.md's table asked of that process's log runs on the merged output and
picks what it should (serve's access lines, the resend command of an incomplete set).
`transfer import` as its Kubernetes Job runs it (`MIRROR_LOG_FORMAT=json`) and a fatal
error of `mirror serve` under journald (`JOURNAL_STREAM`) are one error record each, with
the exit code (and `<3>` before it in the journal's stream)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path

import httpx
import pytest

from mirror.airgap import chart
from mirror.airgap.s3.objectstore import ObjectStore
from mirror.config import TargetSettings
from tests.airgap.chart.seeding import seed_version
from tests.fixtures.cli import REPO, cli_env, require_no_secrets, start_mirror, write_config
from tests.fixtures.daemon import daemon_config, simulator, stored_domains, wait_for
from tests.fixtures.forged import forged_table, table_datagrams
from tests.fixtures.s3 import free_port, new_key_pair
from tests.fixtures.udp import free_udp_port, wait_bound

pytestmark = pytest.mark.timeout(600)

LEVELS = {"debug", "info", "warning", "error", "critical"}
FIELDS = {"time", "level", "logger", "message"}
DOMAIN = "docs.example.com"
VERSION = "2026-11-20"

Launch = Callable[..., subprocess.Popen[bytes]]
"""Starts `mirror ARGS` (env= laid over the test environment) with the test's output files."""


@contextlib.contextmanager
def daemon(tmp_path: Path, store: ObjectStore, launch: Launch) -> Iterator[list[str]]:
    """The daemon exports one domain from the simulator (its vendor key in the environment)."""
    with simulator() as sim:
        config = daemon_config(
            tmp_path / "daemon.toml", base_url=sim.url, store=tmp_path / "store", domains=[DOMAIN]
        )
        launch("--config", str(config), "daemon", env={"MIRROR_API_KEY": sim.key})
        wait_for(lambda: stored_domains(config) == {DOMAIN}, 300, "a stored version")
        yield ["metrics listening", "stopping", "stopped"]


@contextlib.contextmanager
def serve(tmp_path: Path, store: ObjectStore, launch: Launch) -> Iterator[list[str]]:
    """mirror serve reads the bucket (one promoted version) with the S3 secret key and
    answers a pod: the version's bytes."""
    seed_version(store, tmp_path, VERSION, domain=DOMAIN)
    chart.promote(store, DOMAIN, VERSION)
    port = free_port()
    launch("--config", str(serve_config(tmp_path, store, port)), "serve")
    url = f"http://127.0.0.1:{port}"
    wait_for(lambda: _answers(f"{url}/readyz") == 200, 120, "ready", 0.2)
    assert _answers(f"{url}/domains/{DOMAIN}/current/bundle.tar.gz") == 200
    yield ["mirror serve listening on", "GET /domains/", "stopped after"]


def serve_config(tmp_path: Path, store: ObjectStore, port: int, **serve: object) -> Path:
    """Settings of mirror serve on 127.0.0.1:`port` reading `store`'s bucket."""
    endpoint = store.client.meta.endpoint_url
    return write_config(
        tmp_path / "serve.toml",
        {
            "target": {"endpoint_url": endpoint, "bucket": store.bucket, "prefix": store.prefix},
            "serve": {
                "listen": f"127.0.0.1:{port}",
                "cache_dir": str(tmp_path / "cache"),
                "poll_interval": "1s",
                **serve,
            },
        },
    )


@contextlib.contextmanager
def receive(tmp_path: Path, store: ObjectStore, launch: Launch) -> Iterator[list[str]]:
    """transfer receive as its systemd unit runs it (no --once, counters on --metrics); a
    set whose file table came and nothing else ends incomplete after --idle-timeout."""
    _, public = new_key_pair(tmp_path)
    udp, metrics = free_udp_port(), free_port()
    launch(
        "--defaults", "transfer", "receive", str(tmp_path / "spool"),
        "--listen", f"127.0.0.1:{udp}", "--metrics", f"127.0.0.1:{metrics}",
        "--trusted-key", str(public), "--idle-timeout", "1",
    )  # fmt: skip
    wait_bound(udp)
    session, table = forged_table(7, [["docs.tar.gz", 4096, "ab" * 32]])
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        for datagram in table_datagrams(session, table):
            sock.sendto(datagram, ("127.0.0.1", udp))
    sets = f"http://127.0.0.1:{metrics}/"
    wait_for(lambda: 'outcome="incomplete"} 1.0' in _text(sets), 120, "an incomplete set", 0.2)
    yield ["receiving on 127.0.0.1:", "incomplete forged", "stopped after 1 set(s) ended"]


def _text(url: str) -> str:
    with contextlib.suppress(httpx.HTTPError):
        return httpx.get(url, timeout=30).text
    return ""


def _answers(url: str) -> int:
    with contextlib.suppress(httpx.HTTPError):
        return httpx.get(url, timeout=30).status_code
    return 0


QUESTIONS = {
    "daemon": "journalctl -u mirror -o cat",
    "serve": "logs deploy/mirror-serve",
    "receive": "journalctl -u mirror-oneway-receive -o cat",
    "import": "logs job/JOB",
}
"""Where README.md's Monitoring table reads each process's log."""
PICKS = {
    "daemon": {"MirrorDownloadStuck"},
    "serve": {"MirrorServedNotNewest"},
    "receive": {"MirrorOnewaySetIncomplete"},
    "import": {"MirrorServedDocsTooOld", "MirrorImportRefused"},
}
"""The rows whose query must find something in what each process here did."""


def readme_queries(process: str) -> dict[str, str]:
    """First alert of each README.md Monitoring row -> its jq program, for the rows that
    ask `process`'s log (D and S the domain and site here)."""
    readme = (REPO / "README.md").read_text()
    section = readme.split("## Monitoring", 1)[1].split("\n## ", 1)[0]
    found = {}
    for row in section.splitlines():
        query = re.search(r"`([^`]*?) \\\| jq -c '(.*?)'`", row)
        if row.startswith("| Mirror") and query and QUESTIONS[process] in query.group(1):
            program = query.group(2).replace("\\|", "|")
            program = program.replace('=="D"', f'=="{DOMAIN}"').replace('=="S"', '=="default"')
            found[row.split("|")[1].split(",")[0].strip()] = program
    return found


def ask(process: str, merged: str) -> dict[str, str]:
    """Each README query of `process`'s log run by jq on `merged` (it must succeed: a line
    that is no JSON makes jq fail); alert -> what it printed."""
    jq = shutil.which("jq")
    assert jq, "jq is missing (Debian's jq package)"
    answers = {}
    for alert, program in readme_queries(process).items():
        done = subprocess.run(
            [jq, "-c", program], input=merged, capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, f"{alert}: {program}: {done.stderr}"
        answers[alert] = done.stdout
    return answers


def records(text: str, where: str = "output") -> list[dict[str, object]]:
    """Each line as a JSON object; AssertionError naming the first that is none."""
    found = []
    for number, line in enumerate(text.splitlines(), start=1):
        try:
            record = json.loads(line)
        except ValueError:
            raise AssertionError(f"{where} line {number} is not JSON: {line!r}") from None
        assert isinstance(record, dict), f"{where} line {number} is not an object: {line!r}"
        found.append(record)
    return found


@pytest.mark.parametrize("command", [daemon, serve, receive], ids=lambda c: c.__name__)
def test_every_line_is_one_json_object_the_readme_queries_answer_and_no_secret(
    command: Callable[..., contextlib.AbstractContextManager[list[str]]],
    tmp_path: Path,
    object_store: ObjectStore,
) -> None:
    started: list[tuple[subprocess.Popen[bytes], dict[str, str]]] = []
    out, err = tmp_path / "stdout", tmp_path / "stderr"

    def launch(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        with open(out, "wb") as stdout, open(err, "wb") as stderr:
            process = start_mirror(*args, env=env, stdout=stdout, stderr=stderr)
        started.append((process, cli_env(env)))
        return process

    try:
        with command(tmp_path, object_store, launch) as wanted:
            process, env = started[0]
            process.send_signal(signal.SIGTERM)
            assert process.wait(120) == 0, err.read_text()[-3000:]
    finally:
        for running, _ in started:
            if running.poll() is None:
                running.kill()
                running.wait(60)
    merged = out.read_text() + err.read_text()
    check(records(merged), wanted)
    require_no_secrets(env, merged)
    answers = ask(command.__name__, merged)
    assert {alert for alert, said in answers.items() if said.strip()} == PICKS[command.__name__]
    if command is receive:
        (incomplete,) = records(answers["MirrorOnewaySetIncomplete"])
        assert str(incomplete["resend"]).startswith("mirror transfer send forged --to ")
        assert incomplete["missing_files"] == ["manifest.json", "docs.tar.gz"]


def test_an_import_job_writes_json_records_only_its_failure_with_the_exit_code(
    tmp_path: Path, target_settings: TargetSettings
) -> None:
    """`transfer import` as deploy/kubernetes's Job runs it (MIRROR_LOG_FORMAT=json), of a
    directory that holds no set: its failure is one error record with its exit code, not a
    `mirror: error:` line, and the README's questions to the Job's log answer."""
    config = write_config(
        tmp_path / "air.toml",
        {"target": target_settings.model_dump(include={"endpoint_url", "bucket", "prefix"})},
    )
    (tmp_path / "set").mkdir()
    with open(tmp_path / "out", "wb") as stdout, open(tmp_path / "err", "wb") as stderr:
        process = start_mirror(
            "--config", str(config), "transfer", "import", str(tmp_path / "set"),
            "--promote", "--skip-imported",
            env={"MIRROR_LOG_FORMAT": "json"}, stdout=stdout, stderr=stderr,
        )  # fmt: skip
        code = process.wait(120)
    merged = (tmp_path / "out").read_text() + (tmp_path / "err").read_text()
    found = records(merged)
    assert code != 0 and found[-1]["level"] == "error" and found[-1]["exit_code"] == code
    answers = ask("import", merged)
    assert {alert for alert, said in answers.items() if said.strip()} == PICKS["import"]


def test_a_fatal_error_under_journald_is_an_error_record_with_its_priority(
    tmp_path: Path, object_store: ObjectStore
) -> None:
    """Under systemd (stderr is $JOURNAL_STREAM) mirror serve's refusal to start is `<3>`
    and one JSON record with the exit code, so `journalctl -p err` shows why it exited."""
    config = serve_config(tmp_path, object_store, free_port(), require_provenance=True)
    with open(tmp_path / "out", "wb") as stdout, open(tmp_path / "err", "wb") as stderr:
        status = os.fstat(stderr.fileno())
        journal = {"JOURNAL_STREAM": f"{status.st_dev}:{status.st_ino}"}
        process = start_mirror(
            "--config", str(config), "serve", env=journal, stdout=stdout, stderr=stderr
        )
        code = process.wait(120)
    lines = (tmp_path / "err").read_text().splitlines()
    assert code == 2 and (tmp_path / "out").read_text() == ""
    assert all(re.match(r"<[0-7]>\{", line) for line in lines), lines
    assert lines[-1].startswith("<3>"), lines
    fatal = records(lines[-1][3:])[0]
    assert fatal["level"] == "error" and fatal["exit_code"] == 2
    assert "serve.require_provenance" in str(fatal["message"])


def check(found: list[dict[str, object]], wanted: list[str]) -> None:
    """The documented fields on every line; each wanted message on some line."""
    assert found, "nothing was logged"
    for record in found:
        assert record.keys() >= FIELDS, record
        assert record["level"] in LEVELS, record
        datetime.fromisoformat(str(record["time"]))
    said = [str(record["message"]) for record in found]
    missing = [text for text in wanted if not any(text in message for message in said)]
    assert missing == [], said
