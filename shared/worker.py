"""The agent_session handler: authenticate the task, claim the session, run it.

Cloud Tasks treats any 2xx as done and anything else as a failure to retry, so:
a duplicate delivery, a finished session or a malformed task answers 2xx (there
is nothing to retry); an unexpected crash answers 500 so the task is redelivered
and the next attempt takes the session over from its stored transcript.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import uuid
from collections.abc import Mapping
from typing import Any

from shared import auth, config, store
from shared.logs import session_context

log = logging.getLogger(__name__)

MAX_TASK_BODY_BYTES = 64 * 1024
GIVE_UP_AFTER_ATTEMPTS = 3  # a session that crashes this often is failed, and the thread told, not retried forever

Reply = tuple[dict[str, Any], int]


def parse_task_body(body: bytes) -> str:
    """The session id a task names; ValueError for anything else."""
    try:
        payload = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        raise ValueError("body is not JSON") from None
    session_id = payload.get("session_id") if isinstance(payload, dict) else None
    if not isinstance(session_id, str) or not session_id:
        raise ValueError("body.session_id is missing")
    return session_id


def handle_task(body: bytes, headers: Mapping[str, str]) -> Reply:
    settings = config.settings()
    denied = auth.check(headers, audience=settings.tasks_target_url, service_account=settings.tasks_service_account)
    if denied:
        return denied
    if len(body) > MAX_TASK_BODY_BYTES:
        return {"error": "body too large"}, 413
    try:
        session_id = parse_task_body(body)
    except ValueError as exc:
        # A malformed task will never succeed; 2xx keeps Cloud Tasks from retrying it forever.
        log.error("dropping malformed task", extra={"reason": str(exc)})
        return {"error": str(exc)}, 200
    task = headers.get("x-cloudtasks-taskname", "")
    try:
        attempt = int(headers.get("x-cloudtasks-taskretrycount", "0") or 0)
    except ValueError:
        attempt = 0
    with session_context(session_id):
        return _run(session_id, task=task, attempt=attempt)


def _run(session_id: str, *, task: str, attempt: int) -> Reply:
    from shared.agent import Runner

    worker = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
    session, why = store.claim_session(
        session_id, worker=worker, task=task, attempt=attempt, lease_seconds=config.settings().session_lease_seconds
    )
    if session is None:
        log.info("nothing to do for this delivery", extra={"reason": why, "task": task, "attempt": attempt})
        return {"ok": True, "skipped": why}, 200
    log.info("session claimed", extra={"reason": why, "task": task, "attempt": attempt, "kind": session.kind.value})
    try:
        status = Runner(session, takeover=why.startswith("took over"), started_at=session.started_at).run()
    except store.LeaseLost as exc:
        log.warning("lost the session to another worker; stopping", extra={"reason": str(exc)})
        return {"ok": True, "skipped": "lease lost"}, 200
    except Exception as exc:
        if attempt + 1 < GIVE_UP_AFTER_ATTEMPTS:
            # Probably transient (Slack or Firestore hiccup): Cloud Tasks redelivers and the next attempt resumes.
            log.exception("session attempt crashed; asking Cloud Tasks to retry", extra={"attempt": attempt})
            return {"error": "session attempt failed, retry"}, 500
        log.exception("session crashed on every attempt; giving up", extra={"attempt": attempt})
        Runner.give_up(session, f"an internal error ({type(exc).__name__})")
        return {"ok": True, "status": "failed"}, 200
    return {"ok": True, "status": status.value}, 200
