"""Posts routed to the operator channel: ``routed/{record id}``, one per question or approval card posted there.

A post in a thread is found again after a crash by its key (one read of the thread); a top-level post in the
operator channel is not in any thread, so its attempt is recorded here first: a record without a ``ts`` is a post
that may have reached Slack before its worker died, and its retry looks for it before posting again. When the post
is recorded, its record is listed on the thread the post starts (``threads/{operator channel}-{ts}``), so a reply
under it finds the question or approval as a reply in the conversation's own thread would.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from google.cloud import firestore

from shared.state.firestore import ALREADY_EXISTS, db, now, thread_ref
from shared.state.updates import routed_update, thread_listed

ROUTED = "routed"


class Listed(StrEnum):
    """Which of a thread document's lists a routed record goes on."""

    QUESTION = "open_question_ids"
    APPROVAL = "open_approval_ids"


@dataclass(frozen=True)
class Attempt:
    """A routed post as recorded: ``ts`` once it is known; ``again``: an earlier attempt started it."""

    started_at: datetime
    ts: str | None
    again: bool


def _ref(record_id: str) -> firestore.DocumentReference:
    ref: firestore.DocumentReference = db().collection(ROUTED).document(record_id)
    return ref


def begin(record_id: str, channel: str) -> Attempt:
    """Record that ``record_id``'s post to ``channel`` is about to be made (``create()``); an earlier attempt's
    record is returned as it stands instead."""
    started = now()
    try:
        _ref(record_id).create(routed_update(channel=channel, started_at=started, ts=None))
    except ALREADY_EXISTS:
        found = _ref(record_id).get().to_dict() or {}
        return Attempt(found.get("started_at") or started, found.get("ts"), again=True)
    return Attempt(started, None, again=False)


def finish(record_id: str, *, channel: str, ts: str, listed: Listed) -> None:
    """The post is in Slack at ``ts``: noted, and the record listed on the thread it starts (one commit)."""
    batch = db().batch()
    lists = (thread_listed(open_question_ids=[record_id]) if listed is Listed.QUESTION
             else thread_listed(open_approval_ids=[record_id]))  # fmt: skip
    batch.update(_ref(record_id), routed_update(ts=ts))
    batch.set(thread_ref(channel, ts), lists, merge=True)
    batch.commit()
