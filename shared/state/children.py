"""Delegated children (flow 10): a child's end, what it tells its parent, and the tree's budget.

A blocking child's end writes only its own document. After it is stored, the child reads its siblings (the other
blocking children of the same parent turn) and its parent: if the parent waits for them and all have ended, it
queues the parent's task, named after the parent's step count, so endings that race queue it once. The parent's
claim accepts a paused parent only when every child it waits for has ended, and a parent that has not paused yet
finds them ended in its pause commit and carries on in place: exactly one resumption, and no transaction of one
child ever locks a sibling's or the parent's document. A non-blocking child's result is a note for a parent that
runs or waits, and a continuation of the parent's transcript if the parent has ended.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from google.cloud import firestore
from google.cloud.firestore_v1.base_query import FieldFilter

from shared.errors import Refused
from shared.state import (
    child_end,
    child_questions,
    ids,
    parent_questions,
    results,
    sessions,
    step_fence,
    tree_view,
    waiting,
)
from shared.state.firestore import SESSIONS, contended, db, now, session_ref, step_ref
from shared.state.models import Note, NoteKind, ParentQuestion, SessionKind, SessionStatus, Step, WaitKind
from shared.state.origin import continuing, same_thread
from shared.state.session_model import Session
from shared.state.steps import LeaseLost, NotesPending
from shared.state.updates import appended, session_update

_UNFINISHED = sessions.UNFINISHED  # a child in one of these has not ended
NO_RESULT = results.NO_RESULT


def get_children(child_ids: list[str]) -> list[Session]:
    """These children, in the order given (point reads)."""
    found = {s.id: Session.from_doc(s.to_dict() or {}) for s in db().get_all([session_ref(c) for c in child_ids])
             if s.exists}  # fmt: skip
    return [found[c] for c in child_ids if c in found]


def child_session(parent: Session, *, seq: int, index: int, task: str, blocking: bool, siblings: list[str],
                  at: datetime) -> Session:  # fmt: skip
    """A child the parent's ``delegate`` call starts: its own transcript and budget, in the parent's thread."""
    child_id = ids.child_id(parent.session_id, seq, index)
    return Session.new(
        session_id=child_id,
        kind=SessionKind.CHILD,
        **same_thread(parent),
        requested_by=parent.requester,
        text=task,
        created_at=at,
        transcript_writer=child_id,
        parent_session_id=parent.session_id,
        parent_transcript=parent.transcript,
        depth=parent.tree.depth + 1,
        delegate_seq=seq,
        delegate_index=index,
        delegate_blocking=blocking,
        sibling_ids=siblings if blocking else [],
        root_session_id=parent.tree_root,
    )


@dataclass(frozen=True)
class TreeBudget:
    """A tree's budget: what the whole tree may use, what its root keeps for itself, and a child's most."""

    turns: int
    tool_calls: int
    root_turns: int
    root_tool_calls: int
    child_turns: int
    child_tool_calls: int


class TreeBudgetSpent(Refused):
    """Every turn (or tool call) of the tree's budget is allotted: no child can start."""


