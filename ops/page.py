"""The page's files (``web/``): one page with two views, the Console that ``make console`` serves against a
deployed project, and the local workspace the fake Slack serves with it (``infra/fakes/slack/page.py``).

Plain HTML, CSS and JavaScript, no build step; served as they are, with no-store so an edit shows on reload.
"""

from __future__ import annotations

import mimetypes
from http.server import BaseHTTPRequestHandler
from pathlib import Path

WEB = Path(__file__).resolve().parent / "web"
# What the page may do, whatever its rendering of untrusted text misses: run only its own script files (an event
# handler attribute written into it never runs), talk only to its own origin, and never be framed by another site
# (a page elsewhere laying the workspace under its own buttons, so that a click approves as an operator). Inline
# style attributes stay (avatars' colours); images may come from any web address (Block Kit image blocks).
POLICY = "; ".join((
    "default-src 'self'", "script-src 'self'", "style-src 'self' 'unsafe-inline'", "img-src 'self' http: https: data:",
    "connect-src 'self'", "object-src 'none'", "base-uri 'none'", "form-action 'self'", "frame-ancestors 'none'",
))  # fmt: skip


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
    handler.send_header("Content-Security-Policy", POLICY)
    handler.send_header("X-Frame-Options", "DENY")  # frame-ancestors, for a browser that knows only this
    handler.send_header("X-Content-Type-Options", "nosniff")
    handler.end_headers()
    handler.wfile.write(body)
    return True
