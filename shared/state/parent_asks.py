"""A child's question to its parent delivered (flow 10, issue 28.4): recorded as the child's own record
(``child_questions``), never written into the parent's document in a transaction; a paused parent is told at once in
one batch fenced by its update time.
"""

from __future__ import annotations

import random
import time
from datetime import datetime
from enum import StrEnum
from typing import Any

from google.cloud import firestore

from shared.errors import Unavailable
from shared.state import child_questions, parent_questions, results, waiting
from shared.state.children import current_parent, result_note
from shared.state.fenced import FENCE_FAILED
from shared.state.firestore import contended, db, now, session_ref
from shared.state.models import Note, ParentQuestion, SessionStatus
from shared.state.session_model import Session
from shared.state.sessions import UNFINISHED as _UNFINISHED
from shared.state.updates import appended, session_update


class AskOutcome(StrEnum):
    DELIVERED = "delivered"  # a note for a parent that runs, is queued or waits on something else
    RESUMED = "resumed"  # the parent waited for its children: it is queued again to read the question
    NO_PARENT = "no_parent"  # the parent has ended: nobody can answer


_TELL_ATTEMPTS = 8  # fenced writes to a paused parent that something else wrote meanwhile, read again each time


def ask_parent(child: Session, question: ParentQuestion, *, unanswered: str) -> tuple[AskOutcome, str | None]:
    """Deliver a child's question to its parent exactly once, never writing the parent's document in a transaction:
    the question is a record of the child's own (``child_questions.record``), which the session writing the parent's
    transcript reads at its next step commit. A parent paused on a turn is told at once, in one batch fenced by its
    update time as read (``_tell_paused``): a parent that waits for its children is queued again so its model can
    answer (that turn's children go on, each result now reaching it as a note; the results of the ones that already
    ended are added now). A parent whose conversation ended meanwhile leaves the question released (``unanswered``).
    """
    when = now()
    parent = _parent_now(child)
    if parent is None or parent.status.value not in _UNFINISHED:
        return AskOutcome.NO_PARENT, None
    child_questions.record(child, question, when)
    child.parent_question = question
    there, woken = _tell_paused(child, question, when)
    if not there:  # it ended as the question was recorded: nobody reads it (its release may have missed it)
        _release_own(child, question, unanswered)
        return AskOutcome.NO_PARENT, None
    return (AskOutcome.RESUMED, woken) if woken else (AskOutcome.DELIVERED, None)


def _parent_now(child: Session) -> Session | None:
    """The session that writes the child's parent's transcript now (point reads and a query, no transaction)."""
    data = session_ref(child.tree.parent_id or "").get().to_dict()
    return current_parent(None, child, Session.from_doc(data) if data else None)


def _tell_paused(child: Session, question: ParentQuestion, when: datetime) -> tuple[bool, str | None]:
    """Tell a paused parent of the question now (a running or queued one reads its record at its next step commit).
    Returns whether the parent's conversation goes on, and the session woken to read the question (if any)."""
    note = child_questions.question_note(child, question)
    for attempt in range(_TELL_ATTEMPTS):
        parent = _parent_now(child)
        if parent is None or parent.status.value not in _UNFINISHED:
            return False, None
        if parent.status != SessionStatus.PAUSED or not parent.waiting:
            return True, None
        snap = session_ref(parent.session_id).get()
        doc = snap.to_dict() or {}
        if doc.get("status") != SessionStatus.PAUSED.value:
            continue
        if not _unread(child, question):  # its parent read it at a step commit before it paused: told already
            return True, None
        try:
            return True, _tell(child, parent.session_id, doc, fence=snap.update_time, note=note, when=when)
        except FENCE_FAILED:  # written since (woken or released by a sibling's question), or aborted by contention
            time.sleep(random.uniform(0.02, 0.1) * (attempt + 1))  # noqa: S311 - jitter, not secrecy
    raise Unavailable(f"the paused parent of {child.session_id} kept changing while its question was delivered")