def create_child(child: Session, budget: TreeBudget) -> Session:
    """Create this child once, with its allotment taken from its tree's budget in the same transaction (a second
    call with the same id returns the stored child and takes nothing)."""
    ref = session_ref(child.session_id)
    root_ref = session_ref(child.tree_root)

    @firestore.transactional
    def run(transaction: firestore.Transaction) -> Session:
        snap = ref.get(transaction=transaction)
        if snap.exists:
            return Session.from_doc(snap.to_dict() or {})
        # What is allotted and not given back: the root's allotments less the returns its ended children stored
        # in the tree's view (``tree_view.ended``), one batched read.
        reserved = tree_view.allotted(child.tree_root, transaction)
        turns_left = budget.turns - budget.root_turns - reserved["turns"]
        calls_left = budget.tool_calls - budget.root_tool_calls - reserved["tool_calls"]
        if turns_left < 1:
            raise TreeBudgetSpent(f"all {budget.turns} model turns of this task's tree are allotted")
        if calls_left < 1 and budget.child_tool_calls > 0:
            raise TreeBudgetSpent(f"all {budget.tool_calls} tool calls of this task's tree are allotted")
        child.limits.max_turns = min(budget.child_turns, turns_left)
        child.limits.max_tool_calls = min(budget.child_tool_calls, max(0, calls_left))
        transaction.create(ref, child.to_doc())
        allotted = {
            "tree_reserved.turns": child.limits.max_turns,
            "tree_reserved.tool_calls": child.limits.max_tool_calls,
        }
        update: dict[str, Any] = {field: firestore.Increment(count) for field, count in allotted.items()}
        reports_to = child_questions.reports_to(child)
        # Its transcript reads its questions (and, if it does not wait for it, its result) from records of its own.
        expects = {child_questions.MAY_ASK: firestore.ArrayUnion([child.session_id])}
        if not child.tree.delegate_blocking:
            expects[results.AWAITING] = firestore.ArrayUnion([child.session_id])
        if reports_to == child.tree_root:
            update |= expects
        elif reports_to:
            transaction.update(session_ref(reports_to), expects)
        transaction.update(root_ref, update)
        return child

    created: Session = contended(run)
    return created


def unfinished_of(parent_id: str) -> list[str]:
    """The children ``parent_id`` delegated to that have not ended."""
    return [c.session_id for c in sessions.children_of(parent_id) if c.status.value in _UNFINISHED]


def rejoin(child_ids: list[str]) -> list[str]:
    """Make the unfinished ones of these children blocking again, each knowing the others, so the last to end
    queues their parent (a child that wants to report while its own children still run waits for them). Returns
    those still unfinished; one transaction, so none ends half-counted."""
    refs = [session_ref(c) for c in child_ids]

    @firestore.transactional
    def run(transaction: firestore.Transaction) -> list[str]:
        fields = ["status", "parent_transcript", "parent_session_id"]
        snaps = [ref.get(transaction=transaction, field_paths=fields) for ref in refs]
        still = [s.id for s in snaps if (s.to_dict() or {}).get("status") in _UNFINISHED]
        for child_id in still:
            transaction.update(session_ref(child_id), session_update(delegate_blocking=True, sibling_ids=still))
        found = [s.to_dict() or {} for s in snaps if s.id in still]
        reports_to = {str(d.get("parent_transcript") or d.get("parent_session_id") or "") for d in found} - {""}
        for transcript_id in reports_to:  # their ends resume their parent now: no result record to wait for
            results.forget(transaction, transcript_id, still)
        return still

    unfinished: list[str] = contended(run)
    return unfinished


def set_siblings(child_ids: list[str]) -> None:
    """Record on each blocking child of a turn which children its parent waits for (before any of them runs)."""
    batch = db().batch()
    for child_id in child_ids:
        batch.update(session_ref(child_id), session_update(sibling_ids=child_ids))
    batch.commit()


@dataclass(frozen=True)
class Finished:
    started: Session | None = None  # a continuation of the parent's transcript (a late result): queue its task
    blocking: bool = False  # its parent may wait for it: see ``parent_to_wake``


