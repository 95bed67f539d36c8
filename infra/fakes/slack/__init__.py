"""A local stand-in for Slack: the Web API a real ``slack_sdk.WebClient`` talks to, plus a control API.

Run it with ``python -m infra.fakes.slack``; drive it with ``FakeSlack``. Importing
this package starts nothing: ``make_server`` binds, ``running`` serves in a thread.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

from .client import FakeSlack, FakeSlackError
from .control_api import CONTROL
from .page import PAGE_CONTROL, serve_page
from .server import FakeSlackServer
from .state import FakeSlackConfig, Workspace

__all__ = ["FakeSlack", "FakeSlackConfig", "FakeSlackError", "FakeSlackServer", "make_server", "running"]


def make_server(config: FakeSlackConfig, host: str = "127.0.0.1", port: int = 0) -> FakeSlackServer:
    """Bind (port 0 picks a free one) without serving yet; ``server.url`` says where."""
    return FakeSlackServer((host, port), Workspace(config), {**CONTROL, **PAGE_CONTROL}, serve_page)


@contextlib.contextmanager
def running(config: FakeSlackConfig, host: str = "127.0.0.1", port: int = 0) -> Iterator[FakeSlackServer]:
    """Serve in a background thread for the length of a ``with`` block (in-process tests)."""
    server = make_server(config, host, port)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
