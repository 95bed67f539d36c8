"""The operator console: sessions and their trees, open questions and approvals, and each session's timeline.

    python -m ops.console            # make console: read-only, against GOOGLE_CLOUD_PROJECT with ADC
    python -m ops.console --port 8090

It reads production with the operator's own credentials, so it answers only its own page: a request must be
addressed to the loopback origin it printed (the ``Host`` header, exactly; a page elsewhere that rebinds its own
name to 127.0.0.1 sends its own name) and carry this run's secret (the printed URL's ``key``, which it trades for a
cookie). Anything else is a 403.

The same page the local workspace serves shows it (its Console view); against the local stack the fake Slack
answers ``/_console/`` itself, through ``api`` here. Everything is read through ``shared.state``'s functions and
nothing is ever written, so an operator can run it from their own machine against production
(``GOOGLE_CLOUD_PROJECT``, ``FIRESTORE_DATABASE``, application-default credentials).
"""

from __future__ import annotations

import argparse
import hmac
import ipaddress
import json
import os
import re
import secrets
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from http.cookies import CookieError, SimpleCookie
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from ops.names import Names
from ops.page import serve_file

Json = dict[str, Any]
NAMES = Names()  # one per process: each person is looked up once
RECENT = timedelta(days=7)  # the sessions the console lists: those created this long ago or later
PAGE_SIZE = 200
PREFIX = "/_console/"
SESSION_ID = re.compile(r"(?!__)[A-Za-z0-9_-]{1,1500}")  # as shared.state.ids makes them (never Firestore's __x__)


def _iso(when: datetime | None) -> str | None:
    return when.isoformat() if when else None


def _who_may(requester: str | None, requester_allowed: bool) -> list[str]:
    from shared import config

    people = list(config.settings().operator_user_ids)
    if requester_allowed and requester and requester not in people:
        people.append(requester)
    return people


def overview(names: Names | None = None) -> Json:
    """Recent conversations (a request with every session that worked on it, and its state), open questions and
    pending approvals, with people by name."""
    from ops import conversations
    from shared import config
    from shared.slack.call_view import visible
    from shared.state import firestore, stale

    names = names or NAMES
    now = firestore.now()
    far = now + timedelta(days=3650)
    settings = config.settings()
    open_questions = list(stale.stale_questions(far, page_size=PAGE_SIZE))
    pending = list(stale.stale_approvals(far, page_size=PAGE_SIZE))
    recent = list(stale.sessions_created(now - RECENT, far, page_size=PAGE_SIZE))
    rows = conversations.group(recent, open_questions, pending, names.name, names.readable)
    for row in rows:
        row["created_at"] = _iso(row["created_at"])
        for member in row["sessions"]:
            member["created_at"] = _iso(member["created_at"])
    questions = [
        {
            "id": q.question_id,
            "session": q.session_id,
            "text": names.readable(q.text),
            "options": [names.readable(o) for o in q.options],
            "asked_at": _iso(q.asked_at),
            "channel": q.channel,
            "thread_ts": q.thread_ts,
            "post_ts": q.post_ts,
            "may_answer": [names.name(u) for u in _who_may(q.requester, settings.allow_requester_answers)],
        }
        for q in open_questions
    ]
    approvals = [
        {
            "id": a.approval_id,
            "session": a.session_id,
            "tool": visible(a.tool),  # as the approval card shows them: a bidi override or a zero-width character
            "args": visible(a.args),  # is its escape, so the console never reads differently from what runs
            "asked_at": _iso(a.asked_at),
            "channel": a.channel,
            "thread_ts": a.thread_ts,
            "card_ts": a.card_ts,
            "requested_by": names.name(a.requested_by),
            "may_decide": [names.name(u) for u in _who_may(a.requested_by, settings.allow_requester_approvals)],
        }
        for a in pending
    ]
    return {"now": _iso(now), "conversations": rows, "questions": questions, "approvals": approvals}


READABLE_FIELDS = ("text", "result", "error", "args")
CALL_FIELDS = ("name", "args")


