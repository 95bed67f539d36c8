"""Non-blocking children's results without a hot parent document (issue 28.4).

A non-blocking child's end writes its own document and creates its result record (``results/{child id}`` under
the transcript it reports to), never touching its parent's document. The transcript keeps, on its root document,
the ids of those children whose results it has not read yet (``awaiting_results``); whichever session writes that
transcript reads their records in the transaction of each of its step commits (one batched read, only while the
list is not empty), turns the ones it finds into notes and drops them from the list in the same commit: each
result becomes a note exactly once, and N children ending together never transact on one document. A child that
ends after its parent's transcript stopped being written (its writer ended) queues a continuation carrying its
result; that continuation's claim takes it off the list, or finds the result read already and ends.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from google.cloud import firestore

from shared.state import child_questions
from shared.state.firestore import db, session_ref
from shared.state.models import Note, NoteKind, SessionStatus
from shared.state.session_model import Session

NO_RESULT = "the helper ended without a result"  # what a parent hears of a child that ended with no text
RESULTS = "results"  # subcollection of a transcript's root: its non-blocking children's result records
AWAITING = "awaiting_results"  # on a transcript's root: its non-blocking children whose results it has not read


def expect(transaction: firestore.Transaction | firestore.WriteBatch, transcript_id: str,
           child_ids: list[str]) -> None:  # fmt: skip
    """The transcript ``transcript_id`` will read these children's results when they end."""
    if child_ids:
        transaction.update(session_ref(transcript_id), {AWAITING: firestore.ArrayUnion(child_ids)})


def forget(transaction: firestore.Transaction | firestore.WriteBatch, transcript_id: str,
           child_ids: list[str]) -> None:  # fmt: skip
    """These children's results no longer come as notes (they were read, or the parent waits for them again)."""
    if child_ids:
        transaction.update(session_ref(transcript_id), {AWAITING: firestore.ArrayRemove(child_ids)})


def result_note(child: Session, *, result: str | None = None, status: SessionStatus | None = None) -> Note:
    """A child's result as news for its parent (``matched_option`` holds how it ended)."""
    text = result if result is not None else child.result or child.error or ""
    if not text.strip():
        text, status = f"(error: {NO_RESULT})", SessionStatus.FAILED
    return Note(kind=NoteKind.CHILD_RESULT, text=text, user="", ts=child.session_id, question_id=child.session_id,
                question=child.text, matched_option=(status or child.status).value)  # fmt: skip


@dataclass(frozen=True)
class Collected:
    """What one step commit read of its transcript's awaited children (and of its children's questions)."""

    notes: list[Note]  # the results of those that ended and the questions asked, to add to the session's notes
    done: list[str]  # the ids to drop from the list (ended, or waited for again by their parent)
    asked: child_questions.Read = field(default_factory=lambda: child_questions.Read([], [], []))  # questions read

    @property
    def records(self) -> bool:
        """Whether any record was read (a result or a question): the commit that read it deletes or drops it."""
        return bool(self.done or self.asked.read)


def awaiting_of(doc: dict[str, Any] | None) -> list[str]:
    return [str(c) for c in (doc or {}).get(AWAITING) or []]


def result_ref(transcript_id: str, child_id: str) -> firestore.DocumentReference:
    """A non-blocking child's result record, under the transcript it reports to (written once, by its end)."""
    ref: firestore.DocumentReference = session_ref(transcript_id).collection(RESULTS).document(child_id)
    return ref


def record(transaction: firestore.Transaction, child: Session, note: Note, at: datetime) -> None:
    """Store a non-blocking child's result, in the transaction that stores its end (``create()``: once)."""
    reports_to = child.tree.parent_transcript or child.tree.parent_id
    if reports_to:
        transaction.create(result_ref(reports_to, child.session_id), {"note": note.to_doc(), "at": at})


def collect(transaction: firestore.Transaction, transcript_id: str, awaiting: list[str], known: list[Note], *,
            asking: list[str] | None = None) -> Collected:  # fmt: skip
    """The results recorded so far of ``awaiting`` and the questions ``asking`` children recorded (read in
    ``transaction``, one batched read of both kinds of record, which no other transaction writes once created), as
    notes; a result or question already among ``known`` (a note a late continuation handed over, or one this
    commit consumes) is dropped without a second note."""
    asking = asking or []
    if not awaiting and not asking:
        return Collected([], [])
    refs = [result_ref(transcript_id, c) for c in awaiting]
    refs += [child_questions.asked_ref(transcript_id, c) for c in asking]
    snaps = list(db().get_all(refs, transaction=transaction))
    questions = [s for s in snaps if s.reference.parent.id == child_questions.ASKED]
    seen = {n.question_id for n in known if n.kind == NoteKind.CHILD_RESULT}
    notes: list[Note] = []
    done: list[str] = []
    for snap in snaps:
        data = snap.to_dict() if snap.exists and snap.reference.parent.id == RESULTS else None
        if data is None:
            continue  # still running (or a question record)
        done.append(snap.id)
        note = Note.from_doc(data["note"])
        if note.question_id not in seen:
            notes.append(note)
    asked = child_questions.read(questions, known)
    return Collected([*asked.notes, *notes], done, asked)


def drop(transaction: firestore.Transaction, transcript_id: str, collected: Collected, *,
         separately: bool) -> dict[str, Any]:  # fmt: skip
    """Take the children read off the transcript's lists and delete the question records read: the lists' update in
    a write of its own (``separately``), else as the fields to add to the caller's one update of the root document.
    A child whose result was read has ended: it will not ask again either."""
    for child_id in collected.asked.read:
        transaction.delete(child_questions.asked_ref(transcript_id, child_id))
    fields: dict[str, Any] = {}
    if collected.done:
        fields[AWAITING] = firestore.ArrayRemove(collected.done)
    if gone := sorted({*collected.done, *collected.asked.gone}):
        fields[child_questions.MAY_ASK] = firestore.ArrayRemove(gone)
    if fields and separately:
        transaction.update(session_ref(transcript_id), fields)
        return {}
    return fields
