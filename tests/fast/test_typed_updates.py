"""The Firestore layer's typed updates: what each writes, and that each names only its document's fields
(pure: no stack)."""

from __future__ import annotations

from dataclasses import fields
from datetime import UTC, datetime

import pytest
from google.cloud import firestore

from shared.state.feedback import Feedback
from shared.state.models import (
    Approval,
    ApprovalStatus,
    Note,
    NoteKind,
    Question,
    QuestionStatus,
    SessionStatus,
    Waiting,
    WaitKind,
)
from shared.state.session_model import SESSION_FIELDS, SessionUpdate
from shared.state.updates import (
    ApprovalUpdate,
    FeedbackUpdate,
    LastAnswer,
    QuestionUpdate,
    appended,
    approval_update,
    dm_conversation_update,
    feedback_update,
    question_update,
    removed,
    routed_update,
    running_recounted,
    running_released,
    session_update,
    spend_added,
    thread_listed,
    thread_unlisted,
    thread_update,
)

AT = datetime(2030, 1, 1, tzinfo=UTC)
NOTE = Note(kind=NoteKind.STEER, text="t", user="U", ts="1.0")


def test_a_session_update_is_the_map_firestore_stores() -> None:
    written = session_update(status=SessionStatus.RESUMED, notes=[NOTE], updated_at=AT, lease_until=None,
                             waiting=[Waiting(seq=1, index=0, kind=WaitKind.CHILD, key="c1")])  # fmt: skip
    assert written == {
        "status": "resumed",
        "notes": [{"kind": "steer", "text": "t", "user": "U", "ts": "1.0"}],
        "updated_at": AT,
        "lease_until": None,
        "waiting": [{"seq": 1, "index": 0, "kind": "child", "key": "c1", "released": False}],
    }


def test_array_transforms_take_the_list_fields_typed() -> None:
    added = appended(notes=[NOTE])["notes"]
    assert isinstance(added, firestore.ArrayUnion)
    assert added.values == [NOTE.to_doc()]
    taken = removed(sibling_ids=["c1"])["sibling_ids"]
    assert isinstance(taken, firestore.ArrayRemove)
    assert taken.values == ["c1"]
    with pytest.raises(TypeError, match="turns is not a list field"):
        appended(turns=1)


def test_question_and_approval_updates_store_their_enums_as_values() -> None:
    assert question_update(status=QuestionStatus.CANCELLED, closed_at=AT) == {"status": "cancelled", "closed_at": AT}
    assert approval_update(status=ApprovalStatus.APPROVED, approved_by=["U1"]) == {
        "status": "approved",
        "approved_by": ["U1"],
    }


def test_each_update_names_only_its_documents_stored_fields() -> None:
    assert set(SessionUpdate.__annotations__) <= SESSION_FIELDS
    assert set(QuestionUpdate.__annotations__) - {f.name for f in fields(Question)} == {"closed_at"}
    assert set(ApprovalUpdate.__annotations__) <= {f.name for f in fields(Approval)}


def test_the_smaller_documents_writes_are_the_maps_they_were() -> None:
    """Each typed write of a thread, feedback, routed post, DM conversation, spend day or running counter is the map
    the layer wrote by hand before (the same fields, the same transforms)."""
    assert thread_listed(open_question_ids=["q1"]) == {"open_question_ids": firestore.ArrayUnion(["q1"])}
    assert thread_unlisted(open_approval_ids=["a1", "a2"]) == {"open_approval_ids": firestore.ArrayRemove(["a1", "a2"])}
    last = LastAnswer(question_id="q1", by="U1", ts="1.5", at=AT)
    assert thread_update(last_answer=last) == {"last_answer": {"question_id": "q1", "by": "U1", "ts": "1.5", "at": AT}}
    assert feedback_update(rating="negative", updated_at=AT) == {"rating": "negative", "updated_at": AT}
    assert routed_update(channel="C1", started_at=AT, ts=None) == {"channel": "C1", "started_at": AT, "ts": None}
    assert dm_conversation_update(thread_ts="1.0", updated_at=AT) == {"thread_ts": "1.0", "updated_at": AT}
    assert spend_added(day="2030-01-01", user="U1", tokens=7) == {
        "day": "2030-01-01",
        "user": "U1",
        "tokens": firestore.Increment(7),
    }
    assert running_recounted(running=1, sessions={"s1": AT}) == {"running": 1, "sessions": {"s1": AT}}
    assert running_released("s1") == {"running": firestore.Increment(-1), "sessions": {"s1": firestore.DELETE_FIELD}}
    with pytest.raises(TypeError, match="open_question_ids is not a list field"):
        thread_listed(open_question_ids="q1")  # type: ignore[arg-type]


def test_a_feedback_document_is_its_record_and_a_change_names_only_its_fields() -> None:
    first = Feedback("s1", "U1", "positive", "C1", "1.0", at=AT, updated_at=AT, day="2030-01-01")
    assert Feedback.from_doc(first.to_doc()) == first
    assert set(FeedbackUpdate.__annotations__) <= {f.name for f in fields(Feedback)}
