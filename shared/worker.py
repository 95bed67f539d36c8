"""The agent_session handler: what happens when Cloud Tasks delivers a session.

For now it records the delivery on the session document, which is what the
ingress tests observe; the agent loop replaces it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

from google.api_core import exceptions as gexc

from shared import store
from shared.logs import session_context

log = logging.getLogger(__name__)

MAX_TASK_BODY_BYTES = 64 * 1024

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
    if len(body) > MAX_TASK_BODY_BYTES:
        return {"error": "body too large"}, 413
    try:
        session_id = parse_task_body(body)
    except ValueError as exc:
        # A malformed task will never succeed; 2xx keeps Cloud Tasks from retrying it forever.
        log.error("dropping malformed task", extra={"reason": str(exc)})
        return {"error": str(exc)}, 200
    task_name = headers.get("x-cloudtasks-taskname", "")
    attempt = int(headers.get("x-cloudtasks-taskretrycount", "0") or 0)
    with session_context(session_id):
        try:
            count = store.record_delivery(session_id, task_name=task_name, attempt=attempt)
        except gexc.NotFound:
            log.error("task names a session that does not exist")
            return {"error": "no such session"}, 200
        log.info("session task received", extra={"task": task_name, "deliveries": count})
        return {"ok": True, "deliveries": count}, 200
