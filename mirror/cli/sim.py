"""`mirror sim serve`: run the vendor API simulator in the foreground."""

from __future__ import annotations

import logging
import signal
import sys
import threading
from types import FrameType
from typing import Any

import click

from mirror.cli.common import DURATION, SIZE, Decorator
from mirror.errors import ConfigError
from mirror.sim import SimConfig, Simulator


def _setting(flag: str, kind: Any, default: object, help: str) -> Decorator:
    """A simulator setting (a `SimConfig` field), shown in --help with its default."""
    return click.option(flag, type=kind, default=default, show_default=True, help=help)


@click.group()
def sim() -> None:
    """The vendor API simulator (for tests, demos and benchmarks)."""


@sim.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=8765, show_default=True, type=int, help="0 picks a free port.")
@click.option(
    "--api-key",
    "key",
    default=None,
    metavar="KEY",
    help="The admin API key the simulator accepts, as mirror's $MIRROR_API_KEY or "
    "api.key_file gives it (default: a random mint_sim_ key, printed).",
)
@click.option("--key", "key", default=None, hidden=True, help="Deprecated: --api-key.")
@click.option(
    "--project-id", default="proj_sim", show_default=True, help="The project id it answers to."
)
@_setting("--link-ttl", DURATION, "300s", "How long its presigned bundle links stay valid.")
@_setting("--queue-seconds", DURATION, "0.2", "How long a new export job stays queued.")
@_setting("--run-seconds", DURATION, "0.6", "How long a job then runs before it completes.")
@_setting("--pages", click.IntRange(min=1), 40, "Pages in the generated site.")
@_setting("--page-size", SIZE, "2048", "Bytes of each page.")
@click.option("--bundle-size", type=SIZE, default=None, help="Pad archives to about this size.")
@_setting("--changes-per-export", click.IntRange(min=0), 2, "Pages each export changes.")
@click.option(
    "--change-share",
    type=click.FloatRange(0.0, 1.0),
    default=None,
    metavar="SHARE",
    help="Share of the pages each export changes (0.01 = 1%), instead of --changes-per-export.",
)
@click.option(
    "--site-size",
    type=SIZE,
    default=None,
    help="A realistic site of about this size (e.g. 500MiB): HTML pages, CSS, JS, images.",
)
@_setting(
    "--max-starts-per-hour",
    click.IntRange(min=0),
    0,
    "Answer 429 to starts beyond this many an hour (0: no limit).",
)
@click.option("--allow-parallel-jobs", is_flag=True, help="Do not answer 409 to a second start.")
@click.option(
    "--newer-revision",
    is_flag=True,
    help="Act as the vendor's newer revision: completed statuses carry bundleUrl in both "
    "flows and POST .../bundle answers 404.",
)
@click.option("--access-log", is_flag=True, help="Log every request to stderr.")
def serve(
    host: str,
    port: int,
    key: str | None,
    allow_parallel_jobs: bool,
    newer_revision: bool,
    access_log: bool,
    **config: Any,
) -> None:
    """Serve the simulated vendor API until SIGTERM or SIGINT.

    Prints its URL, project id and accepted key; point api.base_url at the URL."""
    settings = SimConfig(**config, one_active_job=not allow_parallel_jobs)
    if key:
        settings.key = key
    if access_log:
        logging.basicConfig(level=logging.DEBUG, format="%(asctime)s %(message)s")
        logging.getLogger("mirror.sim").setLevel(logging.DEBUG)
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    simulator = _start(settings, host, port, newer_revision=newer_revision)
    try:
        click.echo(f"simulator listening on {simulator.url}")
        click.echo(f"project id: {settings.project_id}")
        click.echo(f"accepted key: {settings.key}")
        sys.stdout.flush()
        while not stop.wait(0.5):
            pass
    finally:
        simulator.stop()


def _start(config: SimConfig, host: str, port: int, *, newer_revision: bool) -> Simulator:
    """A started simulator; ConfigError (exit 2) when it cannot listen there."""
    try:
        simulator = Simulator(config, host=host, port=port)
        simulator.set_faults(newer_revision=newer_revision)
        simulator.start()
    except OSError as exc:
        raise ConfigError(
            f"simulator cannot listen on {host}:{port}: {exc.strerror or exc}",
            hint="choose another --port, or --port 0 for a free one",
        ) from exc
    return simulator
