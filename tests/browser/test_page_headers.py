"""The page's own defences, whatever its rendering misses: a Content-Security-Policy that runs only the page's own
scripts (an event handler attribute written into it never runs) and no framing by another site (a page elsewhere
cannot lay the workspace under its own buttons and have a click approve as an operator). The page served by
``ops.page.serve_file`` on a loopback server of its own, in Chromium: no stack needed."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
import requests
from playwright.sync_api import Browser

from ops.page import serve_file


class _Page(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        if self.path == "/framer":  # another site's page (another origin: another port) framing the workspace
            frame = f'<iframe id="f" src="{self.server.workspace}" onload="this.dataset.loaded = 1"></iframe>'  # type: ignore[attr-defined]
            body = frame.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        elif not serve_file(self, self.path.split("?")[0]):
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet."""


def _serve() -> ThreadingHTTPServer:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Page)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture(scope="module")
def sites() -> Iterator[tuple[str, str]]:
    """The page's origin, and another site's."""
    page, other = _serve(), _serve()
    page_url = f"http://127.0.0.1:{page.server_address[1]}"
    other.workspace = f"{page_url}/"  # type: ignore[attr-defined]
    try:
        yield page_url, f"http://127.0.0.1:{other.server_address[1]}"
    finally:
        for server in (page, other):
            server.shutdown()
            server.server_close()


def test_an_injected_event_handler_never_runs(browser: Browser, sites: tuple[str, str]) -> None:
    page_url, _ = sites
    context = browser.new_context()
    page = context.new_page()
    violations: list[str] = []
    page.on("console", lambda message: violations.append(message.text))
    page.goto(f"{page_url}/")
    page.evaluate("""() => {
        const out = document.createElement("div");
        out.innerHTML = '<img id="x" src="data:," onerror="window.pwned = 1">' +
            '<b id="y" onmouseover="window.pwned = 2">b</b>';
        document.body.append(out);
        document.getElementById("y").dispatchEvent(new MouseEvent("mouseover"));
    }""")  # fmt: skip
    page.wait_for_function("() => document.getElementById('x').complete")
    assert page.evaluate("() => window.pwned") is None
    assert any("Content Security Policy" in text for text in violations)
    context.close()


def test_another_site_cannot_frame_the_page(browser: Browser, sites: tuple[str, str]) -> None:
    page_url, other = sites
    headers = requests.get(f"{page_url}/", timeout=10).headers
    assert "frame-ancestors 'none'" in headers["Content-Security-Policy"]
    assert headers["X-Frame-Options"] == "DENY"
    context = browser.new_context()
    page = context.new_page()
    page.goto(f"{other}/framer")
    page.wait_for_function("() => document.getElementById('f').dataset.loaded === '1'")  # loaded, or refused
    [framed] = page.main_frame.child_frames
    assert framed.evaluate("() => document.getElementById('workspace') === null")  # Chromium's error page instead
    context.close()
