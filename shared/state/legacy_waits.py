"""Read-compat for sessions stored paused before every pause was one waiting record (issue 23): a document that
still carries the old single-kind pause markers (``question_id`` on a paused session, ``approval_ids``,
``child_ids``, a blocking ``parent_question`` left unanswered) is read as the waiting record those markers meant,
so a deploy while sessions wait leaves none of them stuck. Nothing writes the old markers any more.

Every id the old markers hold names the call it came from (``ids``: ``q-``, ``a-``, ``child-`` followed by the
session, the step and the call's index), so the record's positions are read from the ids alone.
"""

from __future__ import annotations

from typing import Any

from google.cloud import firestore

from shared.state.models import SessionStatus, Waiting, WaitKind

LEGACY_FIELDS = ("approval_ids", "child_ids", "released_seq")  # dropped on read: the record replaces them


def _position(key: str, prefix: str) -> tuple[int, int] | None:
    """(seq, index) of an id derived from a call (``q-S-3-1``, ``a-S-3-1``, ``child-S-3-1``)."""
    if not key.startswith(prefix):
        return None
    head, _, index = key.rpartition("-")
    _, _, seq = head.rpartition("-")
    return (int(seq), int(index)) if seq.isdigit() and index.isdigit() else None


def _entries(keys: list[str], prefix: str, kind: WaitKind) -> list[Waiting]:
    return [Waiting(pos[0], pos[1], kind, key) for key in keys if (pos := _position(key, prefix)) is not None]


def legacy_record(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The waiting record a document stored under the old pause markers means (empty: it has a record already,
    or none of them)."""
    if doc.get("waiting"):
        return []
    paused = doc.get("status") == SessionStatus.PAUSED.value
    if not paused and doc.get("status") != SessionStatus.QUEUED.value:
        return []  # it runs or has ended: whatever it waited on was read
    record = _entries(list(doc.get("approval_ids") or []), "a-", WaitKind.APPROVAL)
    record += _entries(list(doc.get("child_ids") or []), "child-", WaitKind.CHILD)
    if paused and not record and doc.get("question_id"):
        record = _entries([str(doc["question_id"])], "q-", WaitKind.QUESTION)
    asked = doc.get("parent_question") or {}
    unanswered = asked.get("blocking") and asked.get("answer") is None and asked.get("question_id")
    if paused and not record and unanswered and asked.get("seq") is not None and asked.get("index") is not None:
        record = [Waiting(int(asked["seq"]), int(asked["index"]), WaitKind.PARENT_ANSWER, str(asked["question_id"]))]
    return [w.to_doc() for w in sorted(record, key=lambda w: (w.seq, w.index))]


def dropped(doc: dict[str, Any]) -> dict[str, Any]:
    """The update that removes a document's old pause markers (written with the record that replaces them)."""
    return {name: firestore.DELETE_FIELD for name in LEGACY_FIELDS if name in doc}


def upgraded(doc: dict[str, Any]) -> dict[str, Any]:
    """The document as the waiting record reads it: its old pause markers become its record."""
    record = legacy_record(doc)
    return {**doc, "waiting": record} if record else doc
