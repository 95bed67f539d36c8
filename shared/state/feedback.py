"""Feedback on final answers: one ``feedback/{session}-{user}`` document per person and session.

A person's first press creates it with ``create()``, so a press Slack delivers twice is stored once; a later press
of the other button changes its rating, in a transaction. The per-day summary and the operator's listing read it
by day or by time, each a query on one field (no composite index).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from google.cloud import firestore
from google.cloud.firestore_v1.base_query import FieldFilter

from shared.state.firestore import ALREADY_EXISTS, FEEDBACK, db, now, transact
from shared.state.updates import feedback_update


class Recorded(StrEnum):
    NEW = "new"
    CHANGED = "changed"  # the person pressed the other button
    SAME = "same"  # the same press again (a redelivery, or pressed twice): nothing changed


@dataclass(frozen=True)
class Feedback:
    session_id: str
    user: str
    rating: str  # "positive" or "negative"
    channel: str
    thread_ts: str
    at: datetime  # the first press
    updated_at: datetime  # the latest change
    day: str  # the UTC day of the first press, YYYY-MM-DD: what the per-day summary counts by

    @classmethod
    def from_doc(cls, doc: dict[str, Any]) -> Feedback:
        return cls(**{name: doc[name] for name in cls.__dataclass_fields__})

    def to_doc(self) -> dict[str, Any]:
        return asdict(self)


def _ref(session_id: str, user: str) -> firestore.DocumentReference:
    ref: firestore.DocumentReference = db().collection(FEEDBACK).document(f"{session_id}-{user}")
    return ref


def record(session_id: str, user: str, rating: str, *, channel: str, thread_ts: str) -> Recorded:
    """Store ``user``'s rating of ``session_id``'s final answer: created once, then only changed."""
    at = now()
    ref = _ref(session_id, user)
    first = Feedback(session_id, user, rating, channel, thread_ts, at=at, updated_at=at, day=at.strftime("%Y-%m-%d"))
    try:
        ref.create(first.to_doc())
        return Recorded.NEW
    except ALREADY_EXISTS:
        pass

    @firestore.transactional
    def change(transaction: firestore.Transaction) -> Recorded:
        current = ref.get(transaction=transaction, field_paths=["rating"]).to_dict() or {}
        if current.get("rating") == rating:
            return Recorded.SAME
        transaction.update(ref, feedback_update(rating=rating, updated_at=at))
        return Recorded.CHANGED

    outcome: Recorded = transact(change)
    return outcome


def on_day(day: str) -> list[Feedback]:
    """Every rating first given on ``day`` (YYYY-MM-DD, UTC)."""
    query = db().collection(FEEDBACK).where(filter=FieldFilter("day", "==", day))
    return [Feedback.from_doc(snap.to_dict() or {}) for snap in query.stream()]


def since(start: datetime, *, limit: int) -> list[Feedback]:
    """The latest ratings first given at ``start`` or later, newest first, at most ``limit``."""
    query = (
        db()
        .collection(FEEDBACK)
        .where(filter=FieldFilter("at", ">=", start))
        .order_by("at", direction=firestore.Query.DESCENDING)
        .limit(limit)
    )
    return [Feedback.from_doc(snap.to_dict() or {}) for snap in query.stream()]
