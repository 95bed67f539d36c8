"""The ``agent_session`` entry point: Cloud Tasks' OIDC token checked, the task parsed, one delivery run.

A malformed task answers 2xx (it would never succeed, so there is nothing to retry); a crash answers 500 so
Cloud Tasks redelivers and the next attempt takes the session over; so does a transaction that gave up for
contention (nothing of it applied), with a warning and no traceback. Never a 503 or 429: Cloud Tasks would slow
the whole queue's dispatch for them.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from shared import config
from shared.auth import oidc
from shared.errors import Contended
from shared.handlers.common import INTERNAL_MAX_BODY_BYTES, Reply, too_large, try_again
from shared.limits import loads_untrusted
from shared.logs import session_context, trace_from
from shared.queue import tasks
from shared.state.models import Waiting
from shared.usecases.worker import run_delivery

log = logging.getLogger(__name__)

MAX_TASK_BODY_BYTES = INTERNAL_MAX_BODY_BYTES
SESSION_ID = re.compile(r"[A-Za-z0-9_-]{1,1500}")  # what shared.state.ids derives; a Firestore document id


@dataclass(frozen=True)
class TaskBody:
    """What a task names: its session, and the waiting record a continuation resumes and its transcript's first free
    step id then (None: none named)."""

    session_id: str
    resumes: list[Waiting] | None = None
    transcript_next: int | None = None


def parse_task(body: bytes) -> TaskBody:
    """The session a task names (ValueError without one) and the record it resumes (a hint: a malformed one is
    read as none, as the session runs without it)."""
    try:
        payload: Any = loads_untrusted(body)
    except (ValueError, UnicodeDecodeError):
        raise ValueError("body is not JSON") from None
    session_id = payload.get("session_id") if isinstance(payload, dict) else None
    if not isinstance(session_id, str) or not session_id:
        raise ValueError("body.session_id is missing")
    if not SESSION_ID.fullmatch(session_id) or (session_id.startswith("__") and session_id.endswith("__")):
        raise ValueError("body.session_id is not a session id")  # "a/b", "..", "__x__": no document's id
    resumes = tasks.resumes_named(payload)
    return TaskBody(session_id, resumes, tasks.transcript_next_named(payload) if resumes else None)


def handle(body: bytes, headers: Mapping[str, str]) -> Reply:
    settings = config.settings()
    refused = oidc.check(
        headers, audience=settings.tasks_target_url, service_account=settings.tasks_service_account
    ) or too_large(body, MAX_TASK_BODY_BYTES)  # the token first: a stranger learns nothing of the size limit
    if refused:
        return refused
    try:
        named = parse_task(body)
    except ValueError as exc:
        log.error("dropping malformed task", extra={"reason": str(exc)})
        return {"error": str(exc)}, 200
    task = headers.get("x-cloudtasks-taskname", "")
    try:
        attempt = int(headers.get("x-cloudtasks-taskretrycount", "0") or 0)
    except ValueError:
        attempt = 0
    with session_context(named.session_id, trace=trace_from(headers)):
        try:
            delivery = run_delivery(named.session_id, task=task, attempt=attempt, resumes=named.resumes,
                                    transcript_next=named.transcript_next)  # fmt: skip
        except Contended as exc:  # its claim or a step's commit: the retry carries on from what was stored
            return try_again(exc, status=500)  # a 503 or 429 would make Cloud Tasks slow the whole queue
    return {"ok": not delivery.retry, **delivery.detail}, 500 if delivery.retry else 200