def finish(child: Session, step: Step | None, *, status: SessionStatus, result: str, error: str | None = None,
           wait_for_notes: bool = True, asking: str | None = None,
           paused_before: datetime | None = None) -> Finished:  # fmt: skip
    """Store the child's last step and its end, fenced by its lease, in one transaction; a non-blocking child's
    result reaches its parent in the same transaction.

    A blocking child writes only its own document (and adds to its tree's counters without reading them): children
    of one turn end together, and a transaction each that read and wrote their parent would lock each other out.
    Whether the parent resumes is decided after, from the children's stored ends (``parent_to_wake``), and by the
    parent's claim. ``asking``: a child paused on this question to its parent is ended by the sweep, fenced by the
    question still open instead of a lease. ``paused_before``: a child paused with nothing open that cannot resume
    is ended by the sweep, fenced by its being paused still and not updated since then (the sweep's check).
    """
    ref = session_ref(child.session_id)
    when = now()
    end = child_end.End(child, status, result, error, when)

    @firestore.transactional
    def run(transaction: firestore.Transaction) -> Finished | NotesPending:
        fields = ["worker", "status", "notes", "delegate_blocking", "turns", "tool_calls", "tokens", "parent_question",
                  "parent_questions", "updated_at", results.AWAITING, child_questions.MAY_ASK]  # fmt: skip
        current = ref.get(transaction=transaction, field_paths=fields).to_dict() or {}
        if asking is not None and not _still_asking(current, asking):
            raise LeaseLost(f"child is now {current.get('status')}: its question {asking} is no longer waited on")
        if paused_before is not None and not _paused_since(current, paused_before):
            raise LeaseLost(f"child is now {current.get('status')}, updated since the sweep's check")
        running = current.get("worker") == child.lease.worker and current.get("status") == SessionStatus.RUNNING.value
        if asking is None and paused_before is None and not running:
            raise LeaseLost(f"child is now {current.get('status')} under worker {current.get('worker')}")
        pending = [Note.from_doc(n) for n in current.get("notes") or []]
        collected = results.collect(transaction, child.session_id, results.awaiting_of(current), pending,
                                    asking=child_questions.may_ask_of(current))  # fmt: skip
        pending += collected.notes
        dropped = results.drop(transaction, child.session_id, collected, separately=False)
        if pending and wait_for_notes and status == SessionStatus.DONE:
            if collected.records:  # the records read are kept as notes: this commit stores only them
                transaction.update(ref, {**session_update(notes=list(pending), updated_at=when), **dropped})
            return NotesPending(pending)
        # Read here, not from the claim: a sibling's question to the parent may have released this child meanwhile.
        blocking = bool(current.get("delegate_blocking", child.tree.delegate_blocking))
        used = {"turns": int(current.get("turns") or 0), "tool_calls": int(current.get("tool_calls") or 0)}
        end.write(transaction, blocking=blocking, **used, tokens=current.get("tokens") or {})
        if step is not None:
            transaction.create(step_ref(child.transcript, step.seq), step.to_doc())
        transaction.update(ref, {**end.updates(step), **dropped})
        return Finished(None, blocking)

    # Its own run's end, when nothing was written since its claim saw it settled: one commit that reads nothing.
    own = asking is None and paused_before is None and step is not None  # not the sweep's end of a dead worker's
    fenced = own and step_fence.commit(child, step, end.updates(step), [end], plain=True, ends=True)
    finished: Finished | NotesPending = Finished(None, end.blocking) if fenced else contended(run)
    if isinstance(finished, NotesPending):
        raise finished
    child.apply(session_update(status=status, result=result, error=error))
    if not finished.blocking:  # its result is its own document now: the parent's transcript reads it
        return Finished(report_late(child, when=when), False)
    return finished


def report_late(child: Session, *, when: datetime | None = None) -> Session | None:
    """After a non-blocking child's end is stored: if the transcript it reports to has no session left to read its
    result (its writer ended), a continuation of that transcript carrying the result, created once (the caller
    queues its task). Reads only, outside any transaction: the continuation's claim decides, from the root's list,
    whether the result is still unread (``sessions.claim_session``). A delivery of an ended child's task calls this
    again, so a worker that died between the end and this still leaves the result to someone."""
    root_id = child.tree.parent_transcript or child.tree.parent_id
    if not root_id:
        return None
    root = session_ref(root_id).get().to_dict()
    if root is None or child.session_id not in results.awaiting_of(root):
        return None  # read already (or its parent waits for it again)
    writer_id = root.get("transcript_writer") or root_id
    data = root if writer_id == root_id else session_ref(writer_id).get().to_dict()
    parent = Session.from_doc(data) if data else None
    # A writer whose paused turn woke hands the transcript to that turn's continuation, which reads it once it claims
    # (a late-result continuation beside it would take the transcript before the turn got its responses).
    parent = _resuming(None, parent) if parent is not None else None
    if parent is None or parent.status.value in _STILL_READING:
        return None  # the writer's next step commit reads it
    return _late_continuation(child, parent, when=when or now())


