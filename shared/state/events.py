"""Slack de-duplication records: ``events/{event_id}`` and ``events/msg-{channel}-{ts}``, created with ``create()``.

One Slack message can arrive as several events (a retry, or ``app_mention`` with its ``message`` twin); each
record is created at most once, so whatever carried the message, it is acted on once. Records carry a TTL field.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from google.api_core import exceptions as gexc
from google.cloud import firestore

from shared import config
from shared.state import ids, quotas
from shared.state.firestore import ALREADY_EXISTS, EVENT_EXPIRES_FIELD, db, event_ref, now, session_ref, transact
from shared.state.models import Session

log = logging.getLogger(__name__)


def record(kind: str, session_id: str, at: datetime) -> dict[str, Any]:
    """The body of a de-duplication record (what acted on the message, and when it may be forgotten)."""
    expires = at + timedelta(hours=config.settings().event_ttl_hours)
    return {"type": kind, "session_id": session_id, "received_at": at, EVENT_EXPIRES_FIELD: expires}


class Start(StrEnum):
    STARTED = "started"
    DUPLICATE = "duplicate"  # a Slack retry, a concurrent duplicate delivery, or the message's twin event
    LIMITED = "limited"  # over a rate limit: nothing was created but the message's record


@dataclass(frozen=True)
class Started:
    outcome: Start
    refusal: quotas.Refusal | None = None


def start_session_for_event(*, event_id: str, event_type: str, session: Session,
                            quota: quotas.Quota | None = None) -> Started:  # fmt: skip
    """Record the Slack event and create its session in one atomic commit.

    Every document is written with ``create()``: if the event was seen before (a Slack retry, or a concurrent
    duplicate delivery) the whole commit fails and nothing changes. With rate limits on, the same commit reads and
    updates the limits document; a start over a limit records only the message (so its twin event and Slack's
    retries are not refused twice) and creates no session.
    """
    body = record(event_type, session.session_id, session.created_at)
    message = event_ref(ids.message_key(session.channel, session.trigger_ts))
    if quota is not None and quota.on:
        try:
            return _start_counted(event_id, body, message, session, quota)
        except (gexc.Aborted, ValueError) as exc:  # the client gives up on a contended commit with a ValueError
            # Many starts at once all want the one limits document: admit this one uncounted rather than fail it
            # (Slack would retry it, and add to the contention).
            log.warning("rate limits skipped: the limits document is contended", extra={"error": str(exc)})
    batch = db().batch()
    batch.create(event_ref(event_id), body)
    # The same message can arrive as two events (app_mention and its message twin): it acts once.
    batch.create(message, body)
    batch.create(session_ref(session.session_id), session.to_doc())
    try:
        batch.commit()
    except ALREADY_EXISTS:
        return Started(Start.DUPLICATE)
    return Started(Start.STARTED)


def _start_counted(event_id: str, body: dict[str, Any], message: firestore.DocumentReference, session: Session,
                   quota: quotas.Quota) -> Started:  # fmt: skip
    """The start, with the limits document read and updated in the same transaction."""

    @firestore.transactional
    def start(transaction: firestore.Transaction) -> Started:
        limits = quotas.ingress_ref().get(transaction=transaction).to_dict() or {}
        at = session.created_at
        refused = quotas.refusal(limits, user=session.trigger_user, channel=session.channel, at=at, quota=quota)
        if refused is not None:
            transaction.create(message, record("limited", session.session_id, at))
            return Started(Start.LIMITED, refused)
        transaction.create(event_ref(event_id), body)
        transaction.create(message, body)
        transaction.create(session_ref(session.session_id), session.to_doc())
        transaction.set(quotas.ingress_ref(), quotas.admitted(limits, session_id=session.session_id,
                        user=session.trigger_user, channel=session.channel, at=at, quota=quota))  # fmt: skip
        return Started(Start.STARTED)

    try:
        started: Started = transact(start)
    except ALREADY_EXISTS:
        return Started(Start.DUPLICATE)
    return started


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
