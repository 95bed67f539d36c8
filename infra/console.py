"""The operator console: sessions and their trees, open questions and approvals, and each session's timeline.

    python -m infra.console            # make console: read-only, against GOOGLE_CLOUD_PROJECT with ADC
    python -m infra.console --port 8090

The same page the local workspace serves shows it (its Console view); against the local stack the fake Slack
answers ``/_console/`` itself, through ``api`` here. Everything is read through ``shared.state``'s functions and
nothing is ever written, so an operator can run it from their own machine against production
(``GOOGLE_CLOUD_PROJECT``, ``FIRESTORE_DATABASE``, application-default credentials).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from datetime import datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlsplit

Json = dict[str, Any]
RECENT = timedelta(days=7)  # the sessions the console lists: those created this long ago or later
PAGE_SIZE = 200
PREFIX = "/_console/"


def _iso(when: datetime | None) -> str | None:
    return when.isoformat() if when else None


def _who_may(requester: str | None, requester_allowed: bool) -> list[str]:
    from shared import config

    people = list(config.settings().operator_user_ids)
    if requester_allowed and requester and requester not in people:
        people.append(requester)
    return people


def overview() -> Json:
    """Recent sessions (each with its children's ids), open questions and pending approvals, oldest first."""
    from shared import config
    from shared.state import firestore, stale

    now = firestore.now()
    far = now + timedelta(days=3650)
    settings = config.settings()
    sessions = [
        {
            "id": s.session_id,
            "status": s.status.value,
            "kind": s.kind.value,
            "created_at": _iso(s.created_at),
            "channel": s.channel,
            "thread_ts": s.thread_ts,
            "trigger_ts": s.trigger_ts,
            "user": s.trigger_user,
            "text": s.text[:200],
            "tokens": s.tokens,
            "turns": s.turns,
            "tool_calls": s.tool_calls,
            "parent": s.parent_session_id,
            "children": s.child_ids,
            "depth": s.depth,
            "transcript": s.transcript,
        }
        for s in stale.sessions_created(now - RECENT, far, page_size=PAGE_SIZE)
    ]
    questions = [
        {
            "id": q.question_id,
            "session": q.session_id,
            "text": q.text,
            "options": q.options,
            "asked_at": _iso(q.asked_at),
            "channel": q.channel,
            "thread_ts": q.thread_ts,
            "post_ts": q.post_ts,
            "may_answer": _who_may(q.requester, settings.allow_requester_answers),
        }
        for q in stale.stale_questions(far, page_size=PAGE_SIZE)
    ]
    approvals = [
        {
            "id": a.approval_id,
            "session": a.session_id,
            "tool": a.tool,
            "args": a.args,
            "asked_at": _iso(a.asked_at),
            "channel": a.channel,
            "thread_ts": a.thread_ts,
            "card_ts": a.card_ts,
            "may_decide": _who_may(a.requested_by, settings.allow_requester_approvals),
        }
        for a in stale.stale_approvals(far, page_size=PAGE_SIZE)
    ]
    return {"now": _iso(now), "sessions": sessions, "questions": questions, "approvals": approvals}


def timeline(session_id: str) -> Json:
    """Every step of the session's transcript (its continuations share it), with the audit records of each."""
    from shared.state import sessions, steps

    session = sessions.get_session(session_id)
    if session is None:
        return {"ok": False, "error": f"no session {session_id}"}
    entries = [
        {
            "seq": step.seq,
            "session": step.session_id,
            "kind": step.kind.value,
            "at": _iso(step.at),
            "audit": [{**entry.to_doc(), "at": _iso(entry.at)} for entry in step.audit],
        }
        for step in steps.load_steps(session.transcript)
    ]
    where = {"channel": session.channel, "thread_ts": session.thread_ts, "transcript": session.transcript}
    return {"ok": True, "session": session_id, **where, "steps": entries}


def api(path: str, query: Json) -> tuple[int, Json]:
    """Answer one ``/_console/`` GET: ``overview`` or ``timeline?session=<id>``."""
    name = path.removeprefix(PREFIX)
    try:
        if name == "overview":
            return 200, {"ok": True, **overview()}
        if name == "timeline" and query.get("session"):
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


class _Handler(BaseHTTPRequestHandler):
    """``make console``: the page's files and the console's JSON, GET only."""

    def do_GET(self) -> None:
        from infra.fakeslack.page import static_file

        if serve_console(self, self.path):
            return
        found = static_file(urlsplit(self.path).path)
        if found is None:
            send_json(self, 404, {"ok": False, "error": "not_found"})
            return
        body, kind = found
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the console is for reading, not for its own log."""


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m infra.console", description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8090)
    args = parser.parse_args(argv)
    from shared import config

    settings = config.settings()
    project, database = settings.google_cloud_project, settings.firestore_database
    if not project:
        print(
            "make console reads a project's Firestore: set GOOGLE_CLOUD_PROJECT (and FIRESTORE_DATABASE unless it is "
            "(default)); it signs in with your application-default credentials (gcloud auth application-default login)",
            file=sys.stderr,
        )
        return 2
    try:
        server = ThreadingHTTPServer((args.host, args.port), _Handler)
    except OSError as exc:
        print(f"cannot listen on {args.host}:{args.port} ({exc.strerror}): choose another with PORT=", file=sys.stderr)
        return 2
    url = f"http://{args.host}:{server.server_address[1]}/#console"
    print(f"The console of {project} (database {database}), read-only: {url}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
