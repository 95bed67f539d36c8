"""Delegated children (flow 10): a child's end is stored and reported to its parent in one transaction.

A blocking child whose siblings (the other blocking children of the same parent turn) have all ended resumes the
parent: a parent paused on them is queued again, a parent that still runs gets a note (its pause finds it and it
carries on in place). Racing endings make one resumption: each ending reads its siblings and its parent in its
transaction, so exactly one finds them all ended and the parent still paused. A non-blocking child's result is a
note for a parent that runs or waits, and a continuation of the parent's transcript if the parent has ended.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from google.cloud import firestore

from shared.state import ids
from shared.state.firestore import db, now, session_ref, step_ref
from shared.state.models import (
    Note,
    NoteKind,
    Session,
    SessionKind,
    SessionStatus,
    Step,
)
from shared.state.steps import LeaseLost, NotesPending

# A child in one of these statuses has not ended: its parent waits for it.
_UNFINISHED = frozenset({SessionStatus.QUEUED.value, SessionStatus.RUNNING.value, SessionStatus.PAUSED.value})


def get_children(child_ids: list[str]) -> list[Session]:
    """These children, in the order given (point reads)."""
    found = {s.id: Session.from_doc(s.to_dict() or {}) for s in db().get_all([session_ref(c) for c in child_ids])
             if s.exists}  # fmt: skip
    return [found[c] for c in child_ids if c in found]


def set_siblings(child_ids: list[str]) -> None:
    """Record on each blocking child of a turn which children its parent waits for (before any of them runs)."""
    batch = db().batch()
    for child_id in child_ids:
        batch.update(session_ref(child_id), {"sibling_ids": child_ids})
    batch.commit()


@dataclass(frozen=True)
class Finished:
    started: Session | None = None  # the parent, queued again, or a continuation of its transcript: queue its task


def finish(child: Session, step: Step | None, *, status: SessionStatus, result: str, error: str | None = None,
           wait_for_notes: bool = True) -> Finished:  # fmt: skip
    """Store the child's last step and its end (fenced by its lease), and tell its parent, in one transaction."""
    ref = session_ref(child.session_id)
    parent_ref = session_ref(child.parent_session_id or "")
    when = now()

    @firestore.transactional
    def run(transaction: firestore.Transaction) -> Finished:
        current = ref.get(transaction=transaction, field_paths=["worker", "status", "notes"]).to_dict() or {}
        if current.get("worker") != child.worker or current.get("status") != SessionStatus.RUNNING.value:
            raise LeaseLost(f"child is now {current.get('status')} under worker {current.get('worker')}")
        pending = [Note.from_doc(n) for n in current.get("notes") or []]
        if pending and wait_for_notes and status == SessionStatus.DONE:
            raise NotesPending(pending)
        parent_doc = parent_ref.get(transaction=transaction).to_dict()
        parent = Session.from_doc(parent_doc) if parent_doc else None
        siblings = [s for s in child.sibling_ids if s != child.session_id]
        ended = all(
            (snap.to_dict() or {}).get("status") not in _UNFINISHED
            for snap in (session_ref(s).get(transaction=transaction, field_paths=["status"]) for s in siblings)
        )
        started = _report(transaction, child, parent, ended, result=result, status=status, when=when)
        if step is not None:
            transaction.create(step_ref(child.transcript, step.seq), step.to_doc())
        fields: dict[str, Any] = {"status": status.value, "result": result, "error": error, "lease_until": None,
                                  "ended_at": when, "updated_at": when, "notes": []}  # fmt: skip
        if step is not None:
            fields["next_seq"] = step.seq + 1
        transaction.update(ref, fields)
        return Finished(started)

    finished: Finished = run(db().transaction())
    child.apply({"status": status.value, "result": result, "error": error})
    return finished


def _report(transaction: firestore.Transaction, child: Session, parent: Session | None, ended: bool, *,
            result: str, status: SessionStatus, when: datetime) -> Session | None:  # fmt: skip
    """What the child's end does to its parent (reads first, then writes, as a transaction requires)."""
    if parent is None:
        return None
    parent_ref = session_ref(parent.session_id)
    if child.delegate_blocking:
        if not ended:
            return None  # a sibling still works: the last to end resumes the parent
        if parent.status == SessionStatus.PAUSED and set(parent.child_ids) == set(child.sibling_ids):
            # Queued again, the parent itself resumes (it keeps its identity, its budget and its own parent);
            # only the ending that finds it paused does this.
            transaction.update(parent_ref, {"status": SessionStatus.QUEUED.value, "started_at": None,
                                            "updated_at": when})  # fmt: skip
            parent.status = SessionStatus.QUEUED
            return parent
        if parent.status == SessionStatus.RUNNING:  # it has not paused yet: its pause finds this and goes on
            note = Note(kind=NoteKind.DECISION, text=status.value, user="", ts=child.session_id,
                        question_id=child.session_id)  # fmt: skip
            transaction.update(parent_ref, {"notes": firestore.ArrayUnion([note.to_doc()])})
        return None
    note = Note(kind=NoteKind.CHILD_RESULT, text=result, user="", ts=child.session_id, question_id=child.session_id,
                question=child.text, matched_option=status.value)  # fmt: skip
    if parent.status in {SessionStatus.RUNNING, SessionStatus.PAUSED, SessionStatus.QUEUED}:
        transaction.update(parent_ref, {"notes": firestore.ArrayUnion([note.to_doc()])})
        return None
    if parent.parent_session_id:
        return None  # a child that ended has reported already: news after that has nobody to go to
    later = Session(
        session_id=ids.child_result_id(child.session_id), kind=SessionKind.CONTINUATION, channel=parent.channel,
        thread_ts=parent.thread_ts, trigger_ts=parent.trigger_ts, trigger_user=parent.trigger_user,
        text=f"the result of {child.session_id}", created_at=when, asker_session_id=parent.session_id,
        transcript_id=parent.transcript, parent_session_id=parent.parent_session_id, depth=parent.depth,
        late_note=note, trace_id=parent.trace_id,
    )  # fmt: skip
    if session_ref(later.session_id).get(transaction=transaction).exists:
        return None
    transaction.create(session_ref(later.session_id), later.to_doc())
    return later