_STILL_READING = {SessionStatus.RUNNING.value, SessionStatus.PAUSED.value, SessionStatus.QUEUED.value}


def _still_asking(current: dict[str, Any], question_id: str) -> bool:
    """The child is paused on this question to its parent, still unanswered."""
    paused = current.get("status") == SessionStatus.PAUSED.value
    return paused and parent_questions.pick(parent_questions.of_doc(current), question_id) is not None


def _paused_since(current: dict[str, Any], before: datetime) -> bool:
    """The child is paused still, and was not updated after ``before``."""
    updated = current.get("updated_at")
    paused = current.get("status") == SessionStatus.PAUSED.value
    return paused and updated is not None and updated <= before


def remind_parent(child: Session, at: datetime) -> bool:
    """Deliver a paused child's open blocking questions not reminded yet to its parent's conversation again, once
    each (the sweep's reminder): marked on the questions in the same transaction. False if they were answered or
    reminded meanwhile."""
    ref = session_ref(child.session_id)

    @firestore.transactional
    def run(transaction: firestore.Transaction) -> bool:
        data = ref.get(transaction=transaction).to_dict() or {}
        held = parent_questions.of_doc(data)
        due = [q for q in parent_questions.still_open(held)
               if q.blocking and q.reminded_at is None and _still_asking(data, q.question_id)]  # fmt: skip
        if not due:
            return False
        parent_data = session_ref(child.tree.parent_id or "").get(transaction=transaction).to_dict()
        parent = current_parent(transaction, child, Session.from_doc(parent_data) if parent_data else None)
        if parent is not None and parent.status.value in _UNFINISHED:
            notes = [Note(kind=NoteKind.CHILD_QUESTION, text=f"{asked.text} (a reminder: still waiting for your "
                          "answer_child)", user=child.session_id, ts=f"{asked.question_id}:reminder",
                          question_id=asked.question_id, question=child.text) for asked in due]  # fmt: skip
            transaction.update(session_ref(parent.session_id), appended(notes=notes))
        ids_due = {q.question_id for q in due}
        reminded = [ParentQuestion(**{**q.to_doc(), "reminded_at": at}) if q.question_id in ids_due else q
                    for q in held]  # fmt: skip
        update = session_update(parent_questions=reminded)
        if (data.get("parent_question") or {}).get("question_id") in ids_due:
            update["parent_question.reminded_at"] = at
        transaction.update(ref, update)
        return True

    reminded: bool = contended(run)
    return reminded


def parent_to_wake(child: Session) -> Session | None:
    """After a blocking child's end: its parent, woken if its waiting record names this child and everything in it
    is resolved now (one transaction on the parent). Every ending asks after its own is stored, so of children
    ending together the last always finds them all ended (two that find it wake it once)."""
    data = session_ref(child.tree.parent_id or "").get().to_dict()
    if data is not None and waiting.waits_on(data, WaitKind.CHILD, child.session_id):
        return waiting.wake_after_child(child, now())
    return None


def _late_continuation(child: Session, parent: Session, *, when: datetime) -> Session | None:
    """A continuation of an ended parent's transcript that opens with this child's result (created once)."""
    if parent.tree.parent_id:
        return None  # a child that ended has reported already: news after that has nobody to go to
    if child.status == SessionStatus.STOPPED or parent.status in {SessionStatus.STOPPED, SessionStatus.FAILED}:
        return None  # a stopped tree, or a parent that failed (it stopped its children): nothing to report
    note = results.result_note(child)
    later = Session.new(
        session_id=ids.child_result_id(child.session_id), kind=SessionKind.CONTINUATION, **continuing(parent),
        trigger_ts=parent.origin.trigger_ts, trigger_user=parent.origin.trigger_user,
        text=f"the result of {child.session_id}", created_at=when, parent_session_id=parent.tree.parent_id,
        depth=parent.tree.depth, late_note=note,
    )  # fmt: skip
    return sessions.create_session(later)


