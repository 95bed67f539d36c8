"""Typed updates of stored documents: the one way the Firestore layer writes a session's, a question's or an
approval's fields. Each function takes the fields by their stored names as keywords, typed (mypy checks the
names and the values), and returns the map a Firestore ``update`` takes: enums as their values, stored shapes
(notes, waiting entries, a parent question) as maps. Merge the maps of one write with ``|``.

``appended`` and ``removed`` are the array transforms of a session's list fields (``ArrayUnion``,
``ArrayRemove``), typed as the fields are.
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


def _list(key: str, value: object) -> list[Any]:
    if not isinstance(value, list):
        raise TypeError(f"{key} is not a list field: an array transform takes a list")
    return [stored_value(v) for v in value]
