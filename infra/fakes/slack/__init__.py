"""A local stand-in for Slack: the Web API a real ``slack_sdk.WebClient`` talks to, plus a control API.

Run it with ``python -m infra.fakes.slack``; drive it with ``FakeSlack``. Importing
this package starts nothing: ``make_server`` binds, ``running`` serves in a thread.

Imports ``slack_sdk`` (to sign what it delivers), ``infra.fakes.serve`` / ``infra.fakes.control``, and ``ops/``'s
page and console (the workspace page it serves, whose Console tab reads the product's state); never ``shared/``
itself.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from infra.fakes.serve import in_thread

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
    with in_thread(server, "fakeslack"):
        yield server