def _readable_audit(entry: Json, names: Names) -> Json:
    from shared.slack.call_view import visible

    shown = {**entry}
    for key in READABLE_FIELDS:
        if isinstance(shown.get(key), str):
            shown[key] = names.readable(shown[key])
    for key in CALL_FIELDS:  # a call's tool and arguments as its approval card shows them (hidden characters escaped)
        if isinstance(shown.get(key), str):
            shown[key] = visible(shown[key])
    if isinstance(shown.get("calls"), list):
        shown["calls"] = [visible(str(call)) for call in shown["calls"]]
    if shown.get("type") == "approval" and shown.get("text"):
        shown["text"] = names.name(str(shown["text"]))  # who decided
    return shown


def timeline(session_id: str, names: Names | None = None) -> Json:
    """Every step of the session's transcript (its continuations share it), with the audit records of each."""
    from shared.state import sessions, steps

    names = names or NAMES
    session = sessions.get_session(session_id)
    if session is None:
        return {"ok": False, "error": f"no session {session_id}"}
    entries = [
        {
            "seq": step.seq,
            "session": step.session_id,
            "kind": step.kind.value,
            "at": _iso(step.at),
            "audit": [_readable_audit({**entry.to_doc(), "at": _iso(entry.at)}, names) for entry in step.audit],
        }
        for step in steps.load_steps(session.transcript)
    ]
    where = {"channel": session.origin.channel, "thread_ts": session.origin.thread_ts, "transcript": session.transcript}
    return {"ok": True, "session": session_id, "request": names.readable(session.text)[:200], **where, "steps": entries}


