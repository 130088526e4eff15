"""`mirror serve`: the bucket's versions over HTTP for the vendor's pods (mirror/serve/)."""

from __future__ import annotations

import signal

import click

from mirror.cli.common import CliContext, pass_cli
from mirror.logs import setup_logging


@click.command("serve")
@pass_cli
def serve_command(cli: CliContext) -> None:
    """Serve the bucket's versions to the vendor's pods: verified, at links that never expire.

    Every domain's versions come from a verified local cache until stopped: SIGTERM
    lets the downloads under way finish within serve.drain_timeout, then exits 0;
    SIGHUP reads the bucket's pointers at once (not the config file) and goes on.
    Settings: [serve] (listen, public_url, cache_dir, cache_max, idle_timeout,
    header_timeout, drain_timeout, poll_interval, max_clients) and [target] (the bucket,
    read with a read-only identity). URLs:
    /domains/DOMAIN/VERSION/bundle.EXT (immutable) and /domains/DOMAIN/current/bundle.EXT
    (follows promote and rollback within serve.poll_interval); /healthz, /readyz, /metrics
    and a status page on /.
    """
    # SIGHUP (`systemctl reload`) may come as soon as the process exists: until the service
    # installs its own handler, it is ignored (the start reads the pointers anyway), never
    # the default that ends the process.
    before = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        from mirror.serve.run import run_serve

        setup_logging(cli.verbosity, service=True)
        run_serve(cli.settings, announce=lambda line: cli.announce(line, url=line.split()[-1]))
    finally:
        signal.signal(signal.SIGHUP, before)
