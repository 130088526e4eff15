"""The one HTTP listener base: a client that went away is not an error.

The daemon's /metrics listener, the simulator and the chart check's static server are
`http.server` listeners. When a client resets or stops mid-request (a scrape cut off, a
crawler or a download test closing early), `socketserver` prints a traceback on stderr,
which for the daemon is the journal. `QuietHTTPServer` makes that one debug line on the
logger of the module that defines the server; any other error keeps its traceback.
"""

from __future__ import annotations

import logging
import sys
from http.server import ThreadingHTTPServer
from typing import Any


class QuietHTTPServer(ThreadingHTTPServer):
    """A ThreadingHTTPServer (daemon threads) for which a vanished client is a debug line."""

    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        error = sys.exc_info()[1]
        if isinstance(error, ConnectionError | TimeoutError):
            logging.getLogger(type(self).__module__).debug(
                "%s went away: %s", client_address[0], error
            )
            return
        super().handle_error(request, client_address)
