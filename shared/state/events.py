"""Slack de-duplication records: ``events/{event_id}`` and ``events/msg-{channel}-{ts}``, created with ``create()``.

One Slack message can arrive as several events (a retry, or ``app_mention`` with its ``message`` twin); each
record is created at most once, so whatever carried the message, it is acted on once. Records carry a TTL field.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from shared import config
from shared.state import ids
from shared.state.firestore import ALREADY_EXISTS, EVENT_EXPIRES_FIELD, db, event_ref, now, session_ref
from shared.state.models import Session


def record(kind: str, session_id: str, at: datetime) -> dict[str, Any]:
    """The body of a de-duplication record (what acted on the message, and when it may be forgotten)."""
    expires = at + timedelta(hours=config.settings().event_ttl_hours)
    return {"type": kind, "session_id": session_id, "received_at": at, EVENT_EXPIRES_FIELD: expires}


def start_session_for_event(*, event_id: str, event_type: str, session: Session) -> bool:
    """Record the Slack event and create its session in one atomic commit.

    Every document is written with ``create()``: if the event was seen before (a Slack retry, or a concurrent
    duplicate delivery) the whole commit fails and nothing changes. True only for the one delivery that won.
    """
    body = record(event_type, session.session_id, session.created_at)
    batch = db().batch()
    batch.create(event_ref(event_id), body)
    # The same message can arrive as two events (app_mention and its message twin): it acts once.
    batch.create(event_ref(ids.message_key(session.channel, session.trigger_ts)), body)
    batch.create(session_ref(session.session_id), session.to_doc())
    try:
        batch.commit()
    except ALREADY_EXISTS:
        return False
    return True


def claim_message(channel: str, ts: str, *, kind: str, session_id: str) -> bool:
    """Record that a message was acted on, with ``create()``; False if an earlier event already did."""
    try:
        event_ref(ids.message_key(channel, ts)).create(record(kind, session_id, now()))
    except ALREADY_EXISTS:
        return False
    return True


def message_record(channel: str, ts: str) -> dict[str, Any] | None:
    """What acted on a message (its de-duplication record), if anything did."""
    return event_ref(ids.message_key(channel, ts)).get().to_dict()
