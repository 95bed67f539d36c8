"""A session's typed parts keep the stored document flat (pure: no stack)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from google.cloud import firestore

from shared.state.models import Note, NoteKind, SessionKind, SessionStatus
from shared.state.origin import continuing
from shared.state.session_model import SESSION_FIELDS, Lease, Session, SessionUpdate, stored

AT = datetime(2030, 1, 1, tzinfo=UTC)


def old_document() -> dict[str, Any]:
    """A session as stored before the parts (and before request_ts and the waiting record were kept)."""
    return {
        "session_id": "c1", "kind": "child", "channel": "C1", "thread_ts": "1.0", "trigger_ts": "1.5",
        "trigger_user": "U1", "text": "look it up", "created_at": AT, "updated_at": AT, "status": "running",
        "worker": "w1",
        "lease_until": AT + timedelta(seconds=60), "lease_task": "t1", "lease_attempt": 2, "takeovers": 1,
        "turns": 3, "tool_calls": 4, "tokens": {"prompt": 10}, "max_turns": 5, "max_tool_calls": 6,
        "parent_session_id": "p1", "root_session_id": "p1", "depth": 1, "delegate_seq": 7, "delegate_index": 1,
        "delegate_blocking": False, "sibling_ids": ["c0", "c1"], "stream_ts": "2.0", "answer_ts": None,
        "notes": [{"kind": "steer", "text": "hurry", "user": "U2", "ts": "3.0"}],
        "some_field_of_the_future": 1,
    }  # fmt: skip


def test_a_document_stored_before_the_parts_loads_into_them() -> None:
    session = Session.from_doc(old_document())
    assert (session.origin.channel, session.origin.thread_ts, session.origin.trigger_user) == ("C1", "1.0", "U1")
    assert session.origin.request_ts is None
    assert session.lease == Lease(until=AT + timedelta(seconds=60), worker="w1", task="t1", attempt=2, takeovers=1)
    assert (session.limits.turns, session.limits.tool_calls, session.limits.max_turns) == (3, 4, 5)
    assert (session.tree.parent_id, session.tree.root_id, session.tree.delegate_blocking) == ("p1", "p1", False)
    assert session.tree.sibling_ids == ["c0", "c1"]
    assert session.stream.ts == "2.0"
    assert session.status is SessionStatus.RUNNING
    assert session.kind is SessionKind.CHILD
    assert session.notes == [Note(kind=NoteKind.STEER, text="hurry", user="U2", ts="3.0")]
    assert session.waiting == []
    assert session.tree_root == "p1"


def test_the_stored_document_keeps_one_flat_field_per_value() -> None:
    session = Session.from_doc(old_document())
    doc = session.to_doc()
    assert set(doc) == SESSION_FIELDS
    assert not {"origin", "lease", "limits", "tree", "stream"} & set(doc)
    kept = {k: v for k, v in old_document().items() if k != "some_field_of_the_future"}
    assert {k: doc[k] for k in kept} == kept  # every value under its old name, enums and notes as stored
    assert Session.from_doc(doc) == session


def test_a_commit_applies_flat_names_to_the_parts() -> None:
    session = Session.from_doc(old_document())
    update: SessionUpdate = {"status": SessionStatus.PAUSED, "lease_until": None, "tree_status_ts": "9.0",
                             "turns": 4, "notes": [], "error": "x"}  # fmt: skip
    written = stored(update)
    assert written["status"] == "paused"  # the enum's value: what Firestore stores and queries compare
    session.apply({**written, "takeovers": firestore.Increment(1), "unknown": 1})
    assert session.status is SessionStatus.PAUSED
    assert (session.lease.until, session.tree.status_ts, session.limits.turns) == (None, "9.0", 4)
    assert session.lease.takeovers == 1  # a transform has no value here: left to the caller
    assert (session.notes, session.error) == ([], "x")


def test_a_new_session_takes_typed_flat_fields() -> None:
    session = Session.new(session_id="s", kind=SessionKind.MENTION, channel="C", thread_ts="1.0", trigger_ts="1.0",
                          trigger_user="U", text="x", created_at=AT, parent_session_id="p", stream_ts="2")  # fmt: skip
    assert (session.tree.parent_id, session.stream.ts, session.status) == ("p", "2", SessionStatus.QUEUED)
    assert stored({"notes": [Note(kind=NoteKind.STEER, text="t", user="U", ts="1.0")]}) == {
        "notes": [{"kind": "steer", "text": "t", "user": "U", "ts": "1.0"}]
    }


def test_a_continuation_of_a_session_itself_copies_its_thread_transcript_requester_trace_and_request() -> None:
    """``origin.continuing``: the one copy both continuations of a session's own transcript make (a turn whose waits
    are all resolved, a late child's result), the fields each wrote out by hand before."""
    asker = Session.new(session_id="s2", kind=SessionKind.CONTINUATION, channel="C", thread_ts="1.0", trigger_ts="1.7",
                        trigger_user="U2", text="x", created_at=AT, transcript_id="s1", asker_session_id="s1",
                        requested_by="U1", trace_id="t1", request_ts="1.0")  # fmt: skip
    assert continuing(asker) == {
        "channel": "C", "thread_ts": "1.0", "asker_session_id": "s2", "requested_by": "U1", "transcript_id": "s1",
        "trace_id": "t1", "request_ts": "1.0",
    }  # fmt: skip
    later = Session.new(session_id="s3", kind=SessionKind.CONTINUATION, **continuing(asker), trigger_ts="1.9",
                        trigger_user="U3", text="y", created_at=AT)  # fmt: skip
    assert (later.transcript, later.requester, later.request_message) == ("s1", "U1", "1.0")
