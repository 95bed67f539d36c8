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

from google.cloud import firestore

from shared import config
from shared.state import ids, quotas
from shared.state.firestore import ALREADY_EXISTS, EVENT_EXPIRES_FIELD, db, event_ref, now, session_ref
from shared.state.session_model import Session

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
    duplicate delivery) the whole commit fails and nothing changes. With rate limits on, the same commit counts the
    start against them (``shared.state.quotas``); a start past a limit is taken back, leaving only its records (so
    its twin event and Slack's retries are not refused twice) and no session.
    """
    body = record(event_type, session.session_id, session.created_at)
    message = event_ref(ids.message_key(session.origin.channel, session.origin.trigger_ts))
    if quota is not None and quota.on:
        return _start_counted(event_id, body, message, session, quota)
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
    """The start, counted against the person's and the channel's limits in the same commit (no read, nothing held:
    the commit's answer says what the counters reached); a start past a limit is taken back at once."""
    scopes = quota.scopes(user=session.origin.trigger_user, channel=session.origin.channel)
    at = session.created_at
    batch = db().batch()
    batch.create(event_ref(event_id), body)
    batch.create(message, body)
    running = [scope.ref.id for scope in scopes if scope.running]
    batch.create(session_ref(session.session_id), {**session.to_doc(), quotas.RELEASES: running})
    counters = [(scope, scope.count(batch, session.session_id, at)) for scope in scopes]
    try:
        results = iter(batch.commit()[3:])
    except ALREADY_EXISTS:
        return Started(Start.DUPLICATE)
    for scope, names in counters:
        counts = {name: quotas.counted(next(results)) for name in names}
        if scope.running and counts["running"] < 1:  # a release counted twice somewhere: recount
            counts["running"] = quotas.recount(scope, at=at, running_for=quota.running_for)
        refused = scope.refused(counts, at)
        if refused is not None and refused.resets is None:  # dead workers' sessions may still be counted
            counts["running"] = quotas.recount(scope, at=at, running_for=quota.running_for)
            refused = scope.refused(counts, at)
        if refused is not None:
            _take_back(event_id, message, session, scopes)
            return Started(Start.LIMITED, refused)
    return Started(Start.STARTED)


def _take_back(event_id: str, message: firestore.DocumentReference, session: Session,
               scopes: list[quotas.Scope]) -> None:  # fmt: skip
    """Undo a start past a limit: its counts taken back, its session and event record deleted (no task was made for
    it); its message stays recorded as limited, so Slack's retry and the message's twin are not refused twice."""
    batch = db().batch()
    batch.delete(event_ref(event_id))
    batch.set(message, record("limited", session.session_id, session.created_at))
    batch.delete(session_ref(session.session_id))
    for scope in scopes:
        scope.count(batch, session.session_id, session.created_at, by=-1)
    batch.commit()


def claim_message(channel: str, ts: str, *, kind: str, session_id: str) -> bool:
    """Record that a message was acted on, with ``create()``; False if an earlier event already did."""
    try:
        event_ref(ids.message_key(channel, ts)).create(record(kind, session_id, now()))
    except ALREADY_EXISTS:
        return False
    return True


def claim_event(event_id: str, *, kind: str) -> bool:
    """Record a Slack event that starts no session (the app opened), with ``create()``; False if it was recorded
    before (Slack's retry, or a concurrent duplicate delivery)."""
    try:
        event_ref(event_id).create(record(kind, "", now()))
    except ALREADY_EXISTS:
        return False
    return True


# How long a claim keeps others from acting on its key (longer than the act, a post or two, takes): a claimant that
# died before acting leaves it to the next one after that (``shared.state.notices``).
CLAIM_HOLD = timedelta(minutes=10)


def release(key: str) -> None:
    """Give up a claim whose act failed: the next actor may try at once."""
    event_ref(key).delete()


def event_seen(event_id: str) -> bool:
    """Whether a Slack event was recorded (``claim_event``)."""
    return bool(event_ref(event_id).get().exists)


def message_record(channel: str, ts: str) -> dict[str, Any] | None:
    """What acted on a message (its de-duplication record), if anything did."""
    return event_ref(ids.message_key(channel, ts)).get().to_dict()
