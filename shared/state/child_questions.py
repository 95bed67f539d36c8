"""A child's question to its parent without a hot parent document (issue 28.4).

A child that asks its parent (``ask_parent``) writes its question into a record of its own, ``asked/{child id}``
under the transcript it reports to (created with ``create()``, with the child's ``parent_question``, in one
transaction on the child's own documents), never into its parent's document: N children asking at once never
transact on one document. The transcript's root lists, from each child's creation on, the children that may ask it
(``may_ask``); whichever session writes that transcript reads their records in the transaction of each of its
step commits, in the one batched read that reads its children's results (``results.collect``), turns each question
it finds into a note and deletes the record in the same commit: each question becomes a note exactly once, and
the child's next question (after this one is answered) creates the record again. A blocking child's end marks its
record ``ended`` (a non-blocking child's result record says so already), and the reader drops it from the list.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from google.cloud import firestore

from shared.state import parent_questions
from shared.state.firestore import contended, db, session_ref
from shared.state.models import Note, NoteKind, ParentQuestion
from shared.state.session_model import Session
from shared.state.updates import session_update

ASKED = "asked"  # subcollection of a transcript's root: one record per child, its question not read yet
MAY_ASK = "may_ask"  # on a transcript's root: its children that may ask it (and have not ended)
ENDED = "ended"  # on a record: the child ended (it will not ask again)


def may_ask_of(doc: dict[str, Any] | None) -> list[str]:
    return [str(c) for c in (doc or {}).get(MAY_ASK) or []]


def reports_to(child: Session) -> str:
    """The transcript a child asks (and reports to)."""
    return child.tree.parent_transcript or child.tree.parent_id or ""


def asked_ref(transcript_id: str, child_id: str) -> firestore.DocumentReference:
    ref: firestore.DocumentReference = session_ref(transcript_id).collection(ASKED).document(child_id)
    return ref


def question_note(child: Session, question: ParentQuestion) -> Note:
    """A child's question as news for its parent."""
    return Note(kind=NoteKind.CHILD_QUESTION, text=question.text, user=child.session_id, ts=question.question_id,
                question_id=question.question_id, question=child.text)  # fmt: skip


def record(child: Session, question: ParentQuestion, at: datetime) -> bool:
    """Store the child's question, once: its record (created with ``create()``, or added to when a question of the
    same turn is in it unread) and its ``parent_question``, in one transaction on those two documents (neither is
    its parent's). False if this call asked already (a re-run after a crash)."""
    own = session_ref(child.session_id)
    ref = asked_ref(reports_to(child), child.session_id)
    note = question_note(child, question).to_doc()

    @firestore.transactional
    def run(transaction: firestore.Transaction) -> bool:
        snaps = {s.reference.path: s for s in db().get_all([own, ref], transaction=transaction)}
        current = snaps[own.path].to_dict() or {}
        held = parent_questions.of_doc(current)
        if any(q.question_id == question.question_id for q in held):
            return False
        if snaps[ref.path].exists:  # unread: another question of the same turn (its sibling ask_parent call)
            transaction.update(ref, {"notes": firestore.ArrayUnion([note]), "at": at})
        else:
            transaction.create(ref, {"notes": [note], "at": at})
        questions = parent_questions.added(held, question)
        transaction.update(own, session_update(parent_question=question, updated_at=at,
                                               parent_questions=questions))  # fmt: skip
        child.parent_questions = questions
        return True

    asked: bool = contended(run)
    return asked


def ended(transaction: firestore.Transaction, child: Session) -> None:
    """A blocking child's end, in its ending transaction: its record says it will not ask again (a question it
    left unread stays readable)."""
    if transcript := reports_to(child):
        transaction.set(asked_ref(transcript, child.session_id), {ENDED: True}, merge=True)


def forget(transaction: firestore.Transaction, transcript_id: str, child_id: str) -> None:
    """The child's question no longer needs reading (its conversation ended and released it): its next question
    starts a record of its own."""
    transaction.delete(asked_ref(transcript_id, child_id))


@dataclass(frozen=True)
class Read:
    """What a step commit found in its transcript's question records."""

    notes: list[Note]  # the questions not known yet, as notes
    read: list[str]  # the children whose question records to delete (read now)
    gone: list[str]  # the children that ended: off the list


def read(snaps: list[Any], known: list[Note]) -> Read:
    """The question records as read (``snaps``); a question already among ``known`` (a note that reached the
    session another way, or one it consumed in this commit) is read without a second note."""
    seen = {n.question_id for n in known if n.kind == NoteKind.CHILD_QUESTION}
    notes: list[Note] = []
    read_: list[str] = []
    gone: list[str] = []
    for snap in snaps:
        data = snap.to_dict() if snap.exists else None
        if data is None:
            continue
        if data.get(ENDED):
            gone.append(snap.id)
        if data.get("notes"):
            read_.append(snap.id)
        for note in (Note.from_doc(n) for n in data.get("notes") or []):
            if note.question_id not in seen:
                notes.append(note)
                seen.add(note.question_id)
    return Read(notes, read_, gone)
