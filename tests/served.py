"""A test's own HTTP server served on a thread for the length of a ``with`` block, then shut down and closed."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from socketserver import BaseServer


@contextmanager
def served(server: BaseServer, *, poll_interval: float = 0.5) -> Iterator[None]:
    """Serve ``server`` on a daemon thread until the block ends (``poll_interval``: how soon it sees a shutdown)."""
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": poll_interval}, daemon=True)
    thread.start()
    try:
        yield
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