def _tell(child: Session, parent_id: str, doc: dict[str, Any], *, fence: datetime, note: Note,
          when: datetime) -> str | None:  # fmt: skip
    """One batch, fenced by the paused parent's update time as read: the question as a note and, if it waits on its
    children, no longer waiting on them (their calls get "still running"; their results come as notes) and woken if
    nothing else is waited on. Each unfinished sibling's release is fenced by its own update time as read, so one
    that ended meanwhile fails the batch and the retry reads its result. Returns the session woken (None: the
    question waits with it)."""
    released = {**doc, "waiting": waiting.release_children(doc)}
    siblings = _read_children(waiting.waited_children(doc))
    batch = db().batch()
    found = None
    if siblings and not waiting.unresolved(None, released, waiting.record_of(released)):
        found = waiting.check(None, parent_id, released)
    extra = session_update(waiting=released["waiting"])
    known = {str(n.get("question_id")) for n in doc.get("notes") or [] if isinstance(n, dict)}
    notes = [note] if note.question_id not in known else []
    unfinished: dict[str, list[str]] = {}  # by the transcript that reads their results now
    for sibling, updated in siblings:
        if sibling.status.value in _UNFINISHED:
            batch.update(session_ref(sibling.session_id), session_update(delegate_blocking=False),
                         option=db().write_option(last_update_time=updated))  # fmt: skip
            unfinished.setdefault(child_questions.reports_to(sibling), []).append(sibling.session_id)
        else:
            notes.append(result_note(sibling))
    for transcript_id, child_ids in unfinished.items():  # one write per document: the parent's is fenced
        if transcript_id == parent_id:
            extra[results.AWAITING] = firestore.ArrayUnion(child_ids)
        else:
            results.expect(batch, transcript_id, child_ids)
    woken = None
    if found is not None:
        woken = waiting.wake(batch, found, trigger_ts=None, user=child.origin.trigger_user, at=when, extra=extra,
                             news=notes, fence=fence)  # fmt: skip
    else:
        fields = {**extra, **session_update(updated_at=when)}
        if notes:
            fields |= appended(notes=list(notes))
        batch.update(session_ref(parent_id), fields, option=db().write_option(last_update_time=fence))
    batch.commit()
    if woken is None and siblings:
        # Its other waits were read before this commit released the children, and whatever resolved one of them
        # meanwhile (an answer, a decision) read the parent before it: neither saw the record complete. Read again
        # now that the release is written; whatever resolves later reads the release and wakes it itself.
        woken = _wake_if_complete(parent_id, user=child.origin.trigger_user, at=when)
    return woken.session_id if woken else None


def _read_children(child_ids: list[str]) -> list[tuple[Session, datetime]]:
    """These children with the update time each was read at (point reads in one batch)."""
    snaps = {s.id: s for s in db().get_all([session_ref(c) for c in child_ids]) if s.exists}
    return [(Session.from_doc(snaps[c].to_dict() or {}), snaps[c].update_time) for c in child_ids if c in snaps]


def _unread(child: Session, question: ParentQuestion) -> bool:
    """Whether the child's question record still holds ``question`` (a step commit that read it deleted it)."""
    data = child_questions.asked_ref(child_questions.reports_to(child), child.session_id).get().to_dict() or {}
    return any(isinstance(n, dict) and n.get("question_id") == question.question_id for n in data.get("notes") or [])


def _wake_if_complete(parent_id: str, *, user: str, at: datetime) -> Session | None:
    """The paused parent woken in a transaction if nothing it waits on is unresolved any more (read after the
    caller's own write: of two resolutions that each read before the other wrote, the later reader wakes it)."""
    ref = session_ref(parent_id)
    seen = ref.get().to_dict()
    if seen is None or seen.get("status") != SessionStatus.PAUSED.value or not waiting.record_of(seen):
        return None
    if waiting.unresolved(None, seen, waiting.record_of(seen)):
        return None

    @firestore.transactional
    def run(transaction: firestore.Transaction) -> Session | None:
        data = ref.get(transaction=transaction).to_dict()
        found = waiting.check(transaction, parent_id, data) if data is not None else None
        return waiting.wake(transaction, found, trigger_ts=None, user=user, at=at) if found else None

    woken: Session | None = contended(run)
    return woken


def _release_own(child: Session, question: ParentQuestion, unanswered: str) -> None:
    """The child's question, recorded as its parent's conversation ended, released as that ending would have."""
    ref = session_ref(child.session_id)

    @firestore.transactional
    def run(transaction: firestore.Transaction) -> None:
        data = ref.get(transaction=transaction, field_paths=["parent_question", "parent_questions"]).to_dict()
        held = parent_questions.of_doc(data or {})
        if parent_questions.pick(held, question.question_id) is not None:
            questions = parent_questions.answered(held, question.question_id, unanswered, released=True)
            update = session_update(parent_questions=questions)
            latest = (data or {}).get("parent_question") or {}
            if latest.get("question_id") == question.question_id:
                update |= session_update(parent_question=next(q for q in questions
                                                              if q.question_id == question.question_id))  # fmt: skip
            transaction.update(ref, update)
            child.parent_questions = questions

    contended(run)
