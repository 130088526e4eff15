"""`mirror serve` from start to stop: open the bucket and the cache, poll, listen, stop on a
signal.

Promises: settings that cannot work (no bucket, `serve.require_provenance` without trusted
keys, a cache directory that cannot be written, an address that cannot be bound) are
refused before anything is served (exit 2); the
address really listened on is announced once it is bound (a `:0` port is resolved); SIGTERM
and SIGINT stop the listener and the poller, and a fill or send under way ends with its
connection.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from types import FrameType

from mirror.airgap.s3.credentials import open_object_store
from mirror.config import Settings
from mirror.errors import ConfigError
from mirror.serve.server import ServeServer, listen
from mirror.serve.service import Service
from mirror.serve.supply import Trust
from mirror.transferset.keys import load_trusted_keys


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
    )
    try:
        service.start()
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
    except OSError as exc:
        raise ConfigError(f"cannot listen on serve.listen {address}: {exc.strerror}") from None


def run_serve(settings: Settings, announce: Callable[[str], None]) -> None:
    """Serve until SIGTERM or SIGINT."""
    service = open_service(settings)
    server = bind(service)
    poller = threading.Thread(target=service.run_poller, name="serve-poller", daemon=True)

    def stop(signum: int, frame: FrameType | None) -> None:
        service.stop.set()
        threading.Thread(target=server.shutdown, name="serve-stop", daemon=True).start()

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        poller.start()
        host, port = str(server.server_address[0]), int(server.server_address[1])
        shown = f"[{host}]" if ":" in host else host
        announce(f"mirror serve listening on http://{shown}:{port}")
        server.serve_forever()
    finally:
        service.stop.set()
        server.server_close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        poller.join(timeout=5)
