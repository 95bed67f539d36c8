"""The one Firestore access layer. Every read and write of product state goes through here.

Collections: ``events`` (Slack de-duplication, with a TTL field), ``sessions``,
``questions``. The client is a lazy module global so importing costs nothing.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import Any

from google.api_core import exceptions as gexc
from google.cloud import firestore

from shared import config
from shared.models import Session

log = logging.getLogger(__name__)

EVENTS = "events"
SESSIONS = "sessions"
QUESTIONS = "questions"

# The field Firestore's TTL policy on ``events`` deletes by (declared in Terraform).
EVENT_EXPIRES_FIELD = "expires_at"

_client: firestore.Client | None = None


def db() -> firestore.Client:
    """The Firestore client, built on first use (it honours FIRESTORE_EMULATOR_HOST itself)."""
    global _client  # noqa: PLW0603 - lazy global, as in the functions-framework samples
    if _client is None:
        settings = config.settings()
        _client = firestore.Client(project=settings.google_cloud_project, database=settings.firestore_database)
    return _client


def now() -> datetime:
    return datetime.now(UTC)


def start_session_for_event(*, event_id: str, event_type: str, session: Session) -> bool:
    """Record the Slack event and create its session in one atomic commit.

    Both documents are written with ``create()``: if the event was seen before
    (a Slack retry, or a concurrent duplicate delivery) the whole commit fails
    and nothing changes. Returns True only for the one delivery that won.
    """
    expires = session.created_at + timedelta(hours=config.settings().event_ttl_hours)
    batch = db().batch()
    batch.create(
        db().collection(EVENTS).document(event_id),
        {
            "type": event_type,
            "session_id": session.session_id,
            "received_at": session.created_at,
            EVENT_EXPIRES_FIELD: expires,
        },
    )
    batch.create(db().collection(SESSIONS).document(session.session_id), session.to_doc())
    try:
        batch.commit()
    except (gexc.AlreadyExists, gexc.Conflict):
        return False
    return True


def forget_event_session(*, event_id: str, session_id: str) -> None:
    """Undo ``start_session_for_event`` when the task could not be enqueued, so Slack's retry starts clean."""
    batch = db().batch()
    batch.delete(db().collection(EVENTS).document(event_id))
    batch.delete(db().collection(SESSIONS).document(session_id))
    batch.commit()


def get_session(session_id: str) -> Session | None:
    snap = db().collection(SESSIONS).document(session_id).get()
    data = snap.to_dict()
    return Session.from_doc(data) if snap.exists and data is not None else None


def record_delivery(session_id: str, *, task_name: str, attempt: int) -> int:
    """Count a task delivery on the session document; returns the count. Creates nothing."""
    ref = db().collection(SESSIONS).document(session_id)
    ref.update(
        {"deliveries": firestore.Increment(1), "last_delivery": {"task": task_name, "attempt": attempt, "at": now()}}
    )
    data: dict[str, Any] = ref.get(field_paths=["deliveries"]).to_dict() or {}
    return int(data.get("deliveries", 0))