def api(path: str, query: Json) -> tuple[int, Json]:
    """Answer one ``/_console/`` GET: ``overview`` or ``timeline?session=<id>``."""
    name = path.removeprefix(PREFIX)
    try:
        if name == "overview":
            return 200, {"ok": True, **overview()}
        if name == "timeline" and query.get("session"):
            if not SESSION_ID.fullmatch(str(query["session"])):  # "a/b" or ".." would be read as a Firestore path
                return 404, {"ok": False, "error": "no such session: a session's id is letters, digits, - and _"}
            found = timeline(str(query["session"]))
            return (200 if found["ok"] else 404), found
    except Exception as exc:  # the page shows why it cannot read (no credentials, no database), not a 500
        return 503, {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    return 404, {"ok": False, "error": f"no console endpoint {path}"}


def send_json(handler: BaseHTTPRequestHandler, status: int, body: Json) -> None:
    data = json.dumps(body, default=str).encode()
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json; charset=utf-8")
    handler.send_header("Content-Length", str(len(data)))
    handler.send_header("Cache-Control", "no-store")
    handler.end_headers()
    handler.wfile.write(data)


def serve_console(handler: BaseHTTPRequestHandler, path: str) -> bool:
    """Answer a ``/_console/`` GET; False for any other path."""
    url = urlsplit(path)
    if not url.path.startswith(PREFIX):
        return False
    status, body = api(url.path, dict(parse_qsl(url.query)))
    send_json(handler, status, body)
    return True


def serve_workspace_console(handler: BaseHTTPRequestHandler, path: str, port: int) -> bool:
    """The fake Slack's ``/_console/`` (``make dev``'s Console tab): as ``serve_console``, but only for the local
    Firestore emulator, where no credentials are held, and only to requests addressed to loopback on its own port.
    A fake Slack started with a real project's settings refuses: ``make console`` (with its key) is for those."""
    if not urlsplit(path).path.startswith(PREFIX):
        return False
    if handler.headers.get("Host") not in {f"{name}:{port}" for name in ("127.0.0.1", "localhost", "[::1]")}:
        refuse(handler, "forbidden: the console answers only its loopback address")
    elif not os.environ.get("FIRESTORE_EMULATOR_HOST"):
        refuse(handler, "the workspace's console reads only the local Firestore emulator; make console reads a project")
    else:
        serve_console(handler, path)
    return True


@dataclass(frozen=True)
class Lock:
    """Who ``make console`` answers: requests to ``host`` (``127.0.0.1:<port>``, as printed) with this run's secret."""

    host: str
    secret: str = field(default_factory=lambda: secrets.token_urlsafe(24))

    @property
    def cookie(self) -> str:
        """One cookie name per port: a browser sends 127.0.0.1's cookies to every port of it."""
        return f"console_key_{self.host.rpartition(':')[2]}"

    def url(self) -> str:
        return f"http://{self.host}/?key={self.secret}#console"

    def _matches(self, offered: str | None) -> bool:
        return offered is not None and hmac.compare_digest(offered.encode(), self.secret.encode())

    def admits(self, headers: Any, query: Json) -> tuple[bool, bool]:
        """(whether the request may be answered, whether it brought the key in its URL: trade it for the cookie)."""
        if headers.get("Host") != self.host:
            return False, False
        if self._matches(query.get("key")):
            return True, True
        try:
            jar = SimpleCookie(headers.get("Cookie") or "")
        except CookieError:
            return False, False
        morsel = jar.get(self.cookie)
        return self._matches(morsel.value if morsel else None), False


# A path on this origin: never "//host" or "/\\host", which a browser reads as another site's address.
LOCAL_PATH = re.compile(r"/(?![/\\])[\w./-]*")


def same_site(path: str) -> str:
    """Where the key's redirect goes: ``path`` when it is a plain path on this origin, else the page (``/``); a
    ``Location`` of ``//evil.example/`` would send the operator, just signed in, to another site."""
    return path if LOCAL_PATH.fullmatch(path) else "/"


def refuse(handler: BaseHTTPRequestHandler, why: str) -> None:
    send_json(handler, 403, {"ok": False, "error": why})


class _Handler(BaseHTTPRequestHandler):
    """``make console``: the page's files and the console's JSON, GET only, for its own page (``Lock``)."""

    server: _ConsoleServer

    def _admitted(self) -> bool:
        url = urlsplit(self.path)
        allowed, with_key = self.server.lock.admits(self.headers, dict(parse_qsl(url.query)))
        if not allowed:
            refuse(self, "forbidden: open the URL make console printed (it holds this run's key)")
            return False
        if with_key:  # the key becomes a cookie and leaves the address bar (the #console fragment stays)
            self.send_response(303)
            self.send_header("Location", same_site(url.path))
            cookie = f"{self.server.lock.cookie}={self.server.lock.secret}; Path=/; HttpOnly; SameSite=Strict"
            self.send_header("Set-Cookie", cookie)
            self.send_header("Content-Length", "0")
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            return False
        return True

    def _refuse_other(self) -> None:
        if self._admitted():
            send_json(self, 501, {"ok": False, "error": "the console is read-only: GET only"})

    do_POST = do_PUT = do_DELETE = do_PATCH = _refuse_other

    def do_GET(self) -> None:
        if not self._admitted():
            return
        if not serve_console(self, self.path) and not serve_file(self, urlsplit(self.path).path):
            send_json(self, 404, {"ok": False, "error": "not_found"})

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the console is for reading, not for its own log."""


class _ConsoleServer(ThreadingHTTPServer):
    def __init__(self, address: tuple[str, int]) -> None:
        super().__init__(address, _Handler)
        self.lock = Lock(f"{address[0]}:{self.server_address[1]}")


def loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ops.console", description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8090)
    args = parser.parse_args(argv)
    from shared import config

    settings = config.settings()
    project, database = settings.google_cloud_project, settings.firestore_database
    if not project:
        print(
            "make console reads a deployed project's Firestore: set GOOGLE_CLOUD_PROJECT (and FIRESTORE_DATABASE "
            "unless it is (default)); it signs in with your application-default credentials (gcloud auth "
            "application-default login).\nFor the local stack, the Console tab of `make dev`'s workspace page (or "
            "`make stack`'s) is the same view.",
            file=sys.stderr,
        )
        return 2
    if not loopback(args.host) or ":" in args.host:
        print(f"make console listens on a loopback IPv4 address only (127.0.0.1), not {args.host}", file=sys.stderr)
        return 2
    try:
        server = _ConsoleServer((args.host, args.port))
    except OSError as exc:
        print(f"cannot listen on {args.host}:{args.port} ({exc.strerror}): choose another with PORT=", file=sys.stderr)
        return 2
    print(f"The console of {project} (database {database}), read-only: {server.lock.url()}", flush=True)
    print("Open that exact address: the key in it is this run's, and nothing else is answered.", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