def _release_in(transaction: firestore.Transaction, siblings: list[Session]) -> list[Note]:
    """A parent no longer waits for these children: each unfinished one will send its result as a note; the
    results of the ended ones are returned, as notes to add now."""
    notes = []
    unfinished: dict[str, list[str]] = {}  # by the transcript that reads their results now
    for sibling in siblings:
        if sibling.status.value in _UNFINISHED:
            transaction.update(session_ref(sibling.session_id), session_update(delegate_blocking=False))
            reports_to = sibling.tree.parent_transcript or sibling.tree.parent_id or ""
            unfinished.setdefault(reports_to, []).append(sibling.session_id)
        else:
            notes.append(result_note(sibling))
    for transcript_id, child_ids in unfinished.items():
        results.expect(transaction, transcript_id, child_ids)
    return notes


def release(parent: Session, child_ids: list[str]) -> None:
    """A running parent that was about to wait for these children, one of which asked it a question meanwhile, no
    longer waits: one transaction releases them, the ended ones' results queued for it as notes."""

    @firestore.transactional
    def run(transaction: firestore.Transaction) -> None:
        notes = _release_in(transaction, get_children_in(transaction, child_ids))
        if notes:
            transaction.update(session_ref(parent.session_id), appended(notes=list(notes)))

    contended(run)


class AnswerOutcome(StrEnum):
    NOTED = "noted"  # the child runs: it reads the answer at its next turn (or at its pause)
    RESUMED = "resumed"  # the child waited for it: it is queued again
    NOT_ASKED = "not_asked"  # no open question of that child (or not that one), or not this parent's child
    ENDED = "ended"  # the child has ended


@dataclass(frozen=True)
class Answered:
    """What an answer did: its outcome, the question it answered and the child's questions still open after it."""

    outcome: AnswerOutcome
    child: Session | None
    question: ParentQuestion | None = None
    still_open: list[ParentQuestion] = field(default_factory=list)


