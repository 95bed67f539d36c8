"""The sweep's queries: stale questions and sessions, oldest first, by pages.

Each is an indexed query on equality fields and a time (see ``shared.state.indexes``): it reads only stale
documents, however large the collection grows.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any, TypeVar

from google.cloud.firestore_v1.base_query import FieldFilter

from shared.state.firestore import APPROVALS, QUESTIONS, SESSIONS, db
from shared.state.models import Approval, ApprovalStatus, Question, QuestionStatus, SessionStatus
from shared.state.session_model import Session

log = logging.getLogger(__name__)
T = TypeVar("T")


def _stale(collection: str, filters: list[tuple[str, str, Any]], order: str, cutoff: datetime,
           page_size: int) -> Iterator[Any]:  # fmt: skip
    """Documents matching ``filters`` whose ``order`` field is at or before ``cutoff``, oldest first, by pages."""
    query: Any = db().collection(collection)
    for field_path, op, value in filters:
        query = query.where(filter=FieldFilter(field_path, op, value))
    query = query.where(filter=FieldFilter(order, "<=", cutoff)).order_by(order).limit(page_size)
    last = None
    while True:
        page = list((query.start_after(last) if last is not None else query).stream())
        yield from page
        if len(page) < page_size:
            return
        last = page[-1]


def _read(snaps: Iterator[Any], read: Callable[[dict[str, Any]], T]) -> Iterator[T]:
    """Each document read as its type; one that cannot be read (a malformed or foreign document) is logged and
    passed over, never stopping the sweep at it (every later run would stop there too)."""
    for snap in snaps:
        try:
            yield read(snap.to_dict() or {})
        except Exception:
            log.exception("a stale document could not be read; passed over", extra={"document": snap.reference.path})


def stale_questions(cutoff: datetime, *, page_size: int) -> Iterator[Question]:
    """Open questions asked at or before ``cutoff``."""
    found = _stale(QUESTIONS, [("status", "==", QuestionStatus.OPEN.value)], "asked_at", cutoff, page_size)
    return _read(found, Question.from_doc)


def stale_approvals(cutoff: datetime, *, page_size: int) -> Iterator[Approval]:
    """Pending approvals asked at or before ``cutoff``."""
    found = _stale(APPROVALS, [("status", "==", ApprovalStatus.PENDING.value)], "asked_at", cutoff, page_size)
    return _read(found, Approval.from_doc)


def sessions_created(start: datetime, end: datetime, *, page_size: int) -> Iterator[Session]:
    """Sessions created in ``[start, end)``, oldest first, by pages (a range on one field: no composite index)."""
    query: Any = (
        db()
        .collection(SESSIONS)
        .where(filter=FieldFilter("created_at", ">=", start))
        .where(filter=FieldFilter("created_at", "<", end))
        .order_by("created_at")
        .limit(page_size)
    )
    last = None
    while True:
        page = list((query.start_after(last) if last is not None else query).stream())
        for snap in page:
            yield Session.from_doc(snap.to_dict() or {})
        if len(page) < page_size:
            return
        last = page[-1]


def decided_approvals(since: datetime, *, limit: int) -> list[Approval]:
    """The latest decisions (approved, denied, expired) since ``since``, newest first (a range on one field)."""
    query = (
        db()
        .collection(APPROVALS)
        .where(filter=FieldFilter("decided_at", ">=", since))
        .order_by("decided_at", direction="DESCENDING")
        .limit(limit)
    )
    return [Approval.from_doc(snap.to_dict() or {}) for snap in query.stream()]


def stale_sessions(status: SessionStatus, field_path: str, cutoff: datetime, *, page_size: int,
                   not_followed_up: bool = False) -> Iterator[Session]:  # fmt: skip
    """Sessions in ``status`` whose ``field_path`` time is at or before ``cutoff``."""
    filters: list[tuple[str, str, Any]] = [("status", "==", status.value)]
    if not_followed_up:
        filters.append(("followed_up", "==", False))
    return _read(_stale(SESSIONS, filters, field_path, cutoff, page_size), Session.from_doc)
