"""The page's files (``web/``): one page with two views, the Console that ``make console`` serves against a
deployed project, and the local workspace the fake Slack serves with it (``infra/fakes/slack/page.py``).

Plain HTML, CSS and JavaScript, no build step; served as they are, with no-store so an edit shows on reload.
"""

from __future__ import annotations

import mimetypes
from http.server import BaseHTTPRequestHandler
from pathlib import Path

WEB = Path(__file__).resolve().parent / "web"


def static_file(path: str) -> tuple[bytes, str] | None:
    """The page's file for a URL path (``/`` is the page itself), with its content type; None if there is none."""
    name = "index.html" if path in ("/", "/console") else path.removeprefix("/web/")
    if not path.startswith("/web/") and name != "index.html":
        return None
    file = (WEB / name).resolve()
    if WEB not in file.parents or not file.is_file():
        return None
    kind = mimetypes.guess_type(file.name)[0] or "application/octet-stream"
    return file.read_bytes(), f"{kind}; charset=utf-8" if kind.startswith("text/") or kind.endswith("script") else kind


def serve_file(handler: BaseHTTPRequestHandler, path: str) -> bool:
    """Answer a GET of one of the page's files (``path`` a URL path); False when ``path`` names none."""
    found = static_file(path)
    if found is None:
        return False
    body, kind = found
    handler.send_response(200)
    handler.send_header("Content-Type", kind)
    handler.send_header("Content-Length", str(len(body)))
    handler.send_header("Cache-Control", "no-store")
    handler.end_headers()
    handler.wfile.write(body)
    return True
