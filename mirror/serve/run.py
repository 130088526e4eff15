"""`mirror serve` from start to stop: open the bucket and the cache, poll, listen, stop on a
signal.

Promises: settings that cannot work (no bucket, `serve.require_provenance` without trusted
keys, a cache directory that cannot be written or that another `mirror serve` uses, an
address that cannot be bound) are refused before anything is served (exit 2); the address
really listened on is announced once it is bound (a `:0` port is resolved). Credentials
the object store refuses at the first read of the pointers end it (exit 4): a store that
does not answer is an outage it serves through from its cache, refused credentials a
mistake to fix.

SIGTERM and SIGINT drain: `/readyz` says "draining" at once, the listener stops accepting
and is closed, the poller stops, connections waiting for a request are closed, and the
responses under way may finish for `serve.drain_timeout`; those still sending then are cut
(each logs its access line with "(cut)"); then it exits 0. Under Kubernetes the preStop
delay of the Deployment comes first, so the Service stops sending new clients before the
listener closes.

SIGHUP (`systemctl reload mirror-serve`) reads the pointers from the bucket at once, after
a cheap check of the cached files, and logs one line; it keeps serving throughout. The
config file is not re-read: a changed setting needs a restart (mirror.serve.poller). Before
the handler is in, `mirror serve` (mirror.cli.serve) ignores SIGHUP.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable
from types import FrameType

from mirror.airgap.s3.credentials import open_object_store
from mirror.config import Settings
from mirror.errors import ConfigError
from mirror.serve.cache import CacheInUse
from mirror.serve.server import ServeServer, listen
from mirror.serve.service import Service
from mirror.serve.supply import Trust
from mirror.transferset.keys import load_trusted_keys

log = logging.getLogger(__name__)


def open_service(settings: Settings) -> Service:
    """The service for these settings, its cache opened; nothing read from the bucket yet."""
    keys = load_trusted_keys(settings.target.accepted_keys())
    if settings.serve.require_provenance and not keys:
        raise ConfigError(
            "serve.require_provenance is set but target.transfer_keys names no key",
            hint="list the connected side's public key (transfer.pub) in target.transfer_keys",
        )
    service = Service(
        settings.serve,
        open_object_store(settings.target),
        Trust(keys, settings.serve.require_provenance),
        url_mode=settings.target.url_mode,
    )
    service.supply.stall = settings.target.deadline  # a fill's bytes: bounded as every call
    try:
        service.start()
    except CacheInUse as exc:
        raise ConfigError(
            f"serve.cache_dir {exc.directory} is in use by another mirror serve ({exc.holder})",
            hint="give each mirror serve a cache directory of its own (each replica its own "
            "volume), or stop the other one",
        ) from None
    except OSError as exc:
        raise ConfigError(
            f"cannot use serve.cache_dir {settings.serve.cache_dir}: {exc.strerror}",
            hint="make it a directory this user may write (the service keeps its cache there)",
        ) from None
    return service


def bind(service: Service) -> ServeServer:
    address = service.settings.listen
    try:
        return listen(address, service)
    except OverflowError as exc:  # a port out of range, were it ever past the settings check
        raise ConfigError(f"cannot listen on serve.listen {address}: {exc}") from None
    except OSError as exc:
        raise ConfigError(f"cannot listen on serve.listen {address}: {exc.strerror}") from None


def run_serve(settings: Settings, announce: Callable[[str], None]) -> None:
    """Serve until SIGTERM or SIGINT, then drain (module docstring)."""
    service = open_service(settings)
    try:
        server = bind(service)
        _serve_until_stopped(service, server, announce)
    finally:
        service.close()


def _serve_until_stopped(
    service: Service, server: ServeServer, announce: Callable[[str], None]
) -> None:
    def stop(signum: int, frame: FrameType | None) -> None:
        service.draining.set()  # not ready from now on
        service.halt()
        threading.Thread(target=server.shutdown, name="serve-stop", daemon=True).start()

    def reread(signum: int, frame: FrameType | None) -> None:
        service.poller.reread()  # the poller logs the line

    def poll() -> None:
        service.run_poller()
        if service.fatal is not None:
            stop(0, None)

    poller = threading.Thread(target=poll, name="serve-poller", daemon=True)

    handlers = {signal.SIGTERM: stop, signal.SIGINT: stop, signal.SIGHUP: reread}
    previous = {sig: signal.signal(sig, handler) for sig, handler in handlers.items()}
    try:
        poller.start()
        host, port = str(server.server_address[0]), int(server.server_address[1])
        shown = f"[{host}]" if ":" in host else host
        announce(f"mirror serve listening on http://{shown}:{port}")
        server.serve_forever()
        drain(service, server)
        if service.fatal is not None:
            raise service.fatal
    finally:
        service.halt()
        server.server_close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        poller.join(timeout=5)


def drain(service: Service, server: ServeServer) -> None:
    """Stop accepting, let the responses under way finish within serve.drain_timeout."""
    server.socket.close()  # new connections are refused from here on
    seconds = service.settings.drain_timeout
    started = time.monotonic()
    log.info(
        "stopping: %d connections open; responses under way may finish within %gs",
        server.connections.open(),
        seconds,
    )
    cut = server.connections.drain(seconds)
    log.info(
        "stopped after %.1fs: %s",
        time.monotonic() - started,
        f"{cut} responses cut at serve.drain_timeout" if cut else "every response finished",
    )