def answer_child(parent: Session, child_id: str, answer: str, *, released: bool = False,
                 question_id: str | None = None, by: str | None = None) -> Answered:  # fmt: skip
    """The parent's answer to one of its child's open questions (``question_id``, or else the first its paused turn
    waits on, or else its oldest open one), exactly once, to exactly that child. Any session of the parent's
    transcript may answer (the parent, or the continuation that resumed it after asking the operator). ``by``: the
    parent's call that answers (its idempotency key), stored on the question: a re-run of that call after a crash
    finds its own answer and says what it did again, answering nothing else."""
    parent_id = parent.session_id
    ref = session_ref(child_id)
    when = now()

    @firestore.transactional
    def run(transaction: firestore.Transaction) -> Answered:
        data = ref.get(transaction=transaction).to_dict()
        child = Session.from_doc(data) if data else None
        if child is None or data is None or (child.tree.parent_transcript or child.tree.parent_id) != parent.transcript:
            return Answered(AnswerOutcome.NOT_ASKED, None)
        held = parent_questions.of_doc(data)
        again = parent_questions.answered_by(held, by)
        if again is not None:  # this call answered it before a crash: the same outcome, nothing answered twice
            return Answered(AnswerOutcome(again.answered_as or AnswerOutcome.NOTED), child, again,
                            parent_questions.still_open(held))  # fmt: skip
        paused = data.get("status") == SessionStatus.PAUSED.value
        waited = [w.key for w in waiting.record_of(data) if w.kind == WaitKind.PARENT_ANSWER and not w.released]
        asked = parent_questions.pick(held, question_id, waited if paused else [])
        if asked is None:
            return Answered(AnswerOutcome.NOT_ASKED, child, None, parent_questions.still_open(held))
        if child.status.value not in _UNFINISHED or child.stop_requested:  # a child being stopped needs no answer
            return Answered(AnswerOutcome.ENDED, child, asked)

        def answering(outcome: AnswerOutcome) -> dict[str, Any]:
            questions = parent_questions.answered(held, asked.question_id, answer, released=released, at=when,
                                                  by=by, outcome=outcome.value)  # fmt: skip
            update: dict[str, Any] = session_update(parent_questions=questions, updated_at=when)
            if (data.get("parent_question") or {}).get("question_id") == asked.question_id:
                update |= session_update(parent_question=_of(questions, asked.question_id))
            return update

        update = answering(AnswerOutcome.NOTED)
        left = parent_questions.still_open(parent_questions.of_doc({**data, **update}))
        if released and not left:  # its conversation ended: no session will read its questions' record
            child_questions.forget(transaction, parent.transcript, child_id)
        if waiting.waits_on(data, WaitKind.PARENT_ANSWER, asked.question_id):
            # One wait of the child's paused turn: it resumes once everything in its record is resolved.
            found = waiting.check(transaction, child_id, {**data, **update})
            outcome = AnswerOutcome.RESUMED if found else AnswerOutcome.NOTED
            update = answering(outcome)
            if found is not None:
                waiting.wake(transaction, found, trigger_ts=None, user=parent_id, at=when, extra=update)
            else:
                transaction.update(ref, update)
            child.apply(update)
            return Answered(outcome, child, _of(parent_questions.of(child), asked.question_id), left)
        note = Note(kind=NoteKind.PARENT_ANSWER, text=answer, user=parent_id, ts=asked.question_id,
                    question_id=asked.question_id, question=asked.text)  # fmt: skip
        update |= appended(notes=[note])  # it runs: read at its next turn, or at its pause
        transaction.update(ref, update)
        child.apply(update)
        return Answered(AnswerOutcome.NOTED, child, _of(parent_questions.of(child), asked.question_id), left)

    result: Answered = contended(run)
    return result


def _of(questions: list[ParentQuestion], question_id: str) -> ParentQuestion:
    return next(q for q in questions if q.question_id == question_id)


def current_parent(transaction: firestore.Transaction | None, child: Session,
                    parent: Session | None) -> Session | None:  # fmt: skip
    """The session that writes the parent's transcript now: the parent, or a continuation that resumed it."""
    if parent is None:
        return None
    root = parent if parent.session_id == parent.transcript else None
    if root is None:
        data = session_ref(parent.transcript).get(transaction=transaction).to_dict()
        root = Session.from_doc(data) if data else None
    writer = (root.transcript_writer if root else None) or parent.transcript
    if writer == parent.session_id:
        current = parent
    elif root is not None and writer == root.session_id:
        current = root
    else:
        data = session_ref(writer).get(transaction=transaction).to_dict()
        current = Session.from_doc(data) if data else parent
    return _resuming(transaction, current)


def _resuming(transaction: firestore.Transaction | None, session: Session) -> Session:
    """A session that resumed (its paused turn woke) and whose continuation has not claimed the transcript yet:
    that continuation, which will read what is delivered to it (else ``session`` itself)."""
    if session.status != SessionStatus.RESUMED:
        return session
    query = db().collection(SESSIONS).where(filter=FieldFilter("asker_session_id", "==", session.session_id))
    found = [Session.from_doc(snap.to_dict() or {}) for snap in query.get(transaction=transaction)]
    live = [s for s in found if s.status.value in _UNFINISHED]
    return live[0] if live else session


def get_children_in(transaction: firestore.Transaction, child_ids: list[str]) -> list[Session]:
    snaps = [session_ref(c).get(transaction=transaction) for c in child_ids]
    return [Session.from_doc(s.to_dict() or {}) for s in snaps if s.exists]


result_note = results.result_note  # a child's result as news for its parent
