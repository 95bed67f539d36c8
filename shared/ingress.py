"""The Slack Events API ingress: verify, de-duplicate, record, enqueue, answer.

Slack wants a 2xx within 3 seconds and retries otherwise, so this path waits
only on one Firestore commit and one task creation. It never imports
google-genai: the model runs later, in agent_session.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

from slack_sdk.signature import Clock, SignatureVerifier

from shared import answers, config, ids, store, tasks
from shared.logs import session_context
from shared.models import Session, SessionKind
from shared.slack_events import BadEvent, Challenge, Ignore, Message, classify

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 1024 * 1024

Reply = tuple[dict[str, Any], int]


def verify(body: bytes, headers: Mapping[str, str], clock: Clock | None = None) -> bool:
    """Slack's signature check, with its 5-minute timestamp window; False for anything malformed."""
    verifier = SignatureVerifier(config.settings().slack_signing_secret, clock=clock or Clock())
    try:
        return verifier.is_valid_request(body, headers)
    except (ValueError, UnicodeDecodeError):
        # A non-numeric timestamp or a body that is not UTF-8 cannot carry a valid signature.
        return False


def handle_events(body: bytes, headers: Mapping[str, str]) -> Reply:
    """Answer one Events API request. ``body`` is at most MAX_BODY_BYTES + 1 bytes as read."""
    if len(body) > MAX_BODY_BYTES:
        return {"error": "body too large"}, 413
    if not verify(body, headers):
        log.warning("rejected request with a missing or invalid Slack signature")
        return {"error": "invalid signature"}, 401
    try:
        payload = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return {"error": "body is not JSON"}, 400
    try:
        outcome = classify(payload)
    except BadEvent as exc:
        return {"error": str(exc)}, 400

    if isinstance(outcome, Challenge):
        return {"challenge": outcome.challenge}, 200
    if isinstance(outcome, Ignore):
        log.debug("ignored event", extra={"reason": outcome.reason})
        return {"ok": True, "ignored": outcome.reason}, 200
    return _route(outcome, body=payload, retry_num=headers.get("x-slack-retry-num"))


def _route(message: Message, *, body: dict[str, Any], retry_num: str | None) -> Reply:
    """A thread reply may answer the thread's open question; a mention or a DM otherwise starts a session."""
    if message.in_thread:
        outcome = answers.answer_reply(
            channel=message.channel,
            thread_ts=message.thread_ts,
            user=message.user,
            text=message.text,
            ts=message.ts,
            bot_user_id=_bot_user_id(body),
        )
        if outcome.result != "no_question":
            return {"ok": True, "answer": outcome.result}, 200
        running = store.running_session_in_thread(message.channel, message.thread_ts)
        if running is not None:
            return _steer(message, running.session_id)
    if not message.starts_session:
        return {"ok": True, "ignored": "thread message with no open question and no running session"}, 200
    return _start_session(message, retry_num=retry_num)


def _steer(message: Message, session_id: str) -> Reply:
    """A message while the thread's session runs: a note it reads at its next turn, not a second session."""
    with session_context(session_id):
        if not store.claim_message(message.channel, message.ts, kind="note", session_id=session_id):
            return {"ok": True, "duplicate": True}, 200
        note = {"kind": "steer", "text": message.text, "user": message.user, "ts": message.ts}
        if store.add_note(session_id, note):
            log.info("message queued as a note for the running session", extra={"ts": message.ts})
            return {"ok": True, "noted": session_id}, 200
    # The session ended in between: the message is handled like any other.
    store.forget_message(message.channel, message.ts)
    if message.starts_session:
        return _start_session(message, retry_num=None)
    return {"ok": True, "ignored": "the thread's session ended"}, 200


def _bot_user_id(body: dict[str, Any]) -> str | None:
    for authorization in body.get("authorizations") or []:
        if isinstance(authorization, dict) and authorization.get("is_bot") and authorization.get("user_id"):
            return str(authorization["user_id"])
    return None


def _start_session(start: Message, *, retry_num: str | None) -> Reply:
    session_id = ids.session_for_event(start.event_id)
    with session_context(session_id):
        session = Session(
            session_id=session_id,
            kind=SessionKind.MENTION,
            channel=start.channel,
            thread_ts=start.thread_ts,
            trigger_ts=start.ts,
            trigger_user=start.user,
            text=start.text,
            event_id=start.event_id,
            created_at=store.now(),
        )
        if not store.start_session_for_event(event_id=start.event_id, event_type=start.event_type, session=session):
            log.info("duplicate event delivery", extra={"event_id": start.event_id, "retry_num": retry_num})
            return {"ok": True, "duplicate": True}, 200
        try:
            tasks.enqueue_session(session_id)
        except Exception:
            # Undo, so Slack's retry of this event starts from scratch instead of being a "duplicate".
            log.exception("could not enqueue the session task; asking Slack to retry")
            store.forget_event_session(
                event_id=start.event_id, session_id=session_id, message=store.message_key(start.channel, start.ts)
            )
            return {"error": "could not enqueue, retry"}, 503
        log.info(
            "session queued", extra={"event_id": start.event_id, "channel": start.channel, "thread_ts": start.thread_ts}
        )
        return {"ok": True, "session_id": session_id}, 200
