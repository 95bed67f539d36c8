"""Typed updates of stored documents: the one way the Firestore layer writes a session's, a question's or an
approval's fields. Each function takes the fields by their stored names as keywords, typed (mypy checks the
names and the values), and returns the map a Firestore ``update`` takes: enums as their values, stored shapes
(notes, waiting entries, a parent question) as maps. Merge the maps of one write with ``|``.

``appended`` and ``removed`` are the array transforms of a session's list fields (``ArrayUnion``,
``ArrayRemove``), typed as the fields are.

The smaller documents are written the same way: a thread's lists of open questions and approvals and its last
answer (``thread_listed``, ``thread_unlisted``, ``thread_update``), a feedback rating (``feedback_update``), a
routed post (``routed_update``), a DM's current conversation (``dm_conversation_update``), a person's day of spend
(``spend_added``) and a running counter of the rate limits (``running_recounted``, ``running_released``).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, TypedDict, Unpack

from google.cloud import firestore

from shared.state.models import ApprovalStatus, QuestionStatus, stored_value
from shared.state.session_model import SessionUpdate


class QuestionUpdate(TypedDict, total=False):
    """What a write may change on a ``questions/{question_id}`` document (``Question``'s fields, and when it
    closed)."""

    post_ts: str | None
    status: QuestionStatus
    closed_at: datetime  # not read back: when it was cancelled or abandoned
    reminded_at: datetime | None
    answer: str | None
    answered_by: str | None
    answered_at: datetime | None
    answer_ts: str | None
    answer_pressed: bool
    matched_option: str | None
    continuation_id: str | None


class ApprovalUpdate(TypedDict, total=False):
    """What a write may change on an ``approvals/{approval_id}`` document (``Approval``'s fields)."""

    card_ts: str | None
    card_channel: str | None
    asked_in: str | None
    status: ApprovalStatus
    reminded_at: datetime | None
    decided_by: str | None
    decided_at: datetime | None
    reason: str | None
    decision_ts: str | None
    continuation_id: str | None
    approved_by: list[str]
    edited_args: str | None
    edited_digest: str | None
    edited_by: str | None
    revision: int


def _stored(fields: Mapping[str, Any]) -> dict[str, Any]:
    return {key: stored_value(value) for key, value in fields.items()}


def session_update(**fields: Unpack[SessionUpdate]) -> dict[str, Any]:
    """A session's fields as the map a Firestore write takes."""
    return _stored(fields)


def appended(**fields: Unpack[SessionUpdate]) -> dict[str, Any]:
    """Add these items to a session's list fields (``ArrayUnion``: an item already there is not added again)."""
    return {key: firestore.ArrayUnion(_list(key, value)) for key, value in fields.items()}


def removed(**fields: Unpack[SessionUpdate]) -> dict[str, Any]:
    """Take these items out of a session's list fields (``ArrayRemove``)."""
    return {key: firestore.ArrayRemove(_list(key, value)) for key, value in fields.items()}


def question_update(**fields: Unpack[QuestionUpdate]) -> dict[str, Any]:
    """A question's fields as the map a Firestore write takes."""
    return _stored(fields)


def approval_update(**fields: Unpack[ApprovalUpdate]) -> dict[str, Any]:
    """An approval's fields as the map a Firestore write takes."""
    return _stored(fields)


class ThreadLists(TypedDict, total=False):
    """The lists of a ``threads/{channel}-{thread_ts}`` document: the ids of the questions and approvals open in it
    (changed only by array transforms, so that parallel writers never lose each other's ids)."""

    open_question_ids: list[str]
    open_approval_ids: list[str]


class LastAnswer(TypedDict):
    """The last answer given in a thread: which question, by whom, the answering message and when."""

    question_id: str
    by: str
    ts: str | None
    at: datetime


class ThreadUpdate(TypedDict, total=False):
    """What a write may set on a thread document besides its lists."""

    last_answer: LastAnswer
    replaced: dict[str, str]  # a question cancelled as replaced: the id of the newer question that replaced it


def thread_listed(**fields: Unpack[ThreadLists]) -> dict[str, Any]:
    """Add these ids to a thread's lists (``ArrayUnion``; written with ``merge=True``: the first creates it)."""
    return {key: firestore.ArrayUnion(_list(key, value)) for key, value in fields.items()}


def thread_unlisted(**fields: Unpack[ThreadLists]) -> dict[str, Any]:
    """Take these ids off a thread's lists (``ArrayRemove``; written with ``merge=True``)."""
    return {key: firestore.ArrayRemove(_list(key, value)) for key, value in fields.items()}


def thread_update(**fields: Unpack[ThreadUpdate]) -> dict[str, Any]:
    """A thread document's other fields as the map a Firestore write takes."""
    return dict(fields)


class FeedbackUpdate(TypedDict, total=False):
    """What a later press may change on a ``feedback/{session}-{user}`` document."""

    rating: str
    updated_at: datetime


def feedback_update(**fields: Unpack[FeedbackUpdate]) -> dict[str, Any]:
    return dict(fields)


class RoutedUpdate(TypedDict, total=False):
    """A ``routed/{record id}`` document's fields: the operator channel, when its post was begun, the post's ts."""

    channel: str
    started_at: datetime
    ts: str | None


def routed_update(**fields: Unpack[RoutedUpdate]) -> dict[str, Any]:
    return dict(fields)


class DmConversationUpdate(TypedDict, total=False):
    """A ``dm_conversations/{channel}`` document's fields: the current conversation's thread key, and when."""

    thread_ts: str
    updated_at: datetime


def dm_conversation_update(**fields: Unpack[DmConversationUpdate]) -> dict[str, Any]:
    return dict(fields)


def spend_added(*, day: str, user: str, tokens: int) -> dict[str, Any]:
    """``tokens`` added to ``spend/{day}-{user}`` (a blind ``Increment``, written with ``merge=True``: the day's
    first turn creates the document with its day and person)."""
    return {"day": day, "user": user, "tokens": firestore.Increment(tokens)}


def running_recounted(*, running: int, sessions: dict[str, datetime]) -> dict[str, Any]:
    """A running counter (``limits/{kind}-{key}``) set to the sessions it counts, each by its start time."""
    return {"running": running, "sessions": sessions}


def running_released(session_id: str) -> dict[str, Any]:
    """A running counter with ``session_id`` taken back: one fewer, and its entry deleted (``merge=True``)."""
    return {"running": firestore.Increment(-1), "sessions": {session_id: firestore.DELETE_FIELD}}


def _list(key: str, value: object) -> list[Any]:
    if not isinstance(value, list):
        raise TypeError(f"{key} is not a list field: an array transform takes a list")
    return [stored_value(v) for v in value]
