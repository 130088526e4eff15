"""The receiver's counters for Prometheus (its own registry, as the daemon's): datagrams
taken and dropped as corrupt, blocks repaired by FEC, sets complete and incomplete.
`serve` exposes them on `--metrics HOST:PORT`."""

from __future__ import annotations

import errno

from prometheus_client import CollectorRegistry, Counter, start_http_server

from mirror.errors import ConfigError, TemporaryFailure


class ReceiverMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.datagrams = Counter(
            "mirror_oneway_datagrams", "Datagrams received", ["kind"], registry=self.registry
        )
        self.corrupt = Counter(
            "mirror_oneway_corrupt_datagrams",
            "Datagrams dropped: damaged, truncated or not ours",
            registry=self.registry,
        )
        self.blocks = Counter(
            "mirror_oneway_blocks", "Blocks decoded and written", registry=self.registry
        )
        self.repaired = Counter(
            "mirror_oneway_repaired_blocks",
            "Blocks rebuilt with repair symbols (a source datagram was lost)",
            registry=self.registry,
        )
        self.sets = Counter(
            "mirror_oneway_sets", "Sets ended, by outcome", ["outcome"], registry=self.registry
        )
        self.by_kind = {k: self.datagrams.labels(k) for k in ("data", "table", "heartbeat", "end")}
        """The per-kind children, looked up once: `labels()` per datagram costs."""
        for outcome in ("complete", "incomplete", "refused"):
            self.sets.labels(outcome)

    def serve(self, host: str, port: int) -> None:
        """Counters on http://HOST:PORT/; a port taken (exit 75) or an address that is not
        this host's (exit 2) is one line, before anything is received."""
        try:
            start_http_server(port, addr=host, registry=self.registry)
        except OSError as exc:
            where = f"--metrics {host}:{port}"
            if exc.errno == errno.EADDRINUSE:
                raise TemporaryFailure(f"{where} is in use by another program") from None
            raise ConfigError(f"cannot serve {where}: {exc.strerror or exc}") from None
