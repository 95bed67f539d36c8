"""``make console``'s lock, on a real server in this process: the key's redirect stays on the console's own origin."""

from __future__ import annotations

import http.client
import threading
from collections.abc import Iterator

import pytest

from ops.console import _ConsoleServer, api


@pytest.fixture
def console() -> Iterator[_ConsoleServer]:
    server = _ConsoleServer(("127.0.0.1", 0))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@pytest.mark.parametrize(
    ("path", "location"),
    [("/", "/"), ("/console", "/console"), ("//evil.example/", "/evil.example/"),  # the server folds "//" itself
     ("/\\evil.example/", "/"), ("/\\\\evil.example", "/"),
     ("//evil.example/%2e%2e", "/"), ("/web/app.js", "/web/app.js")],
)  # fmt: skip
def test_the_keys_redirect_never_leaves_the_console(console: _ConsoleServer, path: str, location: str) -> None:
    got = raw_get(console, f"{path}?key={console.lock.secret}")
    assert got.status == 303
    assert got.getheader("Location") == location
    assert f"{console.lock.cookie}={console.lock.secret};" in (got.getheader("Set-Cookie") or "")
    wrong = raw_get(console, f"{path}?key=x{console.lock.secret}")
    assert wrong.status == 403
    assert wrong.getheader("Location") is None


def raw_get(console: _ConsoleServer, target: str) -> http.client.HTTPResponse:
    """A GET of ``target`` exactly as written (a client library would fold "//evil.example/" into one slash)."""
    host, port = console.lock.host.split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    connection.request("GET", target)
    response = connection.getresponse()
    response.read()
    connection.close()
    return response


@pytest.mark.parametrize("session", ["a/b", "..", "sessions/x/steps", "__x__", "x" * 1600])
def test_a_timeline_of_no_possible_session_is_a_404_that_reads_nothing(session: str) -> None:
    status, body = api("/_console/timeline", {"session": session})  # no Firestore here: nothing may be read
    assert (status, body["ok"]) == (404, False)
    assert "no such session" in body["error"]
