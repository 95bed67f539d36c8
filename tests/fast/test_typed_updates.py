"""The Firestore layer's typed updates: what each writes, and that each names only its document's fields
(pure: no stack)."""

from __future__ import annotations

from dataclasses import fields
from datetime import UTC, datetime

import pytest
from google.cloud import firestore

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
    QuestionUpdate,
    appended,
    approval_update,
    question_update,
    removed,
    session_update,
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
